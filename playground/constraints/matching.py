"""Checks in the engines' own dialect, in time linear in the text: llguidance matchers fed bytes.

Python's `re` backtracks (`(a+)+b` takes exponential time, holding the GIL) and reads a regex
differently from the engines (no `\\p{L}`; `\\d` means other things). llguidance is the default
engine's mask: its regexes are Rust `regex` syntax run by a lazily built automaton (constant work per
byte, bounded by its lexer fuel), its grammars are Lark or llama.cpp GBNF read by a bounded Earley
parser. Feeding it the text one byte token at a time gives the verdict the mask would give, and a
deadline between small chunks keeps any one check from holding the GIL or the decode for long.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from playground import client_scope
from playground.constraints import sandbox, verdict_budget

# One verdict may spend at most this long; a grammar ambiguous enough to exceed it gets valid=None.
CHECK_BUDGET_S = 2.0
# Earley items one input position may hold (llguidance's mask: 2,000); bounded by the budget above.
VERDICT_ROW_ITEMS = 100_000
_EOS = 256


class DialectError(ValueError):
    """The text is not a regex or grammar the engines can read; the message says why."""


@dataclass(frozen=True)
class Outcome:
    """A check's answer: True/False, or None when it hit a limit (the message says which)."""

    ok: bool | None
    message: str = ""


class _ByteTokens:
    """A tokenizer whose tokens are the 256 bytes (plus EOS), so a matcher reads text byte by byte."""

    eos_token_id = _EOS
    bos_token_id = None
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
    special_token_ids = [_EOS]

    def __call__(self, text: str | bytes) -> list[int]:
        return list(text.encode("utf-8") if isinstance(text, str) else text)


@functools.cache
def _tokenizer() -> Any:
    import llguidance

    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_ByteTokens()), slices=[])


def _condense(message: str) -> str:
    """llguidance's multi-line error in one line: the `error:` line, at the regex position it marks."""
    lines = message.strip().splitlines()
    detail = next((line[len("error:") :].strip() for line in lines if line.startswith("error:")), None)
    if detail is None:
        return next((line.strip() for line in lines if line.strip()), "invalid")
    carets = [line for line in lines[:-2] if line.strip().startswith("^") and line.startswith("    ")]
    return f"at position {carets[0].index('^') - 4}: {detail}" if carets else detail


def normal_grammar(text: str) -> str:
    """The grammar without whitespace-only lines, which mean nothing in Lark or GBNF.

    llguidance tells Lark from GBNF with `(?m)^\\s*(...)`, which backtracks over runs of blank lines
    (40,000 of them: 28 s); without them each line start scans only its own indentation.
    """
    return "\n".join(line for line in text.splitlines() if line.strip())


def grammar_dialect(text: str) -> str:
    """'lark' or 'gbnf', as llguidance tells them apart (a `start:` rule or `%llguidance` means Lark), with Lark's
    inlined `?start:` too, and not GBNF's `start ::=` (a rule of that name; llguidance's test takes it for Lark)."""
    return "lark" if _LARK.search(normal_grammar(text)) else "gbnf"


_LARK = re.compile(r"(?m)^[ \t]*(%llguidance\b|\??start[ \t]*:(?!:=))")


def lark_text(text: str) -> str:
    """The grammar in llguidance's Lark: as written, or converted from GBNF (ValueError when it cannot be)."""
    text = normal_grammar(text)
    if grammar_dialect(text) == "lark":
        return text
    try:
        return _gbnf_to_lark(_renamed_start(_GBNF_UNICODE.sub(_unicode_escape, text)))
    except Exception as exc:  # the converter raises its own error type
        raise ValueError(f"Failed to convert the grammar from GBNF to Lark: {exc}") from None


def _gbnf_to_lark(text: str) -> str:
    """llguidance's `gbnf_to_lark`, with a repeated repetition in parentheses: it wrote `([0-9]{2})*` as
    `/[0-9]/{2,2}*` and `("a"+)?` as `"a"+?`, which Lark cannot read (llama.cpp and xgrammar take both)."""
    from llguidance import gbnf_to_lark as converter

    rules = converter.GrammarParser().parse(text)
    converter.resolve(rules)
    for rule in rules.values():
        _group_repeated(rule)
    out, after_block = "%llguidance {}\n\n", True  # laid out as the converter lays out its rules
    for rule in sorted(rules.values(), key=lambda r: r.order):
        written = str(rule)
        out += ("\n" if not after_block and "\n" in written else "") + written + "\n"
        after_block = "\n" in written
        out += "\n" if after_block else ""
    return out


