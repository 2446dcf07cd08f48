"""A GGUF's layers multiplied from the file's own blocks (playground/models/quant_weights.py, qlinear.c), and the
same library's attention for a decode step.

The kernel is compiled here, as on a user's machine, and checked against float32 products of the same
weights for every row count a batch can have; every GGUF block type read (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K)
must dequantize as gguf's own dequantizer does, and the embedded GGUF's blocks bit for bit to the weights
transformers loaded (q and k rows reordered, the tied output layer included); layers route
the row counts the probe chose (given here: speed is benchmarks/decode.py's) and fall back to float32
once their weight changes. Greedy tokens and logprobs stay those of the float32 weights. The attention gives
sdpa's output for one new query per row, over a batch's padded rows and a cache's views of larger buffers.
"""

from __future__ import annotations

import logging
import platform

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from playground import cli
from playground.models import EMBEDDED, embedded_gguf_path, load_model, quant_weights
from playground.models.cpu_weights import BatchLinear, blocked_mb, pack_for_cpu
from playground.models.kernel_probe import QUANT_ROWS
from playground.models.quant_weights import Blocks, QuantMatmul
from playground.options import LocalOptions
from playground.providers.local import make_local

ATOL = 1e-4  # float32 sums in another order: ~1e-6 here, far below any logprob shown
# A float32 sum in another order differs by a few units of its terms' magnitude: 512 terms of a Q6_K row once
# reached 1.3e-4 relative where the products cancel. Far below any logprob shown.
SUM_RTOL = 1e-5


def assert_products_close(got: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None):
    """`got` is x @ weight^T (+ bias) within float32's error for sums of these terms."""
    want = F.linear(x, weight, bias)
    scale = F.linear(x.abs(), weight.abs()) + (0 if bias is None else bias.abs())
    assert got.shape == want.shape
    worst = ((got - want).abs() - SUM_RTOL * scale).max()
    assert worst <= 1e-6, f"off by {worst:.3g} beyond the float32 bound for these sums"


# The paths qlinear.c takes: this machine's widest, then (on x86) AVX2 and portable C built by capping -march=native.
BUILDS = {"native": ""}
if platform.machine() in ("x86_64", "AMD64"):
    BUILDS.update({"avx2": "-mno-avx512f", "portable": "-mno-avx512f -mno-avx2 -mno-fma"})


