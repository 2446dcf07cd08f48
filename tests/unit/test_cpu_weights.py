"""Linear weights laid out for the CPU: MKL's transposed layout for one row, oneDNN's blocked copy for several.

A tiny random Llama (no download). The layouts must change no value beyond float32 rounding, keep tied
embeddings tied, and leave every row of a batch what it is alone; each row count goes to the kernel the
probe chose for its shape. Which kernel is faster is timing, so the routing tests give the probe's verdicts
(`probe=`); the real probe is run once for its form. The speed is benchmarks/serve.py's.
"""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM

from playground import cli
from playground.decoding.batch import BatchCache
from playground.decoding.runner import ModelRunner
from playground.models import LoadedModel, cpu_weights, kernel_probe
from playground.models.cpu_weights import BatchLinear, pack_for_cpu
from playground.models.kernel_probe import PROBED_ROWS
from playground.options import LocalOptions
from playground.providers.local import make_local
from tests.support import TinyTokenizer, tiny_llama

ATOL = 1e-4  # float32 GEMMs of other kernels sum in another order: ~1e-6 here, far below any logprob shown


def always(layers: object) -> list[int]:
    """A probe's verdict: the blocked copy wins at every probed count."""
    return list(PROBED_ROWS)


def tiny(dtype: torch.dtype = torch.float32, *, tied: bool = True) -> LlamaForCausalLM:
    return tiny_llama(vocab_size=96, max_position_embeddings=256, tie_word_embeddings=tied).to(dtype)


def logits(model: LlamaForCausalLM, ids: list[list[int]]) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=torch.tensor(ids)).logits


def test_blocked_copies_keep_every_value_and_tied_embeddings() -> None:
    reference, model = tiny(), tiny()
    rows = [[5, 9, 11, 3], [7, 1, 4, 60]]
    pack_for_cpu(model, "on", probe=always)
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(type(m) is BatchLinear for m in linears)
    assert model.lm_head.weight is model.model.embed_tokens.weight  # still one parameter
    torch.testing.assert_close(logits(model, rows), logits(reference, rows), atol=ATOL, rtol=ATOL)  # oneDNN
    torch.testing.assert_close(logits(model, [[5]]), logits(reference, [[5]]), atol=ATOL, rtol=ATOL)  # MKL


@pytest.mark.parametrize(
    ("wins", "shape", "onednn"),
    [
        ((2, 3, 4, 6, 8, 12, 16, 24, 32), (1, 1, 32), False),  # one row: MKL whatever the probe says
        ((2, 3, 4, 6, 8, 12, 16, 24, 32), (1, 2, 32), True),
        ((2, 3, 4, 6, 8, 12, 16, 24, 32), (4, 8, 32), True),  # rows: every token of every sequence
        ((2, 3, 4, 6, 8, 12, 16, 24, 32), (1, 33, 32), True),  # between probed counts: the lower one's verdict
        ((2, 3, 4, 6, 8, 12, 16, 24, 32), (1, 48, 32), False),
        ((8, 12, 16), (1, 4, 32), False),  # where an AVX2 machine's probe may start later...
        ((8, 12, 16), (8, 1, 32), True),
        ((8, 12, 16), (1, 20, 32), True),
        ((8, 12, 16), (1, 24, 32), False),  # ...and stop sooner
        ((2, 64), (1, 65, 32), False),  # past the last probed count: MKL, as for a long prompt
    ],
)
def test_each_row_count_goes_to_the_kernel_its_shape_s_probe_chose(
    monkeypatch: pytest.MonkeyPatch, wins: tuple[int, ...], shape: tuple[int, ...], onednn: bool
) -> None:
    model = tiny()
    pack_for_cpu(model, "on", probe=lambda layers: list(wins))
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


def test_a_shape_the_probe_never_favours_keeps_no_copy() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 32), torch.nn.Linear(32, 64))
    verdicts = {(64, 64): [8, 16], (64, 32): [], (32, 64): [2]}
    kept = pack_for_cpu(model, "on", probe=lambda layers: verdicts[(layers[0][0].shape[1], layers[0][0].shape[0])])
    assert [type(m) is BatchLinear for m in model] == [True, False, True]
    assert not hasattr(model[1], "blocked_weight")  # its copy is not held either
    assert kept == round((64 * 64 + 32 * 64) * 4 / 2**20)


