"""POST /score: every answer a constraint allows, with its exact probability, on a prompt or a chat."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import Field, field_validator
from starlette.concurrency import run_in_threadpool

from playground.debug.score import ScoreResult, score
from playground.errors import ParameterError
from playground.providers import base
from playground.server.tgi import ModelQuery, resolve
from playground.types import ChatMessage, GenerateParameters, Strict, ToolSpec
from playground.types.base import InputText, Name
from playground.types.chat import check_messages_size
from playground.types.sizes import MAX_MESSAGES
from playground.wire import tools
from playground.wire.controls import SAMPLING

router = APIRouter(tags=["Scoring and evaluation"])
TOOL_NAME_PREFIX = '{"name": '  # where a call's tool name starts (tool_choice "required")


class ScoreRequest(Strict):
    """Body of POST /score: TGI's `inputs` and `parameters` (with a grammar), or chat `messages` (with `tools`
    to score the tool names)."""

    inputs: InputText | None = None
    messages: list[ChatMessage] | None = Field(default=None, min_length=1, max_length=MAX_MESSAGES)
    parameters: GenerateParameters = Field(default_factory=GenerateParameters)
    tools: list[ToolSpec] | None = Field(default=None, min_length=1, max_length=64)
    tool_prompt: str | None = Field(default=None, max_length=4000)
    model: Name | None = None

    @field_validator("messages")
    @classmethod
    def _messages_size(cls, messages: list[ChatMessage] | None) -> list[ChatMessage] | None:
        return messages and check_messages_size(messages)

    def prepared(self) -> tuple[str | list[ChatMessage], GenerateParameters]:
        """The prompt and parameters to score; with tools, the call's name position under tool_choice required."""
        if (self.inputs is None) == (self.messages is None):
            raise ParameterError("give exactly one of `inputs` (a prompt) or `messages` (a chat)", field="inputs")
        if self.inputs is not None:
            if self.tools:
                raise ParameterError("tools: score tool names on `messages` (a chat)", field="tools")
            return self.inputs, self.parameters
        messages = list(self.messages or [])
        if not self.tools:
            return messages, self.parameters
        if self.parameters.grammar is not None:
            raise ParameterError("tools: give tools or a grammar, not both", field="tools")
        request = tools.ToolsConstraint(tools=self.tools, tool_choice="required", tool_prompt=self.tool_prompt)
        values = self.parameters.model_dump(exclude_unset=True)
        values["grammar"] = tools.grammar(request, None)
        values.setdefault("continue_from", TOOL_NAME_PREFIX)
        return tools.with_tools(request, messages), GenerateParameters(**values)


@router.post("/score", summary="Every answer the constraint allows, ranked by its exact probability")
async def score_route(request: Request, body: ScoreRequest, model: str | None = ModelQuery) -> ScoreResult:
    """Choices, a JSON enum after `parameters.continue_from`, a small regex or grammar, or tool names."""
    provider, model_id = resolve(request, body.model or model)
    engine = base.local_engine(provider, model_id, "scoring alternatives")
    inputs, params = body.prepared()
    result = await run_in_threadpool(score, engine, inputs, params)
    result.warnings += sampling_warnings(body.parameters)
    return result


def sampling_warnings(params: GenerateParameters) -> list[str]:
    """The sampling settings a client sent, which scoring does not apply: it reads the model's own distribution."""
    sent = [c.name for c in SAMPLING if getattr(params, c.name) is not None]
    sent += [name for name in ("do_sample", "presence_penalty", "logit_bias", "watermark") if getattr(params, name)]
    if not sent:
        return []
    return [f"{', '.join(sent)}: accepted and ignored (scoring reads the model's own distribution, before sampling)"]
