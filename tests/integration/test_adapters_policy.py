"""adapter_id names only adapters the operator listed (--adapters), and finding one never waits for the decode lock."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest

from playground.errors import ParameterError
from playground.types import GenerateParameters


def make_lora(engine, folder: Path) -> None:
    """A small random LoRA for the embedded model, saved as PEFT saves adapters."""
    import peft
    import torch
    from transformers import AutoModelForCausalLM

    base_model = AutoModelForCausalLM.from_config(engine.model.config)
    base_model.load_state_dict(engine.model.state_dict(), strict=False)
    config = peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    torch.manual_seed(0)
    peft.get_peft_model(base_model, config).save_pretrained(folder)


def make_foreign_lora(folder: Path, target: str) -> None:
    """A LoRA made for a small model of other shapes (as a LoRA for another base model is)."""
    import peft
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4
    )
    lora = peft.LoraConfig(r=4, target_modules=[target], init_lora_weights=False)
    peft.get_peft_model(LlamaForCausalLM(config), lora).save_pretrained(folder)


def generate(url: str, adapter_id: str | None = None) -> httpx.Response:
    parameters = {"max_new_tokens": 8, **({"adapter_id": adapter_id} if adapter_id else {})}
    return httpx.post(
        f"{url}/generate", json={"inputs": "The capital of France is", "parameters": parameters}, timeout=120
    )


def test_by_default_no_adapter_is_allowed(server_url: str) -> None:
    response = generate(server_url, "some-org/some-lora")
    assert response.status_code == 422
    assert response.json()["error"] == (
        "adapter_id 'some-org/some-lora' is not allowed on this server "
        "(allowed: none; the operator lists them with --adapters)"
    )


def test_an_adapter_the_operator_listed_is_used_others_refused_and_one_that_does_not_fit_changes_nothing(
    engine, start_server, tmp_path: Path
) -> None:
    """A listed adapter made for another model is a 422 naming the misfit, first or after a good one, and leaves
    the shared model as it was. Before: a 500, and PEFT's half-done injection stayed, so every later request,
    adapter or not, decoded with random LoRA layers (200, garbage); the failed adapter was then served."""
    lora, shapes, embedding = tmp_path / "lora", tmp_path / "shapes", tmp_path / "embedding"
    make_lora(engine, lora)
    make_foreign_lora(shapes, "q_proj")
    make_foreign_lora(embedding, "embed_tokens")
    url = start_server("--no-ui", "--adapters", f"{lora},{shapes},{embedding}")
    plain = generate(url).json()["generated_text"]

    def refused(adapter: Path, reason: str) -> None:
        response = generate(url, str(adapter))
        assert response.status_code == 422, response.text
        assert response.json()["error"].startswith(f"cannot load adapter {str(adapter)!r}: {reason}")
        assert generate(url).json()["generated_text"] == plain

    another = "it was made for another model: its"
    refused(embedding, f"{another} lora_embedding_A for 'model.embed_tokens' has 1000 num_embeddings")
    refused(shapes, f"{another} lora_A for 'model.layers.0.self_attn.q_proj' has 64 in_features, this model's 576")
    adapted = generate(url, str(lora))
    assert adapted.status_code == 200 and adapted.json()["generated_text"] != plain
    assert generate(url).json()["generated_text"] == plain
    refused(embedding, another)
    refused(shapes, another)
    assert generate(url, str(lora)).json()["generated_text"] == adapted.json()["generated_text"]
    # OpenAI's routes take an adapter as `model`, as vLLM serves a LoRA and TGI's chat reads it (it was a 404)
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=120, max_retries=0)
    prompt = {"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}
    assert client.completions.create(model=str(lora), **prompt).choices[0].text == adapted.json()["generated_text"]
    assert client.completions.create(model="embedded", **prompt).choices[0].text == plain
    ask = {"messages": [{"role": "user", "content": "Name a city."}], "max_tokens": 8, "temperature": 0}
    answers = {m: client.chat.completions.create(model=m, **ask) for m in ("embedded", str(lora))}
    assert answers["embedded"].choices[0].message.content != answers[str(lora)].choices[0].message.content
    # the answer names the adapter, and /v1/models lists each listed adapter under its model, as vLLM lists LoRAs
    assert answers[str(lora)].model == str(lora) == client.completions.create(model=str(lora), **prompt).model
    cards = {card.id: card.model_extra for card in client.models.list().data}
    base = cards[str(lora)]["parent"]
    assert cards[base] == {"max_model_len": 8192} and client.chat.completions.create(model=base, **ask).model == base
    assert {str(a): cards[str(a)] for a in (lora, shapes, embedding)} == {
        str(a): {"root": str(a), "parent": base} for a in (lora, shapes, embedding)
    }
    assert client.models.retrieve(str(lora)).model_extra == {"root": str(lora), "parent": base}
    with pytest.raises(openai.NotFoundError) as caught:
        client.completions.create(model=str(tmp_path / "nothing"), **prompt)
    assert str(lora) in caught.value.body["message"]  # among the served names, as /v1/models lists them
    respelled = generate(url, f"{lora}/../lora/")  # every spelling of the listed folder is it (it was a 422)
    assert respelled.status_code == 200 and respelled.json()["generated_text"] == adapted.json()["generated_text"]
    other = generate(url, str(tmp_path))
    assert other.status_code == 422
    assert other.json()["error"].startswith(f"adapter_id {str(tmp_path)!r} is not allowed on this server (allowed: ")


def test_finding_an_adapter_does_not_wait_for_the_decode_lock(engine) -> None:
    pool = ThreadPoolExecutor(max_workers=1)
    engine._busy.acquire()  # as if a long decode held the model
    try:
        future = pool.submit(engine.generate, "hi", GenerateParameters(max_new_tokens=1, adapter_id="/no/such/adapter"))
        error = future.exception(timeout=60)
    finally:
        engine._busy.release()
        pool.shutdown()
    assert isinstance(error, ParameterError)
    assert error.message.startswith("cannot load adapter '/no/such/adapter'")
