"""llguidance: every kind, Lark and GBNF grammars; refuses what it cannot enforce instead of ignoring it (chosen
by name: `auto` then takes its lenient reading of a JSON schema, playground.constraints.compiler.lenient_form).

The worker's payload is nothing: the grammar is text, and the matcher the server builds from it is
bounded by llguidance's own parser and lexer limits (fuel, lexer states, grammar size). The worker still
builds and validates it once, so a refusal or a slow conversion never reaches the server.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from playground.constraints import matching, segments
from playground.constraints.backends.base import Backend, EngineRefusal, check_satisfiable, refusing
from playground.constraints.backends.bitmask import BitmaskProcessor
from playground.errors import first_line

if TYPE_CHECKING:
    import torch

# Measured on MaskBench (README, "Benchmarks"): llguidance accepts `\\uXXXX` escapes of any printable
# character (json.dumps writes them for all non-ASCII text). `oneOf` is read as `anyOf` (with a warning: two
# branches matched at once pass the mask, and the verdict and the EOS gate refuse them); refused instead, `auto`
# went on to xgrammar, which drops `oneOf` and the keywords beside it (`"type": "object"`), so the answer was
# seldom even the right type.
JSON_OPTIONS: dict[str, Any] = {"json_allow_general_unicode_escapes": True, "coerce_one_of": True}


def grammar(kind: str, text: str, llg_tokenizer: Any = None) -> str:
    """The llguidance grammar spec for (kind, text), as Outlines' LLGuidanceBackend writes it, plus our JSON options.

    A structural tag becomes Lark; its markers that are special tokens of `llg_tokenizer` are written by id."""
    import llguidance

    if kind == "structural_tag":
        spec = json.loads(text)
        return llguidance.grammar_from("lark", segments.to_lark(spec, lambda t: _pieces(llg_tokenizer, t)))
    if kind == "json_schema":
        return llguidance.LLMatcher.grammar_from_json_schema(text, defaults=JSON_OPTIONS)
    if kind in ("regex", "choice"):
        return llguidance.grammar_from("regex", text)
    try:
        return llguidance.grammar_from("lark", matching.lark_text(text))
    except ValueError:
        return llguidance.grammar_from("lark", text)


# One grammar's first masks at a time in the server (as xgrammar's proven compiles): a lexer being built takes a core,
# bounded by llguidance's own limits (`b{1000000}`'s stops at ~0.4 s).
_FIRST_MASKS = threading.Lock()
NOTHING_MATCHES = "no token continues the text, which does not match yet: no text matches the constraint from here"
ENDLESS = (
    'the constraint forces text that never ends: a rule with no way to finish (`x: "a" x` without an alternative '
    "that stops) allows no complete text, or a forced run is longer than llguidance follows"
)


class LLGuidance(Backend):
    name: ClassVar[str] = "llguidance"
    kinds: ClassVar[frozenset[str]] = frozenset({"json_schema", "regex", "choice", "grammar", "structural_tag"})
    notes: ClassVar[str] = "compiles fastest; refuses the keywords it cannot enforce; reads Lark and GBNF"

    def worker_backend(self, tokenizer: Any) -> Any:
        return literal_tokenizer(tokenizer)

    def compile_payload(self, backend: Any, kind: str, text: str) -> tuple[Any, list[str]]:
        if kind == "json_schema":
            check_satisfiable(text)
        return None, refusing(self.name, kind, lambda: _warnings(grammar(kind, text, backend), backend, kind))

    def server_backend(self, tokenizer: Any) -> Any:
        llg_tokenizer = literal_tokenizer(tokenizer)
        _warm(llg_tokenizer)
        return llg_tokenizer

    def rebuild_template(self, backend: Any, kind: str, text: str, payload: Any) -> Any:
        template = LLGuidanceProcessor(grammar(kind, text, backend), backend)
        stopped = template.first_masks()
        if stopped:
            refusal = "unsatisfiable" if stopped == NOTHING_MATCHES else "unsupported"  # (a limit: auto tries another)
            raise EngineRefusal(refusal, f"llguidance stopped the constraint before the first token: {stopped}")
        return template

    def compiled_form(self, constraint: Any, template: Any) -> str:
        import json

        try:
            return json.dumps(json.loads(template.grammar), indent=2, ensure_ascii=False)
        except ValueError:
            return template.grammar


def literal_tokenizer(tokenizer: Any) -> Any:
    """llguidance's tokenizer for a fast HF tokenizer, reading text as text: a special token's spelling in the
    text a constraint forces (`<|im_end|>`, `<filename>`) is written with ordinary tokens.

    `llguidance.hf.from_tokenizer` (what Outlines builds) tokenizes forced text with the HF tokenizer, which
    reads `<|im_end|>` in it as the special token: the mask then allowed only that token, so a choice or regex
    spelling it ended the answer there (EOS), or stopped the matcher ("doesn't satisfy the grammar"). Here the
    tokens and the special ones are llguidance's own; only the tokenizing differs (`encode_special_tokens`).
    """
    import llguidance
    import llguidance.hf

    spelled = llguidance.hf.from_tokenizer(tokenizer)
    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_TextEncoder(spelled, tokenizer)))


class _TextEncoder:
    """What `llguidance.TokenizerWrapper` reads: the vocabulary's bytes, its special ids, and a call that
    tokenizes text with special tokens spelled out."""

    def __init__(self, spelled: Any, tokenizer: Any) -> None:
        vocab = range(spelled.vocab_size)
        self.eos_token_id = spelled.eos_token
        self.bos_token_id = tokenizer.bos_token_id
        self.tokens = [spelled.decode_bytes([i]) for i in vocab]
        self.special_token_ids = [i for i in vocab if spelled.is_special_token(i)]
        self._backend = copy.copy(tokenizer.backend_tokenizer)
        self._backend.no_padding()
        self._backend.no_truncation()
        self._backend.encode_special_tokens = True

    def __call__(self, text: str) -> list[int]:
        return self._backend.encode(text, add_special_tokens=False).ids


def _pieces(llg_tokenizer: Any, text: str) -> list[segments.Piece]:
    """A marker split into text and the special tokens in it (`<tool_call>`, `[TOOL_CALLS]`), by id."""
    if llg_tokenizer is None:
        return [text]
    specials = _special_spellings(llg_tokenizer)
    if not specials:
        return [text]
    pattern = "|".join(re.escape(spelling) for spelling in sorted(specials, key=len, reverse=True))
    out: list[segments.Piece] = []
    for part in re.split(f"({pattern})", text):
        if part in specials:
            out.append(specials[part])
        elif part:
            out.append(part)
    return out


@functools.lru_cache(maxsize=8)
def _special_spellings(llg_tokenizer: Any) -> dict[str, int]:
    """Each special token's text, to its id."""
    ids = (i for i in range(llg_tokenizer.vocab_size) if llg_tokenizer.is_special_token(i))
    return {llg_tokenizer.decode_str([i]): i for i in ids}


