"""The decode step of a lone row or a batch's rows for Llama models on the CPU, without the modelling code's
per-call overhead.

On the CPU, transformers' Llama forward spends ~17 of a ~70 ms step (SmolLM2-135M, 1 thread) outside its
matrix products: module calls, keyword plumbing, masks and output objects around ~1,000 small ops
(`python -m benchmarks.step`). This step runs the same math on the same modules and the same KV cache
layers (each layer's own `update`), so the cache, the prefix cache and batching see no difference; only
the calls around the ops go. It serves only what it can prove it matches: a plain LlamaForCausalLM on the
CPU (no hooks, no adapter layers in place of its projections), after a cache, one token or several per row
(fast-forwarded tokens: causal among themselves; a batch's padding given as its mask); anything else returns
None and the model's own forward runs. Where a batch's rows run different numbers of tokens, the padding after the
shorter ones never reaches a linear layer: everything but attention runs on the real tokens alone, packed, and
attention on the rows x width block (the padding's keys and values are zeros, hidden by the mask).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from transformers.cache_utils import DynamicLayer
from transformers.models.llama.modeling_llama import (
    LlamaAttention,
    LlamaDecoderLayer,
    LlamaForCausalLM,
    LlamaMLP,
    LlamaModel,
    LlamaRMSNorm,
)

from playground.models.cpu_weights import PLAIN_LINEAR

ROOM_FROM = 256  # positions from which a cache grows in place (_append)
ROOM = 64  # positions of spare room at least, when a cache's buffer grows
# The share of padding in a batch's block of new tokens from which only its real tokens reach the linear layers
# (`python -m benchmarks.ragged_prefill`: 8 rows of 10-120 tokens after cached prefixes prefill 2.1x faster)
PACK_FROM = 0.1


# A decode step's attention for one new token per row (quant_weights.Kernels.attend): q (rows x heads x 1 x dim),
# keys, values, allowed positions (rows x positions, uint8) or None, scale -> rows x 1 x heads * dim, or None (sdpa)
Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, "torch.Tensor | None", float], "torch.Tensor | None"]


class LlamaStep:
    """The decode step of one Llama model."""

    def __init__(self, model: LlamaForCausalLM, attend: Attend | None = None) -> None:
        self.model = model
        self.inner: LlamaModel = model.model
        self.layers: list[LlamaDecoderLayer] = list(self.inner.layers)
        self.attend = attend

    @classmethod
    def for_model(cls, model: Any, attend: Attend | None = None) -> LlamaStep | None:
        """The step for `model`, or None when its forward is not the one this step reproduces. `attend`: the
        attention of steps of one new token per row, where sdpa's overhead outweighs its arithmetic."""
        if type(model) is not LlamaForCausalLM or type(model.model) is not LlamaModel:
            return None
        if model.device.type != "cpu" or getattr(model, "hf_device_map", None):
            return None
        config = model.config
        if getattr(config, "pretraining_tp", 1) not in (None, 1):
            return None
        for layer in model.model.layers:
            kinds = (type(layer), type(layer.self_attn), type(layer.mlp))
            norms = (type(layer.input_layernorm), type(layer.post_attention_layernorm))
            if kinds != (LlamaDecoderLayer, LlamaAttention, LlamaMLP) or norms != (LlamaRMSNorm, LlamaRMSNorm):
                return None
        if type(model.model.norm) is not LlamaRMSNorm:
            return None
        if any(m._forward_hooks or m._forward_pre_hooks for m in model.modules()):
            return None
        return cls(model, attend)

    def __call__(self, token_id: int, position: int, cache: Any) -> torch.Tensor | None:
        """Logits (1 x 1 x vocab) of `token_id` at `position` after `cache` (updated in place), or None when
        this step does not apply (the model's forward must run)."""
        return self.rows([[token_id]], torch.tensor([[position]]), cache)

    def rows(
        self,
        token_ids: list[list[int]],
        positions: torch.Tensor,
        cache: Any,
        mask: torch.Tensor | None = None,
        *,
        last: bool = False,
    ) -> torch.Tensor | None:
        """Logits (rows x width x vocab) of each row's `width` new tokens at their positions (rows x width), after
        `cache` (rows x ..., updated in place; a fresh one for a first prefill), or None when this step does not
        apply. Each new token sees the cache and the row's new tokens up to itself; `mask` (rows x every cached
        position and the new ones; 1 where the row has a token) marks the padding of a batch's ragged rows: None,
        none. `last`: only the last position's logits (rows x 1 x vocab), as a prefill wants them."""
        layers = getattr(cache, "layers", None)
        if not layers or len(layers) != len(self.layers) or self.model.training:
            return None
        if any(type(layer) is not DynamicLayer for layer in layers):
            return None
        if len({layer.is_initialized for layer in layers}) > 1:  # (all empty is a fresh cache: a first prefill)
            return None
        projections = [_projections(layer) for layer in self.layers]
        if projections[0] is None or any(p is None for p in projections):
            return None  # an adapter's layers sit in place of a projection
        n, width = len(token_ids), len(token_ids[0])
        # a batch's rows of several new tokens each, some fewer (padding after theirs): every op but attention runs on
        # their real tokens only (`real`: their places in the rows x width block), and attention on the block
        real = _real(mask, n, width)
        ids, place = torch.tensor(token_ids), positions.view(n, width)
        if real is not None:
            ids, place = ids.view(-1)[real][None], place.reshape(-1)[real][None]
        hidden = self.inner.embed_tokens(ids)
        cos, sin = self.inner.rotary_emb(hidden, place)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        allowed = _allowed(mask, layers[0].get_seq_length(), n, width)
        # one new token per row, none packed: the kernel's attention where there is one (sdpa where it declines)
        attend = self.attend if width == 1 and real is None else None
        flags = None if attend is None or mask is None else mask.to(torch.uint8)
        for layer, kv, (q_proj, k_proj, v_proj, o_proj, gate, up, down) in zip(self.layers, layers, projections):
            attn = layer.self_attn
            x = _rms(hidden, layer.input_layernorm)
            shape = (*hidden.shape[:2], -1, attn.head_dim)
            q = q_proj.forward(x).view(shape).transpose(1, 2)
            k = k_proj.forward(x).view(shape).transpose(1, 2)
            v = v_proj.forward(x).view(shape).transpose(1, 2)
            q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
            if real is not None:
                q, k, v = (_block(t, real, n, width) for t in (q, k, v))
            keys, values = _append(kv, k, v)
            out = None if attend is None else attend(q, keys, values, flags, attn.scaling)
            if out is None:
                out = F.scaled_dot_product_attention(
                    q, keys, values, attn_mask=allowed, scale=attn.scaling, enable_gqa=True
                )
                out = out.transpose(1, 2).reshape(n, width, -1)
            if real is not None:
                out = out.view(n * width, -1)[real][None]
            hidden = hidden + o_proj.forward(out)
            x = _rms(hidden, layer.post_attention_layernorm)
            hidden = hidden + down.forward(layer.mlp.act_fn(gate.forward(x)) * up.forward(x))
        if real is not None:
            return self._packed_logits(hidden, real, n, width, last)
        return self.model.lm_head(_rms(hidden[:, -1:] if last else hidden, self.inner.norm))

    def _packed_logits(self, hidden: torch.Tensor, real: torch.Tensor, n: int, width: int, last: bool) -> torch.Tensor:
        """The logits of the real tokens' `hidden` (1 x tokens x size) in their places (rows x width x vocab; `last`:
        each row's last real token's, rows x 1 x vocab). A padding place's logits are not computed: its values are
        whatever the buffer held."""
        hidden = hidden[0]
        if last:  # each row's last real token (every row has one: a prefill's rows end in the block's last column)
            ends = torch.bincount(torch.div(real, width, rounding_mode="floor"), minlength=n).cumsum(0) - 1
            return self.model.lm_head(_rms(hidden[ends], self.inner.norm)).view(n, 1, -1)
        logits = self.model.lm_head(_rms(hidden, self.inner.norm))
        out = logits.new_empty(n * width, logits.shape[-1])
        out.index_copy_(0, real, logits)
        return out.view(n, width, -1)


