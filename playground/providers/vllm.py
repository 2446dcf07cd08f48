"""remote::vllm: vLLM's OpenAI-compatible server, constraints in `structured_outputs`.

vLLM >= 0.10.2 reads `structured_outputs` {json|regex|choice|grammar}; 0.12 removed the older
`guided_json|guided_regex|guided_choice|guided_grammar` fields. `constraint_field: guided` selects the
old fields for old servers. There is no automatic retry with the other field: vLLM accepts unknown
fields and answers 200, so a mismatch shows up as an output that fails validation, and the verdict
then says "not enforced by the provider".
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from playground.constraints import Constraint
from playground.providers import mapping
from playground.providers.base import Capabilities, Inputs
from playground.providers.openai_compat import OpenAICompatProvider
from playground.providers.remote import RemoteConfig
from playground.wire import outbound


class VLLMConfig(RemoteConfig):
    """remote::vllm: base_url ends in /v1, as `vllm serve` prints it."""

    constraint_field: Literal["structured_outputs", "guided"] = Field(
        default="structured_outputs", description="structured_outputs (vLLM >= 0.10.2) or guided_* (older)."
    )


class VLLMProvider(OpenAICompatProvider):
    """vLLM enforces every constraint kind and adds top_k and repetition_penalty to OpenAI's sampling."""

    provider_type: ClassVar[str] = "remote::vllm"
    config_class: ClassVar[type[RemoteConfig]] = VLLMConfig
    dialect: ClassVar[str] = "vllm"
    capabilities: ClassVar[Capabilities] = Capabilities()
    completions_path: ClassVar[str | None] = "completions"

    def constraint_fields(self, constraint: Constraint) -> dict[str, Any]:
        """The grammar kind is sent as text; vLLM's backend (xgrammar or guidance) must accept its syntax."""
        guided = getattr(self.config, "constraint_field", "structured_outputs") == "guided"
        return outbound.vllm_structured(constraint, guided=guided, who=self.who)

    def continuation(self, inputs: Inputs, prefix: str) -> dict[str, Any]:
        """vLLM can resume a partial assistant answer (continue_final_message), so any prefix works."""
        messages = mapping.messages_json(inputs)
        if not prefix:
            return {"messages": messages}
        return {
            "messages": [*messages, {"role": "assistant", "content": prefix}],
            "continue_final_message": True,
            "add_generation_prompt": False,
        }
