"""The loaded model as the decoders see it: forward passes, token texts, special ids.

Decoding, the next-token view and the prefix cache share it; it knows nothing of requests.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from tokenizers.decoders import ByteLevel
from transformers import DynamicCache, PreTrainedTokenizerFast
from transformers.cache_utils import DynamicLayer

from playground.models import LoadedModel
from playground.models.llama_step import LlamaStep
from playground.types.pieces import byte_piece
from playground.wire import tool_formats


class ModelRunner:
    """Forward passes and token facts of one loaded model."""

    def __init__(self, loaded: LoadedModel) -> None:
        self.model = loaded.model
        # Never trained here. A decode generator resumed on another thread (Gradio, the API's streams)
        # has left its inference_mode behind (grad mode is per thread): without this its KV cache would
        # carry autograd history, and a deep copy of it (the teacher's, the prefix cache's of other cache kinds) fails.
        self.model.requires_grad_(False)
        self.tokenizer = loaded.tokenizer
        self.device = torch.device(loaded.device)
        self.vocab_size = int(self.model.get_output_embeddings().weight.shape[0])
        self.eos_ids = _eos_ids(self.model, self.tokenizer)
        # A tool-call envelope's special tokens (`<tool_call>`, `[TOOL_CALLS]`) are markup the answer's text keeps:
        # the calls are read back from it. Every other special token stays out of the text: the named ones (bos,
        # eos, ...) and the added ones marked special (SmolLM2's `<file_sep>`, `<empty_output>`, ...), which
        # all_special_ids leaves out.
        skipped = set(self.tokenizer.all_special_ids) | {
            i for i, t in (getattr(self.tokenizer, "added_tokens_decoder", {}) or {}).items() if t.special
        }
        self.markup_ids = {i for i in skipped if self.tokenizer.convert_ids_to_tokens(i) in tool_formats.MARKUP}
        self.special_ids = skipped - self.markup_ids
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else min(self.eos_ids)
        self._token_text: dict[int, str] = {}
        self._pieces: dict[int, str] = {}
        self._bytes_of: Callable[[list[int]], bytes] | None = None
        self.text_joins = text_joins(self.tokenizer)
        # transformers 5 renamed the KV cache argument and output from past_key_values to cache.
        self._cache_arg = "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
        self._lean_step = LlamaStep.for_model(self.model, loaded.attend)
        self.drops_positions = _plain_cache(self.model.config)

    def lone_step(self, token_id: int, position: int, cache: Any) -> torch.Tensor | None:
        """A lone row's next token through the lean step (playground/models/llama_step.py): its logits (1 x 1 x
        vocab), the cache updated; None where that step does not apply, and `forward` must run."""
        return self.lean_step([[token_id]], torch.tensor([[position]]), cache)

    def lean_step(
        self,
        token_ids: list[list[int]],
        positions: torch.Tensor,
        cache: Any,
        mask: torch.Tensor | None = None,
        *,
        last: bool = False,
    ) -> torch.Tensor | None:
        """Each row's new tokens (as many per row) through the lean step: logits (rows x width x vocab; `last`: of
        the last position only), the cache updated; None where that step does not apply. `mask`: the batch's
        attention mask with the new columns, None without holes."""
        if self._lean_step is None:
            return None
        return self._lean_step.rows(token_ids, positions, cache, mask, last=last)

    def fresh_cache(self) -> DynamicCache | None:
        """An empty KV cache the lean step can fill (a batch's first prefill); None where the model has no lean step."""
        return None if self._lean_step is None else DynamicCache(config=self.model.config)

    def forward(
        self, input_ids: torch.Tensor, cache: Any = None, keep: int = 1, **batch: Any
    ) -> tuple[torch.Tensor, Any]:
        """One forward pass: logits of the last `keep` positions (0 = all) and the updated KV cache.

        `batch` carries a padded batch's attention_mask and position_ids.
        """
        kwargs = {self._cache_arg: cache} if cache is not None else {}
        kwargs.update({k: v for k, v in batch.items() if v is not None})
        out = self.model(input_ids=input_ids, use_cache=True, logits_to_keep=keep, **kwargs)
        return out.logits, out[self._cache_arg]

    def token_text(self, token_id: int) -> str:
        """A token's text in isolation (U+FFFD for a part of a character), for the debugger's reasoning."""
        text = self._token_text.get(token_id)
        if text is None:
            text = self.tokenizer.decode([token_id])
            self._token_text[token_id] = text
        return text

    def token_piece(self, token_id: int) -> str:
        """A token's own text for logprobs and alternatives lists: a part of a character as `bytes:\\xe4\\xbd`
        (types/pieces.py), so two such tokens read apart and keep their bytes."""
        text = self.token_text(token_id)
        if "\ufffd" not in text:
            return text
        piece = self._pieces.get(token_id)
        if piece is None:
            piece = self._pieces[token_id] = self._piece(token_id, text)
        return piece

    def _piece(self, token_id: int, text: str) -> str:
        """The token's bytes as a byte piece, when they are no whole characters (llguidance knows every fast
        tokenizer's bytes: byte-level, byte fallback; built on first need, ~0.3 s)."""
        if self._bytes_of is None:
            try:
                import llguidance.hf

                self._bytes_of = llguidance.hf.from_tokenizer(self.tokenizer).decode_bytes
            except Exception:  # noqa: BLE001 - a slow tokenizer: its decoded text is all there is
                self._bytes_of = lambda ids: b""
        raw = self._bytes_of([token_id])
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return byte_piece(raw)
        return text

    def text(self, token_ids: list[int]) -> str:
        """The answer's text of these tokens: special tokens left out, the envelope's markup kept."""
        if not self.markup_ids:
            return self.tokenizer.decode(token_ids, skip_special_tokens=True)
        kept = [i for i in token_ids if i not in self.special_ids]
        return self.tokenizer.decode(kept, skip_special_tokens=False)

    def encode_words(self, text: str) -> list[int]:
        """`text`'s token ids, no special tokens added (how bad_words are spelled)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def ids(self, token_ids: list[int]) -> torch.Tensor:
        """A one-row batch of ids on the model's device."""
        return torch.tensor([token_ids], device=self.device)


class RowIds:
    """One row's ids as the `1 x L` tensor processors take: a view of a buffer grown in place.

    A step asks for the row's ids several times (its processors, fast-forward's probes), each time a token or two
    longer. A tensor built from the list costs ~0.1 µs an id (0.1 ms a call at 1,000 tokens, and a chat's prompt
    is in every call); here a call costs the ids that are new since the last, after a C-speed check that the rest
    is what the buffer holds (a shorter row, a draft undone, is a view of what is held).
    """

    def __init__(self, device: torch.device) -> None:
        self._held: list[int] = []
        self._buffer = torch.empty((1, 0), dtype=torch.long, device=device)

    def __call__(self, ids: list[int]) -> torch.Tensor:
        held = len(self._held)
        if len(ids) <= held and self._held[: len(ids)] == ids:
            del self._held[len(ids) :]
        else:
            if ids[:held] != self._held:  # another row's ids, or the row undid a token held: write them all
                self._held, held = [], 0
            # a buffer made under inference mode takes no writes outside it (a decode resumed on another thread)
            outside = self._buffer.is_inference() and not torch.is_inference_mode_enabled()
            if outside or len(ids) > self._buffer.shape[1]:
                grown = torch.empty((1, max(2 * len(ids), 64)), dtype=torch.long, device=self._buffer.device)
                grown[:, :held] = self._buffer[:, :held]  # (reading an inference tensor is allowed anywhere)
                self._buffer = grown
            new = ids[held:]
            self._buffer[0, held : len(ids)] = torch.tensor(new, dtype=torch.long)
            self._held.extend(new)
        return self._buffer[:, : len(ids)]


class RowText:
    """One row's text as its tokens arrive: the text held for the ids up to the last whole character, then the
    text of the ids after them.

    Decoding the whole row every token costs O(answer) for each row and token (with the embedded tokenizer ~0.08 ms
    at 500 tokens of text, 0.4 ms at 2,000). Where the tokenizer's text of ids is the text of any first part that
    ends on a whole character followed by the rest's (`joins`: see `text_joins`), a call decodes only the ids
    since the last such point; elsewhere it decodes the whole row, as before. A shorter row (a draft undone) or
    another row's ids go back to the last point they share with what is held.
    """

    def __init__(self, decode: Callable[[list[int]], str], joins: bool) -> None:
        self._decode, self._joins = decode, joins
        self._held: list[int] = []  # ids whose text is held, ending on a whole character
        self._text = ""
        self._points: list[tuple[int, int]] = []  # (ids, characters) at each point the held text grew

    def __call__(self, ids: list[int]) -> str:
        if not self._joins:
            return self._decode(ids)
        if len(ids) < len(self._held) or ids[: len(self._held)] != self._held:
            self._back_to(ids)
        tail = ids[len(self._held) :]
        text = self._decode(tail)
        if text.endswith("\ufffd"):  # a character split across tokens (or a U+FFFD the row wrote): held later
            return self._text + text
        if tail:
            self._held.extend(tail)
            self._text += text
            self._points.append((len(self._held), len(self._text)))
        return self._text

    def _back_to(self, ids: list[int]) -> None:
        """Keep what is held up to the last point `ids` share with it: a point is shared when every point before it
        is, so a binary search over the points finds it in a few C-speed comparisons."""
        low, high = 0, len(self._points)  # points[:low] are shared; points[high:] are not
        while low < high:
            mid = (low + high) // 2
            n = self._points[mid][0]
            if n <= len(ids) and ids[:n] == self._held[:n]:
                low = mid + 1
            else:
                high = mid
        del self._points[low:]
        n, chars = self._points[-1] if self._points else (0, 0)
        del self._held[n:]
        self._text = self._text[:chars]


def text_joins(tokenizer: Any) -> bool:
    """Whether the tokenizer's text of ids is its text of a first part that ends on a whole character followed by
    its text of the rest: a byte-level decoder (GPT-2's, Llama 3's, Qwen's, SmolLM's) joins the tokens' bytes
    and reads them as UTF-8, so such a point starts afresh. SentencePiece's decoders drop the first token's
    leading space, and a clean-up of spaces reads across tokens: those tokenizers decode the whole row."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or type(backend.decoder) is not ByteLevel:
        return False
    cls = type(tokenizer)
    if cls.decode is not PreTrainedTokenizerFast.decode or cls._decode is not PreTrainedTokenizerFast._decode:
        return False  # a tokenizer class of its own may change the text after decoding
    if not getattr(tokenizer, "clean_up_tokenization_spaces", False):
        return True
    # transformers leaves a BPE model's text uncleaned unless told to corrupt it (TokenizersBackend._decode)
    forced = getattr(tokenizer, "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output", True)
    return type(backend.model).__name__ == "BPE" and not forced


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids = set()
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif configured:
        ids.update(configured)
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def plain_layers(kv: Any) -> bool:
    """Caches whose layers are plain growing key/value tensors (no sliding window, no recurrent state)."""
    layers = getattr(kv, "layers", None)
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def _plain_cache(config: Any) -> bool:
    """Whether the model's KV cache will be plain layers, whose last positions a crop drops (a draft the row did
    not choose); a sliding window's layer may no longer hold what a crop would have to give back."""
    try:
        return plain_layers(DynamicCache(config=config))
    except Exception:  # noqa: BLE001 - a config transformers cannot build a cache from: no drafts
        return False