def _real(mask: torch.Tensor | None, n: int, width: int) -> torch.Tensor | None:
    """The places (in the rows x width block of new tokens, flattened) of the real ones, where at least PACK_FROM of
    the block is padding; None where less is (packing costs more than it saves there)."""
    if mask is None or width == 1:
        return None
    new = mask[:, -width:].bool().reshape(-1)
    real = new.nonzero().squeeze(1)
    return real if n * width - real.shape[0] >= PACK_FROM * n * width else None


def _block(packed: torch.Tensor, real: torch.Tensor, n: int, width: int) -> torch.Tensor:
    """A packed tensor (1 x heads x tokens x dim) in the rows x width block (rows x heads x width x dim), zeros in
    the padding's places."""
    heads, dim = packed.shape[1], packed.shape[-1]
    flat = packed[0].transpose(0, 1)  # tokens x heads x dim
    out = flat.new_zeros(n * width, heads, dim)
    out.index_copy_(0, real, flat)
    return out.view(n, width, heads, dim).transpose(1, 2)


def _allowed(mask: torch.Tensor | None, cached: int, n: int, width: int) -> torch.Tensor | None:
    """sdpa's boolean mask (rows x 1 x width x keys): the row's own tokens (`mask`), and none after the query's
    own position; None where every query sees every key (one new token per row, no padding).

    A query that would see no key at all (a prefill's left padding before a row's first token, nothing cached)
    sees its own: older torch's sdpa gives NaN for it (2.13's gives zeros), and it would reach the cache."""
    padding = None if mask is None else mask.bool()[:, None, None, :]
    if width == 1:
        return padding
    below = torch.ones(width, cached + width, dtype=torch.bool).tril(diagonal=cached)
    if padding is None:
        return below[None, None]
    allowed = below[None, None] & padding
    return allowed | (below.triu(diagonal=cached)[None, None] & ~allowed.any(-1, keepdim=True))