class _Grouped:
    """A node written in parentheses, as a repetition's operand."""

    def __init__(self, node: Any) -> None:
        self.node = node

    def __str__(self) -> str:
        return f"({self.node})"

    def is_atomic(self) -> bool:
        return True

    def is_terminal(self) -> bool:
        return bool(self.node.is_terminal())

    def children(self) -> list[Any]:
        return [self.node]


def _group_repeated(node: Any) -> None:
    from llguidance.gbnf_to_lark import RepetitionNode

    for child in node.children():
        _group_repeated(child)
    if isinstance(node, RepetitionNode) and isinstance(node.node, RepetitionNode):
        node.node = _Grouped(node.node)


def _renamed_start(text: str) -> str:
    """GBNF with a rule named `start` under another name: the converter names `root` so, and refused the grammar
    ("Rule 'start' already exists"). Names are replaced outside literals, classes and comments."""
    if not re.search(r"(?<![\w-])start(?![\w-])", text):
        return text
    fresh = next(n for n in ("start-rule", *(f"start-rule-{i}" for i in range(1, 100))) if n not in text)
    out, i = [], 0
    for found in _GBNF_SKIPPED.finditer(text):
        out.append(re.sub(r"(?<![\w-])start(?![\w-])", fresh, text[i : found.start()]))
        out.append(found[0])
        i = found.end()
    out.append(re.sub(r"(?<![\w-])start(?![\w-])", fresh, text[i:]))
    return "".join(out)


# What is not a rule name in GBNF: string literals, character classes (both with escapes) and comments.
_GBNF_SKIPPED = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|#[^\n]*')


# llama.cpp's GBNF escapes `\uXXXX` and `\UXXXXXXXX` (not after an escaped backslash): the converter writes them
# as Lark cannot read them (`\u00e9` as `\ue9`), so they become the character (ASCII: `\xHH`, which it keeps).
_GBNF_UNICODE = re.compile(r"(?<!\\)((?:\\\\)*)\\(?:u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8}))")


def _unicode_escape(found: re.Match[str]) -> str:
    code = int(found[2] or found[3], 16)
    if code < 0x80:
        return f"{found[1]}\\x{code:02x}"
    if 0xD800 <= code <= 0xDFFF or code > 0x10FFFF:
        return found[0]  # no character: the converter names the escape
    return found[1] + chr(code)


def grammar_spec(kind: str, text: str) -> str:
    """The llguidance grammar for a regex, a Lark/GBNF grammar or a JSON schema, as the mask builds it."""
    import llguidance

    if kind == "regex":
        return llguidance.grammar_from("regex", text)
    if kind == "json_schema":
        return llguidance.grammar_from("json_schema", text)
    text = normal_grammar(text)
    try:  # GBNF converted, else Lark as is (for Lark's own error)
        return llguidance.grammar_from("lark", lark_text(text))
    except (ValueError, RecursionError):
        return llguidance.grammar_from("lark", text)


@functools.cache
def _limits() -> Any:
    """The mask's limits, but a wider Earley row (a grammar of 2,500 words needs one): the deadline
    bounds the cost, and a verdict should not give up where a cheap answer exists."""
    import llguidance

    return llguidance.LLParserLimits(max_items_in_row=VERDICT_ROW_ITEMS)


def _build(kind: str, text: str) -> Any:
    """A fresh matcher for the grammar, kept to copy (copies are cheap); DialectError if unreadable.

    In the server only after a sandbox built the same matcher (playground.constraints.sandbox): native code never
    reads a grammar here first."""
    import llguidance

    if not sandbox.inside() and (kind, _digest(text)) not in _safe:
        if verdict_budget.active():  # inside a verdict (the batch's step, maybe): never wait for a sandbox
            raise DialectError("not read by a sandbox yet")
        problem = syntax_error(kind, text)
        if problem is not None:
            raise DialectError(problem)

    matcher = llguidance.LLMatcher(_tokenizer(), grammar_spec(kind, text), log_level=0, limits=_limits())
    if matcher.is_error():
        problem = _condense(matcher.get_error())
        raise DialectError(_in_conversion(text, problem) if kind == "grammar" else problem)
    return matcher