@pytest.fixture(scope="module", params=list(BUILDS))
def kernels(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> quant_weights.Kernels:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CFLAGS", BUILDS[request.param])
        built = quant_weights.build(tmp_path_factory.mktemp("kernels"))
    assert built is not None, "qlinear.c must compile here (make test installs a C compiler)"
    if request.param == "portable":
        assert built.isa == "portable"
    return built


@pytest.fixture(scope="module")
def plain():
    """The embedded model with float32 weights only (no GGUF blocks, no blocked copies): the reference."""
    return load_model(EMBEDDED, threads=1, batch_weights="off", gguf_kernels="off")


def random_blocks(format: str, out: int, blocks: int, seed: int = 0) -> Blocks:
    generator = torch.Generator().manual_seed(seed)
    d = torch.rand(out, blocks * (2 if format == "Q8_16" else 1), generator=generator).half().float() / 8
    if format == "Q4_1":
        qs = torch.randint(0, 256, (out, blocks, 16), dtype=torch.uint8, generator=generator)
        m = -torch.rand(out, blocks, generator=generator).half().float()
        return Blocks(format, qs, d, m)
    qs = torch.randint(-128, 128, (out, blocks, 32), dtype=torch.int8, generator=generator)
    return Blocks(format, qs, d, None)


@pytest.mark.parametrize("format", ["Q4_1", "Q8_0", "Q8_16"])
def test_the_kernel_matches_float32_products_of_the_dequantized_weight(kernels, format: str) -> None:
    blocks = random_blocks(format, out=41, blocks=6)  # an odd count: the last feature goes alone
    weight, bias = blocks.dequantize(), torch.randn(41)
    matmul = kernels.matmul(blocks)
    for rows in [*range(1, 18), 33]:  # every pass width (8 rows at a time) and its remainders
        x = torch.randn(rows, 192)
        assert_products_close(matmul(x, None), x, weight)
        assert_products_close(matmul(x, bias), x, weight, bias)
    x = torch.randn(2, 3, 192)[:, ::2]  # leading dimensions, not contiguous
    assert_products_close(matmul(x, bias), x, weight, bias)
    threads = torch.get_num_threads()
    x = torch.randn(5, 192)
    try:
        torch.set_num_threads(1)
        one = matmul(x, bias)
        for split in (2, 3, 64):  # output features split across threads (64: more threads than passes)
            torch.set_num_threads(split)
            assert torch.equal(matmul(x, bias), one), f"{split} threads"
    finally:
        torch.set_num_threads(threads)
    assert_products_close(one, x, weight, bias)


@pytest.mark.parametrize("format", ["Q4_1", "Q8_0", "Q8_16"])
def test_a_row_s_product_is_the_same_bit_for_bit_alone_or_in_a_batch(kernels, format: str) -> None:
    """A batch's sums are added LANES at a time (vsums) where a lone row's go one by one (vsum): in the same
    order, so a request's logits do not depend on who else is in its batch."""
    blocks = random_blocks(format, out=37, blocks=5, seed=3)
    matmul, bias = kernels.matmul(blocks), torch.randn(37)
    x = torch.randn(19, 160)
    alone = torch.cat([matmul(x[i : i + 1], bias) for i in range(len(x))])
    for width in (2, 3, 5, 8, 19):
        together = torch.cat([matmul(x[i : i + width], bias) for i in range(0, len(x), width)])
        assert torch.equal(together, alone), f"{format}, {width} rows at a time"


# GGUF block type -> (weights per block, the offsets of its float16 scales in a block, the layout it is read into)
GGUF_TYPES = {
    "Q4_0": (32, [0], "Q8_0"),
    "Q4_1": (32, [0, 2], "Q4_1"),
    "Q5_0": (32, [0], "Q8_0"),
    "Q8_0": (32, [0], "Q8_0"),
    "Q4_K": (256, [0, 2], "Q4_1"),
    "Q6_K": (256, [208], "Q8_16"),
}


@pytest.mark.parametrize("kind", list(GGUF_TYPES))
def test_every_gguf_block_type_read_dequantizes_as_the_gguf_reader_does(kernels, kind: str) -> None:
    """Random blocks of each type (finite scales): what transformers loads (gguf's dequantizer) bit for bit, and
    the kernel's products of them."""
    from gguf import GGMLQuantizationType, dequantize

    per, halves, layout = GGUF_TYPES[kind]
    rng = np.random.default_rng(7)
    size = quant_weights.GGUF_BLOCK_BYTES[kind]
    raw = rng.integers(0, 256, (6, 512 // per * size), dtype=np.uint8)
    each = raw.reshape(6, -1, size)
    for at in halves:
        scale = (rng.random(each.shape[:2]) / 8).astype(np.float16)
        each[..., at : at + 2] = scale.view(np.uint8).reshape(*each.shape[:2], 2)
    expected = torch.from_numpy(dequantize(raw, GGMLQuantizationType[kind]))
    blocks = Blocks.from_gguf(kind, raw)
    assert blocks.format == layout and blocks.shape == (6, 512)
    assert torch.equal(blocks.dequantize(), expected)
    x = torch.randn(3, 512)
    assert_products_close(kernels.matmul(blocks)(x, None), x, expected)


def test_every_layer_of_the_embedded_gguf_finds_its_blocks(plain) -> None:
    model = plain.model
    found = dict(quant_weights.gguf_blocks(embedded_gguf_path(), model))
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert set(found) == set(linears)  # 7 per layer and the output layer, tied to the embeddings
    for module, blocks in found.items():
        assert torch.equal(blocks.dequantize(), module.weight)
    assert found[model.lm_head].format == "Q8_0" and found[model.model.layers[0].mlp.up_proj].format == "Q4_1"


def test_layers_route_the_probed_row_counts_to_the_blocks_and_keep_the_float32_results(plain, tmp_path) -> None:
    loaded = load_model(EMBEDDED, threads=1, batch_weights="off", gguf_kernels="off")
    model, saved = loaded.model, tmp_path / "blocks.safetensors"
    for module in model.modules():  # (as loaded, before pack_for_cpu laid the weights out for MKL)
        if type(module) is torch.nn.Linear:
            module.weight.data = module.weight.data.contiguous()
    mlp_in = (1536, 576)  # blocked copies: the MLP's gate and up at 8 rows (the blocks' too: dropped), others at 2

    def blocked_at(layers: list) -> list[int]:
        return [8] if tuple(layers[0][0].shape) == mlp_in else [2]

    copies_mb = pack_for_cpu(model, "on", tmp_path, probe=blocked_at)
    kept = quant_weights.attach(model, embedded_gguf_path(), "auto", tmp_path, saved, probe=lambda layers: [1, 8])
    assert 90 < kept < 120 and saved.is_file()  # Q4_1 at 6 bits a weight here, the output layer at 8.5 + 32 bits
    linears = [m for m in model.modules() if type(m) is BatchLinear]
    mlp = [m for m in linears if tuple(m.weight.shape) == mlp_in]
    assert len(mlp) == 60 and all(m.blocked_rows == () and not hasattr(m, "blocked_weight") for m in mlp)
    assert all(m.blocked_rows[2] and m.blocked_weight is not None for m in linears if m not in mlp)
    assert blocked_mb(model) == round(sum(m.weight.numel() * 4 for m in linears if m not in mlp) / 2**20)
    assert copies_mb - blocked_mb(model) == 203  # MB: 60 x 1536 x 576 float32 weights, each side rounded
    up = model.model.layers[3].mlp.up_proj
    assert type(up) is BatchLinear and up.quant_rows[:10] == (
        False,
        True,
        False,
        False,
        False,
        False,
        False,
        False,
        True,
        True,
    )
    calls = []
    original = QuantMatmul.__call__

    def spy(self: QuantMatmul, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        calls.append(x.numel() // x.shape[-1])
        return original(self, x, bias)

    ids = [[5, 9, 11, 3, 7, 1, 4, 60]]
    with torch.inference_mode(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(QuantMatmul, "__call__", spy)
        for rows in ([ids[0][:1]], [ids[0][:2]], ids):
            got = model(input_ids=torch.tensor(rows)).logits.log_softmax(-1)
            want = plain.model(input_ids=torch.tensor(rows)).logits.log_softmax(-1)
            torch.testing.assert_close(got, want, atol=ATOL, rtol=ATOL)  # ~-20 for unlikely tokens: relative
            top = want.topk(10, dim=-1).indices  # what the panels show: within 1e-4 outright
            torch.testing.assert_close(got.gather(-1, top), want.gather(-1, top), atol=ATOL, rtol=0)
        assert sorted(set(calls)) == [1, 8]  # 2 rows: the blocked copies, or float32 where they went
        assert len(calls) == 2 * 211
        calls.clear()
        tokens = model.generate(torch.tensor(ids), max_new_tokens=12, do_sample=False, pad_token_id=0)
        assert calls  # the lone rows of decoding went to the blocks...
        assert torch.equal(
            tokens, plain.model.generate(torch.tensor(ids), max_new_tokens=12, do_sample=False, pad_token_id=0)
        )  # ...and chose the same tokens
        calls.clear()
        with torch.no_grad():
            up.weight.mul_(2)  # changed in place: its blocks are stale
        x = torch.randn(1, 576)
        assert_products_close(up(x), x, up.weight)
        assert calls == []


def test_saved_blocks_are_reused_and_a_damaged_file_is_read_again(plain, tmp_path, monkeypatch) -> None:
    saved = tmp_path / "blocks.safetensors"
    first = quant_weights._blocks(embedded_gguf_path(), plain.model, saved)
    read = []
    monkeypatch.setattr(quant_weights, "gguf_blocks", lambda *args: read.append(args) or iter(first))
    again = quant_weights._blocks(embedded_gguf_path(), plain.model, saved)
    assert not read
    again_by, first_by = dict(again), dict(first)
    assert set(again_by) == set(first_by)
    for module, blocks in first_by.items():
        assert all(
            torch.equal(a, b)
            for a, b in zip(vars(blocks).values(), vars(again_by[module]).values())
            if isinstance(a, torch.Tensor)
        )
    saved.write_bytes(b"not safetensors")
    quant_weights._blocks(embedded_gguf_path(), plain.model, saved)
    assert len(read) == 1
    # blocks saved by a version that read fewer GGUF types (no list of them, or another) are read again
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(saved))
    for types in ({}, {quant_weights.READ_TYPES_KEY: "Q4_1,Q8_0"}):
        save_file(tensors, str(saved), metadata={**types, **{"lm_head": "Q8_0"}})
        quant_weights._blocks(embedded_gguf_path(), plain.model, saved)
    assert len(read) == 3


def test_without_a_compiler_or_when_off_nothing_changes(monkeypatch, tmp_path, caplog) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 32))
    assert quant_weights.attach(model, embedded_gguf_path(), "off", tmp_path) == 0
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with caplog.at_level(logging.INFO, logger="playground.models.quant_weights"):
        assert quant_weights.build(tmp_path) is None
        assert quant_weights.attach(model, embedded_gguf_path(), "auto", tmp_path) == 0
    assert "no C compiler (/nonexistent/cc)" in caplog.text
    assert type(model[0]) is torch.nn.Linear
    with pytest.raises(ValueError, match="gguf_kernels must be one of auto, off, not 'on'"):
        quant_weights.attach(model, embedded_gguf_path(), "on", tmp_path)


def test_a_gguf_whose_weights_differ_from_the_loaded_model_keeps_float32(plain) -> None:
    blocks = random_blocks("Q4_1", out=4, blocks=2)
    assert quant_weights._aligned(blocks, blocks.dequantize()[[2, 0, 3, 1]]).qs.equal(blocks.qs[[2, 0, 3, 1]])
    other = blocks.dequantize().clone()
    other[1, 5] += 1e-3
    assert quant_weights._aligned(blocks, other) is None


def test_the_flag_reaches_the_loader() -> None:
    assert LocalOptions.from_flags(cli.parse_args([])).cpu_gguf_kernels == "auto"
    assert LocalOptions.from_flags(cli.parse_args(["--cpu-gguf-kernels", "off"])).cpu_gguf_kernels == "off"
    with pytest.raises(SystemExit):
        cli.parse_args(["--cpu-gguf-kernels", "on"])
    assert make_local(LocalOptions(cpu_gguf_kernels="off")).load_options["gguf_kernels"] == "off"


def sdpa_heads(q, keys, values, allowed, scale) -> torch.Tensor:
    """torch's attention for the same tensors, its heads side by side (rows x 1 x heads * dim)."""
    mask = None if allowed is None else allowed.bool()[:, None, None, :]
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=scale, enable_gqa=True)
    return out.transpose(1, 2).reshape(q.shape[0], 1, -1)


@pytest.mark.parametrize(
    ("rows", "heads", "kv_heads", "dim", "positions"),
    [
        (1, 9, 3, 64, 1),  # a first token: its own key alone
        (1, 9, 3, 64, 50),
        (8, 9, 3, 64, 37),  # keys not a whole number of vectors
        (3, 4, 1, 128, 300),
        (2, 8, 8, 48, 17),  # no grouping, a head size the kernel does not specialize
        (5, 16, 2, 32, 1000),
    ],
)
@pytest.mark.parametrize("threads", [1, 2])
def test_the_attention_is_sdpa_s_for_one_query_a_row(
    kernels, rows: int, heads: int, kv_heads: int, dim: int, positions: int, threads: int
) -> None:
    generator = torch.Generator().manual_seed(rows * positions)
    q = torch.randn(rows, heads, 1, dim, generator=generator)
    # the cache's keys and values: views of buffers with room for more positions, as a grown cache holds them
    buffers = torch.randn(2, rows, kv_heads, positions + 24, dim, generator=generator) * 3
    keys, values = buffers[0, :, :, :positions], buffers[1, :, :, 5 : positions + 5]
    allowed = torch.ones(rows, positions, dtype=torch.uint8)
    for row in range(1, rows):  # a batch's rows joined later: padding on their left
        allowed[row, : (row * 7) % positions] = 0
    scale = dim**-0.5
    with _threads(threads):
        got = kernels.attend(q, keys, values, allowed, scale)
        alone = kernels.attend(q, keys, values, None if rows == 1 else allowed, scale)
    if dim % 16 and kernels.isa == "avx512":  # no whole number of AVX-512's 16-float vectors: left to sdpa
        assert got is None and alone is None
        return
    assert got is not None and alone is not None
    # float32 sums of up to 1,000 terms of a few units, in another order than sdpa's
    torch.testing.assert_close(got, sdpa_heads(q, keys, values, allowed, scale), atol=2e-5, rtol=1e-5)
    if rows == 1:  # no mask at all: every key
        torch.testing.assert_close(alone, sdpa_heads(q, keys, values, None, scale), atol=2e-5, rtol=1e-5)


def test_the_attention_s_edges_are_sdpa_s(kernels) -> None:
    """Keys far below the best one weigh nothing (not garbage), a NaN score makes the row NaN as in sdpa, a row
    that sees no key gets zeros, and the output is float32 whatever torch's default dtype."""
    q = torch.ones(2, 4, 1, 16)
    keys = torch.zeros(2, 2, 6, 16)
    keys[:, :, 0] = 1.0
    keys[:, :, 1] = -2.5e6  # scores 1e7 below the others (q . k = -4e7, scaled by 1/4)
    keys[:, :, 2] = -4.5e6
    values = torch.randn(2, 2, 6, 16, generator=torch.Generator().manual_seed(0))
    allowed = torch.ones(2, 6, dtype=torch.uint8)
    torch.testing.assert_close(
        kernels.attend(q, keys, values, allowed, 0.25), sdpa_heads(q, keys, values, allowed, 0.25), atol=1e-5, rtol=0
    )
    broken = keys.clone()
    broken[1, 0, 3, 0] = float("nan")  # row 1, key-value head 0: its two query heads
    got, want = kernels.attend(q, broken, values, allowed, 0.25), sdpa_heads(q, broken, values, allowed, 0.25)
    assert torch.equal(got.isnan(), want.isnan()) and bool(got.isnan().any())
    torch.testing.assert_close(got.nan_to_num(), want.nan_to_num(), atol=1e-5, rtol=0)
    allowed[0] = 0  # (a lean step never asks this: a row's new token always sees itself)
    assert torch.equal(kernels.attend(q, keys, values, allowed, 0.25)[0], torch.zeros(1, 64))
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        got = kernels.attend(q, keys, values, None, 0.25)
    finally:
        torch.set_default_dtype(before)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, sdpa_heads(q, keys, values, None, 0.25), atol=1e-5, rtol=0)


def test_the_attention_declines_what_it_does_not_take(kernels) -> None:
    q, keys = torch.randn(2, 4, 1, 64), torch.randn(2, 2, 10, 64)
    assert kernels.attend(q, keys, keys, None, 0.125) is not None
    assert kernels.attend(torch.randn(2, 4, 3, 64), keys, keys, None, 0.125) is None  # several queries a row
    assert kernels.attend(q.double(), keys.double(), keys.double(), None, 0.125) is None
    assert kernels.attend(q, keys.transpose(2, 3).contiguous().transpose(2, 3), keys, None, 0.125) is None
    assert kernels.attend(q, keys, keys, torch.ones(2, 10, dtype=torch.bool), 0.125) is None  # (uint8 flags)
    assert kernels.attend(q, keys, keys, torch.ones(2, 9, dtype=torch.uint8), 0.125) is None
    odd = torch.randn(2, 4, 1, 12), torch.randn(2, 2, 10, 12)  # a head size that is no whole vector
    assert kernels.attend(odd[0], odd[1], odd[1], None, 0.125) is None
    assert kernels.attend(torch.randn(2, 5, 1, 64), keys, keys, None, 0.125) is None  # heads not in groups


class _threads:
    """torch's thread count for a block (the kernel splits rows' heads across it)."""

    def __init__(self, count: int) -> None:
        self.count, self.before = count, torch.get_num_threads()

    def __enter__(self) -> None:
        torch.set_num_threads(self.count)

    def __exit__(self, *_: object) -> None:
        torch.set_num_threads(self.before)


def test_the_attention_flag_reaches_the_loader(tmp_path, monkeypatch) -> None:
    assert LocalOptions.from_flags(cli.parse_args([])).cpu_attention_kernel == "auto"
    assert LocalOptions.from_flags(cli.parse_args(["--cpu-attention-kernel", "off"])).cpu_attention_kernel == "off"
    with pytest.raises(SystemExit):
        cli.parse_args(["--cpu-attention-kernel", "on"])
    assert make_local(LocalOptions(cpu_attention_kernel="off")).load_options["attention_kernel"] == "off"
    assert quant_weights.attention("off", tmp_path) is None
    assert quant_weights.attention("auto", tmp_path) is not None
    with pytest.raises(ValueError, match="attention_kernel must be one of auto, off, not 'on'"):
        quant_weights.attention("on", tmp_path)
    monkeypatch.setenv("CC", "/nonexistent/cc")
    assert quant_weights.attention("auto", tmp_path / "elsewhere") is None  # no compiler: sdpa


def test_the_probe_races_the_blocks_against_each_layer_s_own_route(kernels) -> None:
    blocks = random_blocks("Q4_1", out=48, blocks=2)
    layer = torch.nn.Linear(64, 48, bias=False)
    with torch.no_grad():
        layer.weight.copy_(blocks.dequantize())
    wins = quant_weights.faster_with_blocks([(layer.weight, kernels.matmul(blocks), None, layer)])
    assert set(wins) <= set(QUANT_ROWS) and wins == sorted(wins)


def test_rows_the_kernel_cannot_take_are_refused_and_a_failure_at_load_leaves_float32(
    kernels, monkeypatch, tmp_path, caplog
) -> None:
    matmul = kernels.matmul(random_blocks("Q8_0", out=8, blocks=2))
    for x in (torch.randn(2, 32), torch.randn(2, 64, dtype=torch.float64)):
        with pytest.raises(ValueError, match="the GGUF kernel takes float32 CPU rows of 64"):
            matmul(x, None)
    with pytest.raises(ValueError, match="a float32 bias of 8"):
        matmul(torch.randn(2, 64), torch.randn(9))
    good = random_blocks("Q8_16", out=8, blocks=2)
    for damaged in (  # scales the kernel would read past (or misread): refused before any pointer is taken
        Blocks("Q8_16", good.qs, good.d[:, :2].contiguous(), None),
        Blocks("Q8_0", good.qs, good.d, None),
        Blocks("Q4_1", good.qs.view(torch.uint8)[..., :16].contiguous(), good.d[:, :2].contiguous(), None),
        Blocks("Q5_1", good.qs, good.d, None),
    ):
        with pytest.raises(ValueError, match="the kernel takes no"):
            kernels.matmul(damaged)

    def unforeseen(*args: object) -> None:
        raise RuntimeError("a GGUF this reader does not know")

    model = torch.nn.Sequential(torch.nn.Linear(64, 32))
    monkeypatch.setattr(quant_weights, "_blocks", unforeseen)
    with caplog.at_level(logging.WARNING, logger="playground.models.quant_weights"):
        assert quant_weights.attach(model, embedded_gguf_path(), "auto", tmp_path) == 0
    assert "GGUF blocks not used (RuntimeError: a GGUF this reader does not know): float32 weights" in caplog.text
    assert type(model[0]) is torch.nn.Linear
