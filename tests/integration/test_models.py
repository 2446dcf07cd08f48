"""The embedded GGUF is dequantized once; the next load reads the cached weights and gives the same model."""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest
import torch

from playground import models


def test_second_load_comes_from_cache_with_identical_logits(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path))
    parsed: list[str] = []

    class Reader(gguf.GGUFReader):  # (counts the GGUF's parses: tokenizer, config, weights and blocks share one)
        def __init__(self, path: object, mode: str = "r") -> None:
            parsed.append(str(path))
            super().__init__(path, mode)

    monkeypatch.setattr(gguf, "GGUFReader", Reader)
    first = models.load_model("embedded", threads=1)
    assert [Path(p).resolve() for p in parsed] == [models.embedded_gguf_path().resolve()]
    cached = list(tmp_path.glob("gguf-*"))
    kernels = sorted(p.name for p in (tmp_path / "kernels").iterdir())
    second = models.load_model("embedded", threads=1)

    assert (first.from_cache, second.from_cache) == (False, True)
    assert [p.name for p in cached] == [p.name for p in tmp_path.iterdir() if p.name != "kernels"]
    # the probe's verdicts (blocked copies, GGUF blocks) and the GGUF kernels' build, each made once
    assert [name.rsplit(".", 1)[-1] for name in kernels] == ["json", "json", "so"]
    assert sorted(p.name for p in (tmp_path / "kernels").iterdir()) == kernels
    assert (cached[0] / "model.safetensors").is_file() and (cached[0] / "gguf-blocks.safetensors").is_file()
    assert (first.device, first.model_id) == (models.pick_device(), models.EMBEDDED_NAME)
    assert (second.device, second.dtype) == (first.device, first.dtype)

    ids = first.tokenizer("The capital of France is", return_tensors="pt").input_ids
    assert second.tokenizer("The capital of France is", return_tensors="pt").input_ids.tolist() == ids.tolist()
    with torch.no_grad():
        logits_first = first.model(ids).logits
        logits_second = second.model(ids).logits
    assert torch.equal(logits_first, logits_second)