# A schema's patterns are checked at every step of the EOS gate, so many small ones are kept; grammars'
# and long regexes' matchers can take megabytes (requests bring texts up to 4 MB), so only a few of those.
_SMALL = 4096
_small_templates = functools.lru_cache(maxsize=1024)(_build)
_grammar_templates = functools.lru_cache(maxsize=16)(_build)


def _matcher(kind: str, text: str) -> Any:
    """A matcher of its own for one check (templates are shared; a copy costs microseconds)."""
    big = kind == "grammar" or len(text) > _SMALL
    return (_grammar_templates if big else _small_templates)(kind, text).deep_copy()


def syntax_error(kind: str, text: str) -> str | None:
    """Why the engines cannot read this regex or grammar, or None when they can (read in a sandbox)."""
    if sandbox.inside():
        return local_syntax_error(kind, text)
    return _proven(kind, _digest(text), text)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()


# (kind, digest) of every text a sandbox read without trouble: the server may build its matchers.
_safe: OrderedDict[tuple[str, str], None] = OrderedDict()
_SAFE_KEPT = 200_000  # ~30 MB of digests

# The sandbox's answers, by (client, kind, SHA-256 of the text) so 4 MB texts are not kept as keys, and a
# quick answer never tells one client that another sent the same text.
_verdicts: OrderedDict[tuple[str, str, str], str | None] = OrderedDict()
_verdicts_lock = threading.Lock()
_VERDICTS_KEPT = 4096


def _proven(kind: str, digest: str, text: str) -> str | None:
    """The sandbox's answer for (kind, text), remembered (a crash is an answer too)."""
    key = (client_scope.current(), kind, digest)
    with _verdicts_lock:
        if key in _verdicts:
            _verdicts.move_to_end(key)
            return _verdicts[key]
    try:
        problem = sandbox.call("playground.constraints.matching:local_syntax_error", kind, text)
    except sandbox.SandboxError as exc:
        problem = f"the engines cannot read it safely: {exc}"
        if exc.transient:
            return problem
    with _verdicts_lock:
        _verdicts[key] = problem
        while len(_verdicts) > _VERDICTS_KEPT:
            _verdicts.popitem(last=False)
        if problem is None:
            _safe[(kind, digest)] = None
            while len(_safe) > _SAFE_KEPT:
                _safe.popitem(last=False)
    return problem


def local_syntax_error(kind: str, text: str) -> str | None:
    """syntax_error read in this process: only in a sandbox."""
    try:
        _matcher(kind, text)
    except DialectError as exc:
        return _gbnf_problem(text) or str(exc) if kind == "grammar" else str(exc)
    except (ValueError, RecursionError) as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


def _gbnf_problem(text: str) -> str | None:
    """For text that is not Lark: why it is not GBNF either (the Lark error would mislead)."""
    if grammar_dialect(text) == "lark":
        return None
    try:
        lark_text(text)
    except ValueError as exc:
        reason = str(exc).removeprefix("Failed to convert the grammar from GBNF to Lark: ").splitlines()[0]
        # (a Lark grammar without its start rule reads as GBNF: say what would make it Lark too)
        return f"not Lark (no `start:` rule) and not GBNF: {reason}"
    return None


def _in_conversion(text: str, problem: str) -> str:
    """A Lark error's `line(column)`, with that line to read it by: in GBNF a place in the Lark it converts to; in
    Lark the grammar's own line and what stands at the column ("1(19): lexer error" said no more)."""
    found = re.search(r"(?:^|\bat )(\d+)\((\d+)\)", problem)
    if found is None:
        return problem
    lark = grammar_dialect(text) == "lark"
    try:
        lines = (normal_grammar(text) if lark else lark_text(text)).splitlines()  # (as the engines read it)
    except (ValueError, RecursionError):  # GBNF that does not convert: its own error says why
        return problem
    number, column = int(found[1]), int(found[2])
    if not 0 < number <= len(lines):
        return problem
    line = lines[number - 1]
    if not lark:
        return f"{problem} (line {number} of the Lark this GBNF converts to: {line.strip()})"
    there = line[column - 1 : column + 19] if 0 < column <= len(line) else ""
    where = f"`{there}` at column {column}" if there.strip() else f"the end of the line, column {column}"
    return f"{problem} (line {number}: `{line.strip()}`; there: {where})"


