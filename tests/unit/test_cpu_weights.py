"""Linear weights laid out for the CPU: MKL's transposed layout for one row, oneDNN's blocked copy for several.

A tiny random Llama (no download). The layouts must change no value beyond float32 rounding, keep tied
embeddings tied, and leave every row of a batch what it is alone; the speed is benchmarks/serve.py's.
"""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM

from playground import cli
from playground.decoding.batch import BatchCache
from playground.decoding.runner import ModelRunner
from playground.models import LoadedModel, cpu_weights
from playground.models.cpu_weights import BatchLinear, pack_for_cpu
from playground.options import LocalOptions
from playground.providers.local import make_local
from tests.support import TinyTokenizer, tiny_llama

ATOL = 1e-4  # float32 GEMMs of other kernels sum in another order: ~1e-6 here, far below any logprob shown


def tiny(dtype: torch.dtype = torch.float32, *, tied: bool = True) -> LlamaForCausalLM:
    return tiny_llama(vocab_size=96, max_position_embeddings=256, tie_word_embeddings=tied).to(dtype)


def logits(model: LlamaForCausalLM, ids: list[list[int]]) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=torch.tensor(ids)).logits


def test_blocked_copies_keep_every_value_and_tied_embeddings() -> None:
    reference, model = tiny(), tiny()
    rows = [[5, 9, 11, 3], [7, 1, 4, 60]]
    pack_for_cpu(model, "on")
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(type(m) is BatchLinear for m in linears)
    assert model.lm_head.weight is model.model.embed_tokens.weight  # still one parameter
    torch.testing.assert_close(logits(model, rows), logits(reference, rows), atol=ATOL, rtol=ATOL)  # oneDNN
    torch.testing.assert_close(logits(model, [[5]]), logits(reference, [[5]]), atol=ATOL, rtol=ATOL)  # MKL


@pytest.mark.parametrize(
    ("shape", "onednn"),
    [
        ((1, 1, 32), False),
        ((1, 2, 32), True),
        ((8, 1, 32), True),
        ((4, 8, 32), True),
        ((1, 33, 32), False),
        ((40, 1, 32), False),
    ],
)
def test_onednn_multiplies_2_to_32_rows_and_mkl_the_rest(
    monkeypatch: pytest.MonkeyPatch, shape: tuple[int, ...], onednn: bool
) -> None:
    model = tiny()
    pack_for_cpu(model, "on")
    layer = model.model.layers[0].mlp.up_proj
    assert not layer.weight.is_contiguous() and layer.weight.t().is_contiguous()  # MKL's layout
    calls = []
    blocked = torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", lambda *a: calls.append(a) or blocked(*a))
    x = torch.randn(*shape)
    with torch.inference_mode():
        out = layer(x)
    assert bool(calls) is onednn
    torch.testing.assert_close(out, torch.nn.functional.linear(x, layer.weight), atol=ATOL, rtol=ATOL)


def test_off_and_unfit_models_keep_one_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    off = tiny()
    assert pack_for_cpu(off, "off") == 0
    assert not any(type(m) is BatchLinear for m in off.modules())
    assert not off.model.layers[0].mlp.up_proj.weight.is_contiguous()  # the one-row layout still applies

    monkeypatch.setattr(cpu_weights, "_memory", lambda: 1024)  # a copy bigger than an eighth of the machine
    small_machine = tiny()
    assert pack_for_cpu(small_machine, "auto") == 0
    assert not any(type(m) is BatchLinear for m in small_machine.modules())

    half = tiny(torch.bfloat16)  # measured for float32 only
    assert pack_for_cpu(half, "on") == 0
    assert not any(type(m) is BatchLinear for m in half.modules())


def test_auto_keeps_a_copy_that_fits_and_reports_its_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_weights, "_memory", lambda: 64 * 2**30)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512))
    assert pack_for_cpu(model, "auto") == 6  # 4 MiB + 2 MiB of float32 weights
    assert type(model[0]) is BatchLinear and type(model[2]) is BatchLinear
    monkeypatch.setattr(cpu_weights, "_memory", lambda: 40 * 2**20)  # an eighth is 5 MiB
    assert pack_for_cpu(torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.Linear(1024, 512)), "auto") == 0


