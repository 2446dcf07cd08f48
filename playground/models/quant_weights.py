"""Linear layers that multiply from their GGUF's own blocks (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K) on the CPU, with
float32 math.

A GGUF's quantized weights are exact: transformers dequantizes each block to float32 (Q4_1: d * q + m,
Q8_0: d * q, ...), and the CPU then streams ~540 MB of float32 per token for the embedded model,
where the blocks take ~96 MB. A decode step is bound by those bytes, so this keeps the blocks beside the
float32 weights and multiplies from them with a small C kernel (qlinear.c, compiled with -march=native on
first use and cached): each block expands to float32 in registers and is multiplied into every row of the
batch, in float32, so a product differs from the dequantized weight's only in the order of its sums (~1e-6).

Which layers: those whose GGUF tensor dequantizes bit for bit to the loaded weight (checked at load; rows
reordered by the loader, as Llama's q and k are, are matched by content). Which row counts: those at which
a probe at load finds the blocks faster than the layer's float32 route (kernel_probe.py): on an AVX-512
Xeon at 1 thread, every linear of the embedded model once took 17 ms instead of 35 for one row and 28
instead of 54 for eight. Without a C compiler, or with `gguf_kernels="off"`, nothing changes.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from playground.models.cpu_weights import PLAIN_LINEAR, BatchLinear
from playground.models.kernel_probe import QUANT_ROWS, RowTable, cpu_flags, faster_at, machine_facts, row_tables

log = logging.getLogger(__name__)

MODES = ("auto", "off")
SOURCE = Path(__file__).with_name("qlinear.c")
QK = 32  # weights per block
QK_K = 256  # weights per super-block (Q4_K, Q6_K)
# The GGUF block types read, with each block's bytes: Q4_1 and Q8_0 as they are; Q4_0 and Q5_0 as Q8_0 (their
# signed q - 8, q - 16 in a byte); Q4_K as Q4_1 per sub-block of 32 (d * scale, -dmin * min); Q6_K as Q8_16.
GGUF_BLOCK_BYTES = {"Q4_0": 18, "Q4_1": 20, "Q5_0": 22, "Q8_0": 34, "Q4_K": 144, "Q6_K": 210}
READ_TYPES_KEY, READ_TYPES = "__gguf_types_read__", ",".join(GGUF_BLOCK_BYTES)  # in the saved blocks' metadata
FLAG_SETS = (("-march=native", "-fopenmp"), ("-march=native",), ())  # the first the compiler takes
COMPILE_TIMEOUT_S = 120


@dataclass(frozen=True)
class Blocks:
    """One weight (out x in) in blocks of 32 weights the kernel takes, float32 scales:
    Q4_1: d * q + m per block, q 4-bit (two a byte: q[j] low, q[j + 16] high);
    Q8_0: d * q per block, q a signed byte; Q8_16: the same with one d per 16 weights."""

    format: str  # "Q4_1", "Q8_0" or "Q8_16"
    qs: torch.Tensor  # Q4_1: uint8 (out, in/32, 16); Q8_0, Q8_16: int8 (out, in/32, 32)
    d: torch.Tensor  # float32 (out, in/32); Q8_16: (out, in/16)
    m: torch.Tensor | None  # Q4_1's minimum per block, float32 (out, in/32)

    @classmethod
    def from_gguf(cls, kind: str, raw: Any) -> Blocks:
        """From a GGUF tensor's bytes, (out, bytes per row) uint8, of block type `kind` (GGUF_BLOCK_BYTES)."""
        out = raw.shape[0]
        data = torch.from_numpy(raw.copy()).view(out, -1, GGUF_BLOCK_BYTES[kind])
        if kind == "Q6_K":  # 16 sub-blocks of 16: d * scale; q 6-bit, low 4 bits in ql, high 2 in qh
            ql, qh = data[..., :128].reshape(out, -1, 2, 1, 64), data[..., 128:192].reshape(out, -1, 2, 1, 32)
            low = ((ql >> torch.tensor([0, 4], dtype=torch.uint8).view(2, 1)) & 15).reshape(out, -1, 8, 32)
            high = ((qh >> torch.tensor([0, 2, 4, 6], dtype=torch.uint8).view(4, 1)) & 3).reshape(out, -1, 8, 32)
            q = (low | (high << 4)).to(torch.int8) - 32
            scales = data[..., 192:208].contiguous().view(torch.int8).float()
            d = _half(data[..., 208:210]).unsqueeze(-1) * scales
            return cls("Q8_16", q.reshape(out, -1, QK), d.reshape(out, -1), None)
        d = _half(data[..., 0:2])  # every other type's block starts with its d
        if kind == "Q4_1":
            return cls(kind, data[..., 4:].contiguous(), d, _half(data[..., 2:4]))
        if kind == "Q8_0":
            return cls(kind, data[..., 2:].contiguous().view(torch.int8), d, None)
        if kind == "Q4_0":
            return cls("Q8_0", (_nibbles(data[..., 2:]).to(torch.int8) - 8), d, None)
        if kind == "Q5_0":
            high = data[..., 2:6].contiguous().view(torch.int32).to(torch.int64)  # bit j: weight j's fifth bit
            fifth = (high >> torch.arange(QK)) & 1
            q = _nibbles(data[..., 6:]).to(torch.int64) | (fifth << 4)
            return cls("Q8_0", (q - 16).to(torch.int8), d, None)
        if kind == "Q4_K":  # 8 sub-blocks of 32: d * scale and dmin * min, 6-bit each, packed in 12 bytes
            scales, mins = _k_scales(data[..., 4:16])
            chunks = data[..., 16:].reshape(out, -1, 4, 32)  # 32 bytes: sub-block 2j (low nibbles), 2j + 1 (high)
            q = torch.stack((chunks & 15, chunks >> 4), dim=3).reshape(out, -1, QK)
            d = (d.unsqueeze(-1) * scales).reshape(out, -1)
            m = -(_half(data[..., 2:4]).unsqueeze(-1) * mins).reshape(out, -1)
            return cls("Q4_1", _pack_nibbles(q), d, m)
        raise ValueError(f"no blocks for GGUF type {kind}")

    @property
    def shape(self) -> tuple[int, int]:
        return self.qs.shape[0], self.qs.shape[1] * QK

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.qs, self.d, self.m) if t is not None)

    def dequantize(self) -> torch.Tensor:
        """The float32 weight, computed as the GGUF's dequantizer computes it (so equal bit for bit)."""
        if self.format == "Q4_1":
            q = torch.cat((self.qs & 15, self.qs >> 4), dim=-1).float()
            return (self.d.unsqueeze(-1) * q + self.m.unsqueeze(-1)).reshape(self.shape)
        out, blocks = self.qs.shape[:2]
        per = self.d.shape[1] // blocks  # scales per block: 1 (Q8_0) or 2 (Q8_16)
        q = self.qs.reshape(out, blocks, per, QK // per).float()
        return (self.d.reshape(out, blocks, per, 1) * q).reshape(self.shape)

    def rows(self, order: torch.Tensor) -> Blocks:
        return Blocks(
            self.format,
            self.qs[order].contiguous(),
            self.d[order].contiguous(),
            None if self.m is None else self.m[order].contiguous(),
        )


def _half(data: torch.Tensor) -> torch.Tensor:
    """Little-endian float16s (..., 2 bytes) as float32 (...)."""
    return data.contiguous().view(torch.float16).squeeze(-1).float()


def _nibbles(data: torch.Tensor) -> torch.Tensor:
    """16 bytes (..., 16) as the 32 4-bit values of a Q4_0/Q5_0 block (..., 32): low nibbles first."""
    return torch.cat((data & 15, data >> 4), dim=-1)


def _pack_nibbles(q: torch.Tensor) -> torch.Tensor:
    """32 4-bit values (..., 32) as a Q4_1 block's 16 bytes: value j low, value j + 16 high."""
    return (q[..., :16] | (q[..., 16:] << 4)).contiguous()


def _k_scales(packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A Q4_K super-block's 12 bytes (..., 12) as its 8 sub-blocks' 6-bit scales and mins, float32 (..., 8)."""
    d, m, both = packed[..., 0:4], packed[..., 4:8], packed[..., 8:12]
    scales = torch.cat((d & 63, (both & 15) | ((d >> 2) & 48)), dim=-1)
    mins = torch.cat((m & 63, (both >> 4) | ((m >> 2) & 48)), dim=-1)
    return scales.float(), mins.float()


class Kernels:
    """qlinear.c, built for this machine and loaded."""

    def __init__(self, path: Path) -> None:
        lib = ctypes.CDLL(str(path))
        p, i = ctypes.c_void_p, ctypes.c_int
        lib.q4_1_linear.argtypes = [p, i, i, p, p, p, p, p, i, i]
        lib.q8_0_linear.argtypes = lib.q8_16_linear.argtypes = [p, i, i, p, p, p, p, i, i]
        lib.q4_1_linear.restype = lib.q8_0_linear.restype = lib.q8_16_linear.restype = None
        lib.qlinear_isa.restype = ctypes.c_char_p
        stride = ctypes.c_ssize_t
        lib.attend.argtypes = [p, i, i, i, i, p, p, stride, stride, stride, stride, i, p, ctypes.c_float, p, i]
        lib.attend.restype = i
        self.isa: str = lib.qlinear_isa().decode()
        self.path = path
        self._lib = lib

    def matmul(self, blocks: Blocks) -> QuantMatmul:
        return QuantMatmul(self, blocks)

    def attend(
        self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, allowed: torch.Tensor | None, scale: float
    ) -> torch.Tensor | None:
        """sdpa for one new query per row: q (rows x heads x 1 x dim), keys and values (rows x kv_heads x
        positions x dim, each position's dim floats together: a cache's buffer may hold more positions),
        `allowed` (rows x positions, uint8: 0 where a row has no token) or None. Returns (rows x 1 x heads * dim),
        the heads side by side as attention's output projection takes them; None where the kernel does not take
        these tensors (sdpa must run)."""
        rows, heads, width, dim = q.shape
        kv_heads, positions = keys.shape[1], keys.shape[2]
        if (
            width != 1
            or any(t.dtype != torch.float32 or not t.is_cpu for t in (q, keys, values))
            or keys.shape != (rows, kv_heads, positions, dim)
            or values.shape != keys.shape
            or any(t.stride(-1) != 1 or t.stride(-2) != dim for t in (keys, values))
            or (allowed is not None and (allowed.dtype != torch.uint8 or allowed.shape != (rows, positions)))
        ):
            return None
        q = q.contiguous()
        allowed = None if allowed is None else allowed.contiguous()
        out = torch.empty(rows, 1, heads * dim, dtype=torch.float32)
        failed = self._lib.attend(
            q.data_ptr(), rows, heads, kv_heads, dim, keys.data_ptr(), values.data_ptr(),
            keys.stride(0), keys.stride(1), values.stride(0), values.stride(1), positions,
            None if allowed is None else allowed.data_ptr(), scale, out.data_ptr(), torch.get_num_threads(),
        )  # fmt: skip
        return None if failed else out


class QuantMatmul:
    """x @ W^T + bias from one weight's blocks (x float32 on the CPU, any leading dimensions)."""

    def __init__(self, kernels: Kernels, blocks: Blocks) -> None:
        self.blocks = blocks  # keeps the tensors the pointers below address alive
        self.out_features, self.in_features = blocks.shape
        # what the kernel reads through the pointers: (bytes a block, scales a block) of each layout
        layout = {"Q4_1": (16, 1), "Q8_0": (32, 1), "Q8_16": (32, 2)}.get(blocks.format, (0, 0))
        out, count = blocks.qs.shape[:2]
        scales = [blocks.d, blocks.m] if blocks.format == "Q4_1" else [blocks.d]
        if (
            tuple(blocks.qs.shape) != (out, count, layout[0])
            or not blocks.qs.is_contiguous()
            or not all(
                t is not None and t.dtype == torch.float32 and t.shape == (out, count * layout[1]) and t.is_contiguous()
                for t in scales
            )
        ):
            raise ValueError(
                f"the kernel takes no {blocks.format} blocks of {tuple(blocks.qs.shape)} with these scales"
            )
        lib = kernels._lib
        q, d = blocks.qs.data_ptr(), blocks.d.data_ptr()
        if blocks.format == "Q4_1":
            fn, m = lib.q4_1_linear, blocks.m.data_ptr()
            self._call = lambda x, rows, bias, y, threads: fn(
                x, rows, self.in_features, q, d, m, bias, y, self.out_features, threads
            )
        else:
            fn = lib.q8_0_linear if blocks.format == "Q8_0" else lib.q8_16_linear
            self._call = lambda x, rows, bias, y, threads: fn(
                x, rows, self.in_features, q, d, bias, y, self.out_features, threads
            )

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if x.dtype != torch.float32 or not x.is_cpu or x.shape[-1] != self.in_features:
            raise ValueError(f"the GGUF kernel takes float32 CPU rows of {self.in_features}, not {x.dtype} {x.shape}")
        if bias is not None and (bias.dtype != torch.float32 or bias.shape != (self.out_features,)):
            raise ValueError(
                f"the GGUF kernel takes a float32 bias of {self.out_features}, not {bias.dtype} {bias.shape}"
            )
        x = x.contiguous()
        bias = None if bias is None else bias.contiguous()  # held until the call returns
        y = torch.empty(*x.shape[:-1], self.out_features, dtype=torch.float32)
        rows = x.numel() // self.in_features
        self._call(x.data_ptr(), rows, None if bias is None else bias.data_ptr(), y.data_ptr(), torch.get_num_threads())
        return y


def build(cache_dir: Path | None) -> Kernels | None:
    """qlinear.c compiled for this machine (cached by source, compiler, CPU and $CFLAGS), or None without a
    compiler ($CC, else cc or gcc)."""
    named = os.environ.get("CC")
    compiler = shutil.which(named) if named else shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        log.info("no C compiler (%s): GGUF layers multiply from their float32 weights", named or "cc, gcc")
        return None
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        log.info("C compiler %s does not answer (%s): GGUF layers multiply from their float32 weights", compiler, exc)
        return None
    extra = shlex.split(os.environ.get("CFLAGS", ""))
    # -march=native uses every extension the CPU lists: a build cached for another CPU would not run here
    facts = (machine_facts()["cpu"], sorted(cpu_flags()), extra)
    key = hashlib.sha256(SOURCE.read_bytes() + version + repr(facts).encode()).hexdigest()
    name = f"qlinear-{key[:16]}.so"
    path = cache_dir / name if cache_dir is not None else None
    if path is None or not path.is_file():
        try:
            if path is None:
                raise OSError("no cache folder")
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:  # built for this process only, in a folder no one else can write
            path = Path(tempfile.mkdtemp(prefix="qlinear-")) / name
        if not _compile(compiler, path, extra):
            return None
    try:
        return Kernels(path)
    except OSError as exc:
        log.info("GGUF kernels built but not loadable (%s): float32 weights", exc)
        return None


def attention(mode: str, cache_dir: Path | None) -> Any:
    """The kernels' attention for a decode step's one new token per row (Kernels.attend), or None: `mode` off,
    or no C compiler (torch's sdpa serves)."""
    if mode not in MODES:
        raise ValueError(f"attention_kernel must be one of {', '.join(MODES)}, not {mode!r}")
    kernels = build(cache_dir) if mode == "auto" else None
    if kernels is not None:
        log.info("a decode step's attention: the C kernel (%s)", kernels.isa)
    return None if kernels is None else kernels.attend


def _compile(compiler: str, path: Path, extra: list[str]) -> bool:
    """Build qlinear.c into `path` with the first flag set the compiler takes, then $CFLAGS (-mno-avx512f
    builds the AVX2 path on an AVX-512 machine)."""
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.so")
    errors = b""
    for flags in FLAG_SETS:
        command = [compiler, "-O3", "-shared", "-fPIC", *flags, *extra, "-o", str(tmp), str(SOURCE)]
        try:
            done = subprocess.run(command, capture_output=True, timeout=COMPILE_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as exc:
            errors = str(exc).encode()
            continue
        if done.returncode == 0:
            try:
                tmp.replace(path)  # atomic: a second process starting beside this one reads a whole file
            except OSError as exc:
                errors = str(exc).encode()
                break
            return True
        errors = done.stderr
    log.info("qlinear.c did not compile (%s): float32 weights", errors.decode(errors="replace")[-300:])
    return False


def gguf_blocks(path: Path, model: Any) -> Iterator[tuple[torch.nn.Linear, Blocks]]:
    """Each linear layer of `model` with its GGUF tensor's blocks, where they dequantize to its weight exactly."""
    from gguf import MODEL_ARCH_NAMES, GGUFReader, get_tensor_name_map

    reader = GGUFReader(path)
    field = reader.fields.get("general.architecture")
    arch_name = bytes(field.parts[field.data[0]]).decode() if field is not None else ""
    arch = next((a for a, n in MODEL_ARCH_NAMES.items() if n == arch_name), None)
    layers = getattr(model.config, "num_hidden_layers", None)
    if arch is None or layers is None:
        return
    names = get_tensor_name_map(arch, layers)
    tensors = {t.name: t for t in reader.tensors if t.tensor_type.name in GGUF_BLOCK_BYTES}
    by_param: dict[int, Any] = {}
    for hf_name, param in model.named_parameters():
        gguf_name = names.get_name(hf_name.removesuffix(".weight")) if hf_name.endswith(".weight") else None
        if gguf_name is not None and f"{gguf_name}.weight" in tensors:
            by_param[id(param)] = tensors[f"{gguf_name}.weight"]
    for module in model.modules():
        if type(module) not in PLAIN_LINEAR or id(module.weight) not in by_param:  # subclasses keep their own forward
            continue
        tensor = by_param[id(module.weight)]
        blocks = _aligned(Blocks.from_gguf(tensor.tensor_type.name, tensor.data), module.weight.detach())
        if blocks is not None:
            yield module, blocks


def _aligned(blocks: Blocks, weight: torch.Tensor) -> Blocks | None:
    """`blocks` in `weight`'s row order when every row dequantizes to it exactly, else None."""
    if blocks.shape != tuple(weight.shape) or weight.dtype != torch.float32:
        return None
    dequantized = blocks.dequantize()
    if torch.equal(dequantized, weight):
        return blocks
    # the loader may reorder rows (Llama's q and k: llama.cpp's rotary layout back to transformers')
    index = {row.numpy().tobytes(): i for i, row in enumerate(dequantized)}
    order = [index.get(row.numpy().tobytes()) for row in weight]
    if None in order:
        return None
    return blocks.rows(torch.tensor(order))


def attach(
    model: Any,
    path: Path,
    mode: str = "auto",
    cache_dir: Path | None = None,
    saved: Path | None = None,
    probe: Any = None,
) -> int:
    """Route each GGUF layer's row counts that the blocks multiply faster to them; the MB of blocks kept (0: none).

    `model` must be packed (cpu_weights.pack_for_cpu) first: the probe races the blocks against each
    layer's own route. `saved` (a .safetensors file beside the converted weights) keeps the blocks found,
    so later starts skip reading the GGUF's metadata and checking every weight (~3 s for the embedded model).
    """
    if mode not in MODES:
        raise ValueError(f"gguf_kernels must be one of {', '.join(MODES)}, not {mode!r}")
    if mode == "off":
        return 0
    try:  # a speed-up only: whatever goes wrong here, the float32 weights serve
        kernels = build(cache_dir)
        if kernels is None:
            return 0
        found = [(module, kernels.matmul(blocks)) for module, blocks in _blocks(path, model, saved)]
        if not found:
            return 0
        layers = [(module.weight, matmul, module.bias, module) for module, matmul in found]
        # what the blocks were raced against: MKL alone, or with the blocked copies (cpu_weights.py)
        baseline = "blocked" if any(type(module) is BatchLinear for module, _ in found) else "mkl"
        # layers of one shape may differ in format (a Q4_K_M file's Q4_K and Q6_K): the verdicts are theirs
        formats = sorted({f"{module.in_features}x{module.out_features}:{m.blocks.format}" for module, m in found})
        key = {"kernels": kernels.path.name, "isa": kernels.isa, "baseline": baseline, "formats": ",".join(formats)}
        tables = row_tables(layers, cache_dir, probe or faster_with_blocks, kind="gguf", extra=key, counts=QUANT_ROWS)
    except Exception as exc:  # noqa: BLE001 - a GGUF or toolchain we did not foresee
        log.warning("GGUF blocks not used (%s: %s): float32 weights", type(exc).__name__, exc)
        return 0
    kept = served = 0
    for module, matmul in found:
        table = tables[(module.in_features, module.out_features)]
        if not any(table):
            continue
        if type(module) is not BatchLinear:  # (a BatchLinear already watches its weight since it was packed)
            module.__class__ = BatchLinear
            module.watch(module.weight)
        module.quant = matmul
        module.quant_rows = table
        if module.blocked_rows and _covered(module.blocked_rows, table):  # the blocks serve each count it would
            module.blocked_rows = ()
            del module.blocked_weight
        kept += matmul.blocks.nbytes
        served += 1
    log.info("GGUF blocks (%s kernels) serve %d of %d layers", kernels.isa, served, len(found))
    return round(kept / 2**20)


def _covered(blocked: RowTable, quant: RowTable) -> bool:
    """Whether the blocks (checked first) take every row count at which the blocked copy would serve: then the copy,
    as large as the float32 weight, is never read (the embedded model's MLP gate and up on a Zen 3 core: 203 MB)."""
    return all(rows < len(quant) and quant[rows] for rows, faster in enumerate(blocked) if faster)


def _blocks(path: Path, model: Any, saved: Path | None) -> list[tuple[torch.nn.Linear, Blocks]]:
    """gguf_blocks(), read from `saved` when it holds them (their first and last rows checked), else saved there."""
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import save_file

    modules = {module: name for name, module in model.named_modules() if type(module) in PLAIN_LINEAR}
    by_name = {name: module for module, name in modules.items()}
    if saved is not None and saved.is_file():
        try:
            with safe_open(str(saved), "pt") as file:
                formats = dict(file.metadata() or {})
                # blocks saved by a version that read fewer GGUF types would hide the layers of the others
                if formats.pop(READ_TYPES_KEY, None) != READ_TYPES:
                    raise ValueError("saved by a version that reads other GGUF types")
                found = [
                    (
                        by_name[name],
                        Blocks(
                            format,
                            file.get_tensor(f"{name}.qs"),
                            file.get_tensor(f"{name}.d"),
                            file.get_tensor(f"{name}.m") if format == "Q4_1" else None,
                        ),
                    )
                    for name, format in formats.items()
                ]
            if all(_rows_match(blocks, module.weight.detach()) for module, blocks in found):
                return found
        except (OSError, KeyError, ValueError, RuntimeError, SafetensorError) as exc:  # damaged: read the GGUF again
            log.info("saved GGUF blocks %s not used (%s)", saved, exc)
    found = list(gguf_blocks(path, model))
    if saved is not None and found:
        tensors = {}
        for module, blocks in found:
            name = modules[module]
            tensors.update({f"{name}.qs": blocks.qs, f"{name}.d": blocks.d})
            if blocks.m is not None:
                tensors[f"{name}.m"] = blocks.m
        try:
            tmp = saved.with_name(f"{saved.name}.{os.getpid()}.tmp")
            save_file(
                tensors, str(tmp), metadata={READ_TYPES_KEY: READ_TYPES, **{modules[m]: b.format for m, b in found}}
            )
            tmp.replace(saved)
        except (OSError, SafetensorError) as exc:  # a read-only or full cache: read the GGUF again next start
            log.info("GGUF blocks not saved: %s", exc)
            tmp.unlink(missing_ok=True)
    return found


def _rows_match(blocks: Blocks, weight: torch.Tensor) -> bool:
    """Whether the first and last rows of `blocks` dequantize to `weight`'s (a cheap check of saved blocks)."""
    if blocks.shape != tuple(weight.shape):
        return False
    ends = torch.tensor([0, weight.shape[0] - 1])
    return torch.equal(blocks.rows(ends).dequantize(), weight[ends])


def faster_with_blocks(layers: list[tuple[Any, ...]]) -> list[int]:
    """The row counts at which the blocks multiply faster than each layer's own route, timed here and now."""
    in_features = layers[0][0].shape[1]
    return faster_at(
        QUANT_ROWS,
        in_features,
        lambda x: [lambda x=x, module=module: module.forward(x) for _, _, _, module in layers],
        lambda x: [lambda x=x, matmul=matmul, bias=bias: matmul(x, bias) for _, matmul, bias, _ in layers],
    )
