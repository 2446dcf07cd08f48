"""adapter_id names only adapters the operator listed (--adapters), and finding one never waits for the decode lock."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

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


def test_an_adapter_the_operator_listed_is_used_and_others_refused(engine, start_server, tmp_path: Path) -> None:
    make_lora(engine, tmp_path / "lora")
    url = start_server("--no-ui", "--adapters", str(tmp_path / "lora"))
    plain = generate(url).json()["generated_text"]
    adapted = generate(url, str(tmp_path / "lora"))
    assert adapted.status_code == 200 and adapted.json()["generated_text"] != plain
    assert generate(url).json()["generated_text"] == plain
    other = generate(url, str(tmp_path))
    assert other.status_code == 422
    assert other.json()["error"] == (
        f"adapter_id {str(tmp_path)!r} is not allowed on this server (allowed: {tmp_path / 'lora'})"
    )


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