def test_a_changed_moved_or_trained_weight_is_not_multiplied_from_the_old_copy() -> None:
    layer = torch.nn.Linear(16, 8)
    pack_for_cpu(torch.nn.Sequential(layer), "on")
    x = torch.randn(4, 16)
    with torch.inference_mode():
        before = layer(x)
    with torch.no_grad():
        layer.weight.mul_(2.0)  # in place: the version counter moves
    with torch.inference_mode():
        torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
        assert not torch.allclose(layer(x), before)
    replaced = torch.nn.Linear(16, 8)
    pack_for_cpu(torch.nn.Sequential(replaced), "on")
    replaced.weight = torch.nn.Parameter(torch.ones(8, 16))
    with torch.inference_mode():
        torch.testing.assert_close(replaced(x), torch.nn.functional.linear(x, replaced.weight, replaced.bias))
    trained = torch.nn.Linear(16, 8)
    pack_for_cpu(torch.nn.Sequential(trained), "on")
    trained(x).sum().backward()  # grad mode: F.linear, which has a backward
    assert trained.weight.grad is not None and trained.weight.grad.abs().sum() > 0


def test_a_container_limit_below_the_machine_counts(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    monkeypatch.setattr(cpu_weights, "CGROUP_LIMITS", (v2, v1))
    machine = cpu_weights._memory()
    assert machine > 0
    v2.write_text("max\n")  # no limit
    v1.write_text("9223372036854771712\n")  # cgroup v1's "no limit"
    assert cpu_weights._memory() == machine
    v2.write_text(f"{2**30}\n")
    assert cpu_weights._memory() == 2**30


def test_a_torch_without_onednn_linear_keeps_mkl(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(*args: object) -> None:
        raise RuntimeError("Could not run 'mkldnn::_reorder_linear_weight'")

    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", missing)
    model = tiny()
    assert pack_for_cpu(model, "on") == 0
    assert not any(type(m) is BatchLinear for m in model.modules())
    torch.testing.assert_close(logits(model, [[5, 6]]), logits(tiny(), [[5, 6]]), atol=ATOL, rtol=ATOL)


def test_each_row_of_a_batch_sees_what_it_sees_alone_without_the_copy() -> None:
    packed, reference = tiny(), tiny()
    pack_for_cpu(packed, "on")
    runner = ModelRunner(LoadedModel("tiny", packed, TinyTokenizer(()), "cpu", "float32", 0.0))
    plain = ModelRunner(LoadedModel("tiny", reference, TinyTokenizer(()), "cpu", "float32", 0.0))
    prompts = [[3, 4, 5], [9, 8, 7, 6, 5, 4], [11]]
    with torch.inference_mode():
        batch = BatchCache(runner)
        batch.prefill([(None, p) for p in prompts])
        stepped = batch.forward([[20], [21, 22], [23]])
        for prompt, fed, got in zip(prompts, [[20], [21, 22], [23]], stepped):
            alone = plain.forward(plain.ids(prompt + fed), keep=len(fed))[0][0].float()
            torch.testing.assert_close(got, alone, atol=ATOL, rtol=ATOL)


def test_the_flag_reaches_the_loader() -> None:
    assert LocalOptions.from_flags(cli.parse_args([])).cpu_batch_weights == "auto"
    assert LocalOptions.from_flags(cli.parse_args(["--cpu-batch-weights", "off"])).cpu_batch_weights == "off"
    with pytest.raises(SystemExit):
        cli.parse_args(["--cpu-batch-weights", "sometimes"])
    assert make_local(LocalOptions(cpu_batch_weights="on")).load_options["batch_weights"] == "on"
    with pytest.raises(ValueError, match="batch_weights must be one of auto, on, off, not 'ON'"):
        pack_for_cpu(tiny(), "ON")