def test_the_probe_runs_once_per_machine_and_model(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setattr(kernel_probe, "busy", lambda: False)
    probed = []

    def probe(layers: list[tuple[torch.Tensor, ...]]) -> list[int]:
        probed.append(tuple(layers[0][0].shape))
        return [2, 4, 8]

    pack_for_cpu(tiny(), "on", tmp_path, probe)
    shapes = len(probed)
    assert shapes == len({tuple(m.weight.shape) for m in tiny().modules() if isinstance(m, torch.nn.Linear)})
    again = tiny()
    pack_for_cpu(again, "on", tmp_path, probe)  # cached: not probed again, routed the same
    assert len(probed) == shapes and again.model.layers[0].mlp.up_proj.blocked_rows[:9] == (
        (False, False, True, False, True, True, False, False, True)  # counts take the probed one at or below
    )
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # another ISA cap is another machine
    pack_for_cpu(tiny(), "on", tmp_path, probe)
    assert len(probed) == 2 * shapes
    for cached in tmp_path.iterdir():
        cached.write_text("{not json")  # a damaged file is probed again
    pack_for_cpu(tiny(), "on", tmp_path, probe)
    assert len(probed) == 3 * shapes


def test_verdicts_probed_on_a_busy_machine_are_replaced_at_the_first_quiet_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    probed = []

    def probe(layers: list[tuple[torch.Tensor, ...]]) -> list[int]:
        probed.append(tuple(layers[0][0].shape))
        return [2]

    shapes = len({tuple(m.weight.shape) for m in tiny().modules() if isinstance(m, torch.nn.Linear)})
    monkeypatch.setattr(kernel_probe, "busy", lambda: True)
    pack_for_cpu(tiny(), "on", tmp_path, probe)
    pack_for_cpu(tiny(), "on", tmp_path, probe)  # still busy: the busy verdicts serve
    assert len(probed) == shapes
    monkeypatch.setattr(kernel_probe, "busy", lambda: False)
    pack_for_cpu(tiny(), "on", tmp_path, probe)  # quiet now: probed again, and these verdicts stay
    pack_for_cpu(tiny(), "on", tmp_path, probe)
    assert len(probed) == 2 * shapes


def test_busy_reads_the_load_against_this_process_s_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernel_probe, "container_cpus", lambda: 2)
    monkeypatch.setattr(kernel_probe.os, "getloadavg", lambda: (2.5, 1.0, 1.0))
    assert kernel_probe.busy()
    monkeypatch.setattr(kernel_probe.os, "getloadavg", lambda: (1.2, 1.0, 1.0))
    assert not kernel_probe.busy()


def test_the_real_probe_times_both_kernels_at_every_probed_count() -> None:
    layer = torch.nn.Linear(64, 48)
    with torch.no_grad():
        blocked = torch.ops.mkldnn._reorder_linear_weight(layer.weight.data, cpu_weights.BLOCKED_FOR_ROWS)
    wins = kernel_probe.measure([(layer.weight.data.t().contiguous().t(), blocked, layer.bias)])
    assert set(wins) <= set(PROBED_ROWS) and wins == sorted(wins)


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
    assert pack_for_cpu(model, "auto", probe=always) == 6  # 4 MiB + 2 MiB of float32 weights
    assert type(model[0]) is BatchLinear and type(model[2]) is BatchLinear
    monkeypatch.setattr(cpu_weights, "_memory", lambda: 40 * 2**20)  # an eighth is 5 MiB
    unfit = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.Linear(1024, 512))
    assert pack_for_cpu(unfit, "auto", probe=always) == 0


def test_a_changed_moved_or_trained_weight_is_not_multiplied_from_the_old_copy() -> None:
    layer = torch.nn.Linear(16, 8)
    pack_for_cpu(torch.nn.Sequential(layer), "on", probe=always)
    x = torch.randn(4, 16)
    with torch.inference_mode():
        before = layer(x)
    with torch.no_grad():
        layer.weight.mul_(2.0)  # in place: the version counter moves
    with torch.inference_mode():
        torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
        assert not torch.allclose(layer(x), before)
    replaced = torch.nn.Linear(16, 8)
    pack_for_cpu(torch.nn.Sequential(replaced), "on", probe=always)
    replaced.weight = torch.nn.Parameter(torch.ones(8, 16))
    with torch.inference_mode():
        torch.testing.assert_close(replaced(x), torch.nn.functional.linear(x, replaced.weight, replaced.bias))
    trained = torch.nn.Linear(16, 8)
    pack_for_cpu(torch.nn.Sequential(trained), "on", probe=always)
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
    pack_for_cpu(packed, "on", probe=always)
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