def _append(layer: DynamicLayer, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`layer.update(k, v)`, without copying a long cache at every step.

    transformers' DynamicLayer concatenates: each step copies every cached key and value (8 rows of a 1,000-token
    chat: ~370 MB a step for the embedded model). From ROOM_FROM positions on, the layer's keys and values are
    views of buffers with room to spare, and the new positions are written into that room, past the end of the
    view; a buffer is copied into a larger one when full, or when the layer's keys are not the views last written
    there (replaced by a batch's splicing or transformers' own update; of two holders of one view, a layer and
    its prefix cache entry, the second to append), so no tensor anyone holds changes. Shorter caches concatenate:
    sdpa's CPU kernel reads a view of a larger buffer more slowly than a whole tensor, which costs more than a
    short copy. `python -m benchmarks.kv_cache`: 8 rows of 1,000 positions 116.9 -> 92.3 ms a step, one row
    27.8 -> 26.6; 8 rows of 40 would lose 7% in place.
    """
    if not layer.is_initialized:  # a fresh cache's: its first keys
        return layer.update(k, v)
    short = id(layer.keys) not in _TAILS and layer.get_seq_length() + k.shape[-2] < ROOM_FROM
    if short or not torch.is_inference_mode_enabled():  # (the buffers are inference tensors: written inside only)
        return layer.update(k, v)
    layer.keys, layer.values = _room(layer.keys, k), _room(layer.values, v)
    return layer.keys, layer.values


def crop(layer: DynamicLayer, count: int) -> None:
    """`layer.crop(-count)`: a row's last positions go (a draft it did not choose). Where the layer's keys and values
    were the views last written in their buffers, the shorter views are now, so the next `_append` writes over the
    dropped positions in place; before, it copied the whole cache into a new buffer (a lone row of 1,000 positions:
    ~46 MB for the embedded model, at every draft refused). The positions dropped are all the step's just run
    (the draft and the tokens after it), written through views only the layer holds (the prefix cache, the
    teacher and the batch's joins keep copies or views that end before them), so no view anyone else holds
    changes."""
    if count <= 0:  # (transformers 4's crop(0) would empty the layer)
        return
    held = (layer.keys, layer.values)
    entries = [_TAILS.pop(id(t), None) for t in held]
    layer.crop(-count)
    for old, new, entry in zip(held, (layer.keys, layer.values), entries):
        if entry is not None and entry[0]() is old and new is not old:
            _TAILS[id(new)] = (weakref.ref(new, functools.partial(_forget, id(new))), entry[1])


def _room(cached: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """`cached` (rows x heads x length x dim) followed by `new` along the positions, written into the spare room of
    the buffer `cached` views when it is the view last written there and the room suffices, else into a new
    buffer with room for a quarter more (at least ROOM positions)."""
    length = cached.shape[-2] if cached.dim() == new.dim() else 0  # (an initialized layer's first keys are empty)
    added = new.shape[-2]
    if length and cached.shape[:-2] != new.shape[:-2]:  # as torch.cat would refuse them, not broadcast
        raise ValueError(f"cannot append {tuple(new.shape)} to a cache of {tuple(cached.shape)}")
    entry = _TAILS.pop(id(cached), None)  # taken: a copy of the layer holding the same view must not write too
    buffer = entry[1] if entry is not None and entry[0]() is cached else None
    if (
        buffer is None
        or buffer.shape[-2] < length + added
        or buffer.shape[:-2] != new.shape[:-2]
        or buffer.dtype != new.dtype
        or buffer.device != new.device
    ):
        buffer = new.new_empty(*new.shape[:-2], length + added + max(ROOM, (length + added) // 4), new.shape[-1])
        if length:
            buffer[..., :length, :] = cached
    buffer[..., length : length + added, :] = new
    grown = buffer[..., : length + added, :]
    _TAILS[id(grown)] = (weakref.ref(grown, functools.partial(_forget, id(grown))), buffer)
    return grown


# id of each view last written -> (the view, the buffer it views): inference-mode views keep no link to their base
_TAILS: dict[int, tuple[weakref.ref, torch.Tensor]] = {}


def _forget(key: int, _: weakref.ref) -> None:
    _TAILS.pop(key, None)


def _projections(layer: LlamaDecoderLayer) -> tuple[Any, ...] | None:
    attn, mlp = layer.self_attn, layer.mlp
    found = (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj)
    return found if all(type(p) in PLAIN_LINEAR for p in found) else None


def _rms(hidden: torch.Tensor, norm: LlamaRMSNorm) -> torch.Tensor:
    """LlamaRMSNorm's forward, op for op."""
    x = hidden.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * x.to(hidden.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