class LLGuidanceProcessor(BitmaskProcessor):
    """One row's llguidance matcher; the rows of a batch step fill their masks in one LLExecutor call.

    `ll_matchers` (one matcher) and `grammar`/`llg_tokenizer` are named as in Outlines' processor: the
    decoder asks the matcher for forced tokens and errors, the debugger rebuilds it.
    """

    pooled = True  # a batch's masks: one LLExecutor call on llguidance's threads
    rewinds = True
    engine = "llguidance"

    def __init__(self, grammar: str, llg_tokenizer: Any) -> None:
        import llguidance

        self.grammar = grammar
        self.llg_tokenizer = llg_tokenizer
        # Building a matcher parses the grammar (~1 ms); each row copies this one instead (~10 µs).
        self._prototype = llguidance.LLMatcher(llg_tokenizer, grammar)
        super().__init__(llg_tokenizer.vocab_size)

    def reset(self) -> None:
        super().reset()
        self.ll_matchers: list[Any] = []

    def first_masks(self) -> str | None:
        """Two first masks, on copies, while the constraint compiles: llguidance builds a grammar's lexer on the
        first mask (0.4 s for `b{1000000}`: a batch's step would wait for it, and refuse the request as past its
        budget), and a lexer past llguidance's limits shows only from the second on. Why the matcher stopped, if
        it did."""
        out = np.empty(self.words, dtype=np.int32)
        try:
            with _FIRST_MASKS:
                for _ in range(2):
                    self.reset()
                    self._start()
                    self._fill(out)
            return self.stopped()
        finally:
            self.reset()

    def _start(self) -> None:
        self.ll_matchers = [self._prototype.deep_copy()]

    def _consume(self, tokens: list[int]) -> None:
        matcher = self.ll_matchers[0]
        for token in tokens:  # a refused token leaves the matcher in its error state (the result reports it)
            if not matcher.consume_token(token):
                return

    def _snapshot(self) -> Any:
        # a copy, not llguidance's rollback: that refuses grammars with max_tokens or stop lexemes (a structural
        # tag's free text) and leaves the matcher in its error state
        return self.ll_matchers[0].deep_copy()

    def _restore(self, snapshot: Any, count: int) -> None:
        self.ll_matchers[0] = snapshot

    def _fill(self, out: np.ndarray) -> None:
        self.ll_matchers[0].unsafe_compute_mask_ptr(out.ctypes.data, out.nbytes)

    def accepts(self, ids: Sequence[int] | torch.Tensor, token: int) -> bool:
        """Where the constraint forces text, llguidance's mask offers only that text's canonical tokens (`Sure` for the
        regex `Sure! ok`), while its grammar takes any spelling of it (`S`, `Sur`): text a user wrote (a prefix
        ending inside a word, `{"ki`) is spelled as the tokenizer splits it, and is the constraint's all the same."""
        if super().accepts(ids, token):
            return True
        matcher = self.ll_matchers[0]
        return not matcher.is_error() and matcher.validate_tokens([token]) == 1

    def stopped(self) -> str | None:
        """llguidance stops a matcher that hits one of its limits (lexer states, a row too long), or where no token
        continues a text that does not match yet (`[^\\s\\S]`); it then allows only the end."""
        matcher = self.ll_matchers[0] if self.ll_matchers else None
        if matcher is None or not matcher.is_error():
            return None
        text = matcher.get_error()
        error = re.search(r"(?:Parser )?Error: ([^\n]+)", text)
        if error and error.group(1) != "None":
            if "ff_tokens" in error.group(1):  # it follows the text the grammar forces, and that text never ends
                return f"{error.group(1)}; {ENDLESS}"
            limit = "the constraint is beyond llguidance's limits; a smaller one (fewer repetitions, alternatives or keys) fits"
            return f"{error.group(1)}; {limit}"
        if "Stop: NoExtensionBias" in text:
            return NOTHING_MATCHES
        return first_line(ValueError(text))

    @classmethod
    def _fill_many(cls, processors: Sequence[BitmaskProcessor], out: np.ndarray) -> None:
        if len(processors) == 1:
            processors[0]._fill(out[0])
            return
        pairs = [(p.ll_matchers[0], k) for k, p in enumerate(processors) if isinstance(p, LLGuidanceProcessor)]
        _executor().unsafe_compute_mask_ptr(pairs, out.ctypes.data, out.shape[1] * 4, out.shape[0])


