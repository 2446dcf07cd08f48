"""remote::hf-inference: Hugging Face Inference Providers through their OpenAI-compatible router.

The router forwards `response_format` json_schema to the provider that serves the model; regex,
choice and grammar have no router field and are refused. Model ids may carry a routing suffix
(`meta-llama/Llama-3.1-8B-Instruct:novita`, `...:fastest`); the router lists the bare ids, so a
suffixed id counts as served when its bare id is listed. The router lists hundreds of models, so
discovery is off by default: only the models the providers file declares are registered.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from playground.providers.openai_compat import OpenAICompatProvider, OpenAIConfig
from playground.providers.remote import RemoteConfig

ROUTER_URL = "https://router.huggingface.co/v1"


class HFInferenceConfig(OpenAIConfig):
    """remote::hf-inference: the router's URL and HF_TOKEN unless told otherwise."""

    base_url: str = ROUTER_URL
    api_key_env: str | None = "HF_TOKEN"
    discover_models: bool = Field(default=False, description="The router lists hundreds of models; declare yours.")


class HFInferenceProvider(OpenAICompatProvider):
    """OpenAI's chat protocol and limits, on Hugging Face's router."""

    provider_type: ClassVar[str] = "remote::hf-inference"
    config_class: ClassVar[type[RemoteConfig]] = HFInferenceConfig

    def serves(self, served: str, listed: list[str]) -> bool:
        return served in listed or served.split(":", 1)[0] in listed
