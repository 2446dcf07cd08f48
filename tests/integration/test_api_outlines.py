"""Outlines' own server clients (OpenAI, vLLM, TGI) get a valid pydantic object through our server."""

from __future__ import annotations

from typing import Literal

import huggingface_hub
import openai
import outlines
import pytest
from huggingface_hub import InferenceClient
from pydantic import BaseModel, ConfigDict, Field


@pytest.fixture(autouse=True)
def hub_reaches_localhost(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite runs with HF_HUB_OFFLINE=1, which blocks every huggingface_hub request; ours go to 127.0.0.1."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)


class Pet(BaseModel):
    """Closed and bounded, so an answer fits in a few tokens."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["cat", "dog"]
    age: int = Field(ge=0, le=30)


def _openai_client(server_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server_url}/v1", api_key="unused", timeout=300, max_retries=0)


def test_from_openai(server_url: str) -> None:
    model = outlines.from_openai(_openai_client(server_url), "embedded")
    pet = Pet.model_validate_json(model("Describe a pet as JSON.", Pet, max_tokens=40, seed=3))
    assert pet.kind in ("cat", "dog")


def test_from_vllm(server_url: str) -> None:
    model = outlines.from_vllm(_openai_client(server_url), "embedded")
    pet = Pet.model_validate_json(model("Describe a pet as JSON.", Pet, max_tokens=40, seed=3))
    assert 0 <= pet.age <= 30


def test_from_tgi(server_url: str) -> None:
    model = outlines.from_tgi(InferenceClient(base_url=server_url, timeout=300))
    pet = Pet.model_validate_json(model("A pet as JSON: ", Pet, max_new_tokens=40, seed=3))
    assert pet.kind in ("cat", "dog")


def test_from_vllm_with_a_regex_and_a_choice(server_url: str) -> None:
    from outlines.types import Regex

    model = outlines.from_vllm(_openai_client(server_url), "embedded")
    assert model("Is water wet?", Literal["yes", "no"], max_tokens=5, seed=1) in ("yes", "no")
    code = model("Give a 3-digit code.", Regex(r"[0-9]{3}"), max_tokens=6, seed=1)
    assert len(code) == 3 and code.isdigit()