@functools.cache
def _executor() -> Any:
    """llguidance's thread pool for a batch's masks, built on first use."""
    import llguidance

    return llguidance.LLExecutor()


def _warnings(spec: str, llg_tokenizer: Any, kind: str) -> list[str]:
    import llguidance

    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(spec, llg_tokenizer)
    if is_error:
        unsatisfiable = any("Unsatisfiable" in m for m in messages)
        refusal = "unsatisfiable" if unsatisfiable else "invalid" if kind == "grammar" else "unsupported"
        raise EngineRefusal(refusal, f"llguidance refused the {kind}: {'; '.join(messages)}")
    return [_IGNORED.sub(r"llguidance does not enforce these keywords here (lenient): \1", m) for m in messages]


_IGNORED = re.compile(r"^Unimplemented keys: \[(.*)\]$")


def _warm(llg_tokenizer: Any) -> None:
    """llguidance builds its token trie on the first mask (seconds); pay that at start, not in a request."""
    import llguidance
    import llguidance.torch

    matcher = llguidance.LLMatcher(llg_tokenizer, llguidance.grammar_from("regex", "a"))
    bitmask = llguidance.torch.allocate_token_bitmask(1, llg_tokenizer.vocab_size)
    llguidance.torch.fill_next_token_bitmask(matcher, bitmask, 0)


BACKEND = LLGuidance()