def _feed(matcher: Any, data: bytes, deadline: float) -> Outcome | None:
    """Consume `data` in chunks sized so each holds the GIL briefly; an Outcome when it stops early."""
    pos, step = 0, 1
    while pos < len(data):
        started = time.monotonic()
        chunk = list(data[pos : pos + step])
        taken = matcher.try_consume_tokens(chunk)
        if matcher.is_error():
            return Outcome(None, f"too complex to check: {_condense(matcher.get_error())}")
        if taken < len(chunk):
            return Outcome(False, f"refused at byte {pos + taken}")
        pos += step
        now = time.monotonic()
        if now > deadline and pos < len(data):
            return Outcome(None, f"too costly to check within its time budget (stopped at byte {pos})")
        step = min(step * 2, 4096) if now - started < 0.001 else max(step // 2, 1)
    return None


def full_match(kind: str, value: str, text: str, budget_s: float | None = None) -> Outcome:
    """Does the whole text match the regex (kind 'regex') or parse with the grammar (kind 'grammar')?

    Within `budget_s` (default CHECK_BUDGET_S), and within the enclosing verdict's budget if any."""
    try:
        matcher = _matcher(kind, value)
    except (DialectError, ValueError, RecursionError) as exc:
        return Outcome(None, f"the engines cannot read it: {exc}")
    data = text.encode("utf-8", errors="surrogatepass")
    deadline = min(time.monotonic() + (budget_s or CHECK_BUDGET_S), verdict_budget.deadline())
    stopped = _feed(matcher, data, deadline)
    if stopped is not None:
        return stopped
    if matcher.is_accepting():
        return Outcome(True)
    return Outcome(False, "ends too early")


def pattern_search(pattern: str, text: str) -> bool | None:
    """JSON Schema `pattern` (a search, anchors honoured) as llguidance's JSON mask reads it.

    The pattern is checked inside a JSON string, exactly as the mask enforces it; None when it
    cannot be read or checked within the limits.
    """
    schema = json.dumps({"type": "string", "pattern": pattern})
    outcome = full_match("json_schema", schema, json.dumps(text, ensure_ascii=False))
    return outcome.ok


def pattern_error(pattern: str) -> str | None:
    """Why the engines cannot read a JSON Schema `pattern`, or None."""
    return syntax_error("json_schema", json.dumps({"type": "string", "pattern": pattern}))


def read_otherwise(pattern: str) -> str | None:
    """Where Rust's regex syntax (the engines') gives a character class a meaning ECMA-262's (JSON Schema's) does not:
    a `[` inside a class opens a nested class or a POSIX class (`[[:alpha:]]`) there and is itself in ECMA, and
    `&&`, `--` and `~~` are set operations there and characters in ECMA. The mask and the verdict would agree on
    the Rust reading, and every other validator would refuse the answer."""
    i, start = 0, None  # start: where the open class's members begin
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if start is None:
            if char == "[":
                i += 2 if pattern.startswith("[^", i) else 1
                start = i
                continue
        elif char == "[":
            return (
                f"`[` at position {i} is inside a character class: a nested or POSIX class (`[[:alpha:]]`) to the "
                "engines, a plain `[` to JSON Schema (ECMA-262); write `\\[` for the character, or the class's "
                "members (`[a-zA-Z]`)"
            )
        elif pattern.startswith(("&&", "--", "~~"), i):
            operation = pattern[i : i + 2]
            return (
                f"`{operation}` at position {i} is a set operation inside a character class to the engines and two "
                f"characters to JSON Schema (ECMA-262); write the class's members, or `\\{operation[0]}` for the "
                "character"
            )
        elif char == "]" and i > start:
            start = None
        i += 1
    return None
