"""Constraints: parse and check before decoding, and validate the finished output.

A Constraint is a kind plus its canonical value; playground.constraints.compiler turns it into token masks.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

from playground.constraints import jsonformat, matching, schema_check, segments
from playground.errors import (
    ConstraintError,
    InvalidConstraintError,
    UnsupportedConstraintError,
    first_line,
    json_problem,
)
from playground.types import ConstraintKind, GrammarType, Validation

# llguidance reads a grammar of 20,000 alternatives (200 KB) in ~1 s and one of 50,000 in ~18 s, outside
# any compile time limit (the pre-check runs in the request): larger grammars are refused up front.
MAX_GRAMMAR_BYTES = 128 * 1024


def _plainer_regex_problem(pattern: str, problem: str) -> str:
    """llguidance's words for a word boundary and a named backreference, as the other refusals word theirs."""
    if "lookarounds not supported" in problem and "Word" in problem:
        at = _word_boundary(pattern)
        where = f"at position {at}: " if at is not None else ""
        return f"{where}word boundaries (\\b, \\B) are not supported: they look at the characters around them"
    named = pattern.find("(?P=")
    if "unrecognized flag" in problem and named >= 0:
        return f"at position {named}: backreferences are not supported (named ones, (?P=name), too)"
    return problem


def _word_boundary(pattern: str) -> int | None:
    """Where the first \\b or \\B outside a character class is."""
    depth, index = 0, 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            if depth == 0 and pattern[index + 1 : index + 2] in ("b", "B"):
                return index
            index += 2
            continue
        if char == "[":
            depth += 1
        elif char == "]" and depth:
            depth -= 1
        index += 1
    return None


# A 'single-quoted' literal (a grammar's error then gets a hint).
_SINGLE_QUOTED = re.compile(r"'[^'\n]+'")


@dataclass(frozen=True)
class Constraint:
    """A parsed, checked constraint: kind and canonical value (schema dict, pattern, choices, grammar)."""

    kind: ConstraintKind
    value: Any = None
    layout: str = jsonformat.DEFAULT_LAYOUT  # JSON whitespace (playground.constraints.jsonformat)
    # a JSON schema's name as the client gave it (OpenAI's json_schema.name), passed on to servers that read it;
    # it does not change what the constraint allows
    name: str | None = field(default=None, compare=False)
    # a JSON schema's strictness as asked (closed: no keys it does not declare), passed on to servers that read it
    # (OpenAI's json_schema.strict) or said in the schema for those that close what it leaves unsaid
    strict: bool = field(default=True, compare=False)

    @classmethod
    def none(cls) -> Constraint:
        return cls("none", None)

    @classmethod
    def from_grammar(cls, grammar: GrammarType | dict | None) -> Constraint:
        """From TGI's `grammar` parameter (json, json_schema, regex) or ours (choice, grammar)."""
        if grammar is None:
            return cls.none()
        if isinstance(grammar, dict):
            grammar = GrammarType.model_validate(grammar)
        json_options = {
            "layout": jsonformat.DEFAULT_LAYOUT if grammar.whitespace is None else grammar.whitespace,
            "closed": grammar.strict is not False,
        }
        if grammar.type == "json":
            return cls.json_schema(grammar.value, **json_options)
        if grammar.type == "json_schema":
            value = grammar.value
            if isinstance(value, str):
                value = _load_json(value, "grammar.value")
            if not isinstance(value, dict) or "schema" not in value:
                raise InvalidConstraintError(
                    "grammar of type json_schema needs a value {name?, schema}", field="parameters.grammar.value"
                )
            strict = value.get("strict")  # OpenAI's json_schema object pasted whole: its own strict counts too
            if strict is not None and not isinstance(strict, bool):
                raise InvalidConstraintError("strict must be true or false", field="parameters.grammar.value.strict")
            if strict is not None and grammar.strict is not None and strict != grammar.strict:
                raise InvalidConstraintError(
                    "grammar.strict and grammar.value.strict disagree: give strict once",
                    field="parameters.grammar.value.strict",
                )
            if grammar.strict is None and strict is not None:
                json_options["closed"] = strict
            name = value.get("name")
            return cls.json_schema(value["schema"], **json_options, name=name if isinstance(name, str) else None)
        if grammar.type == "regex":
            return cls.regex(grammar.value)
        if grammar.type == "choice":
            return cls.choice(grammar.value)
        if grammar.type == "structural_tag":
            return cls.structural_tag(grammar.value)
        return cls.grammar(grammar.value)

    @classmethod
    def parse(cls, kind: str, text: str) -> Constraint:
        """From the UI's (kind, text) pair; choice text is a JSON list or one choice per line."""
        if kind in ("none", "", None):
            return cls.none()
        if kind == "json_schema":
            return cls.json_schema(text)
        if kind == "regex":
            return cls.regex(text)
        if kind == "choice":
            stripped = text.strip()
            if stripped.startswith("["):
                return cls.choice(_load_json(stripped, "choice list"))
            return cls.choice([line for line in text.splitlines() if line.strip()])
        if kind == "grammar":
            return cls.grammar(text)
        if kind == "structural_tag":
            return cls.structural_tag(text)
        raise InvalidConstraintError(
            f"unknown constraint kind {kind!r}; use none, json_schema, regex, choice, grammar or structural_tag"
        )

    @classmethod
    def json_schema(
        cls, schema: Any, *, layout: str = jsonformat.DEFAULT_LAYOUT, closed: bool = False, name: str | None = None
    ) -> Constraint:
        """Accepts a dict, JSON text, or a pydantic model class; `closed`: no keys the schema does not declare;
        `name`: the schema's name, for servers that take one."""
        if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
            schema = schema.model_json_schema()
        if isinstance(schema, str):
            schema = _load_json(schema, "JSON schema")
        if isinstance(schema, bool):
            schema = {} if schema else {"not": {}}
        if not isinstance(schema, dict):
            raise schema_check.not_a_schema(schema)
        schema_check.check_schema(schema)
        if closed:
            schema = jsonformat.closed(schema)
        return cls("json_schema", _Frozen(schema), jsonformat.check_layout(layout), name, strict=closed)

    @classmethod
    def regex(cls, pattern: Any) -> Constraint:
        if not isinstance(pattern, str) or not pattern:
            raise InvalidConstraintError("a regex constraint needs a non-empty pattern string")
        if (len(pattern) - len(pattern.rstrip("\\"))) % 2:  # llguidance drops it; Rust's regex refuses it
            raise InvalidConstraintError(
                f"invalid regex at position {len(pattern) - 1}: a trailing backslash escapes nothing "
                "(the engines read Rust regex syntax)"
            )
        problem = matching.syntax_error("regex", pattern)
        if problem:
            problem = _plainer_regex_problem(pattern, problem)
            error = UnsupportedConstraintError if "not supported" in problem else InvalidConstraintError
            raise error(f"invalid regex {problem} (the engines read Rust regex syntax)")
        return cls("regex", pattern)

    @classmethod
    def choice(cls, choices: Any) -> Constraint:
        if not isinstance(choices, list) or not choices or not all(isinstance(c, str) and c for c in choices):
            raise InvalidConstraintError("a choice constraint needs a non-empty list of non-empty strings")
        return cls("choice", tuple(dict.fromkeys(choices)))

    @classmethod
    def grammar(cls, text: Any) -> Constraint:
        if not isinstance(text, str) or not text.strip():
            raise InvalidConstraintError(
                "a grammar constraint needs Lark grammar text with a `start` rule, or GBNF with a `root` rule"
            )
        size = len(text.encode("utf-8", errors="surrogatepass"))
        if size > MAX_GRAMMAR_BYTES:
            raise UnsupportedConstraintError(
                f"a grammar may be at most {MAX_GRAMMAR_BYTES} bytes (UTF-8), got {size}: reading one costs "
                "time that grows faster than its size"
            )
        text = matching.normal_grammar(text)
        problem = matching.syntax_error("grammar", text)
        if problem:
            if _SINGLE_QUOTED.search(text):  # valid in many grammar dialects, a lexer error in Lark's
                problem += "\nhint: Lark literals take double quotes: write \"yes\", not 'yes'"
            raise InvalidConstraintError(f"invalid grammar (Lark or GBNF, as llguidance reads it): {problem}")
        return cls("grammar", text)

    @classmethod
    def structural_tag(cls, value: Any) -> Constraint:
        """vLLM's structural_tag (legacy {structures, triggers} or xgrammar's {format}): constrained segments."""
        return cls("structural_tag", _Frozen(segments.parse(value)))

    def to_grammar(self) -> GrammarType | None:
        """The TGI `grammar` parameter that carries this constraint (None for kind 'none')."""
        if self.kind == "none":
            return None
        if self.kind == "json_schema":
            whitespace = None if self.layout == jsonformat.DEFAULT_LAYOUT else self.layout
            if self.name is not None:  # TGI's {name, schema} form keeps the name
                named = {"name": self.name, "schema": self.schema}
                return GrammarType(type="json_schema", value=named, whitespace=whitespace)
            return GrammarType(type="json", value=self.schema, whitespace=whitespace)
        if self.kind == "choice":
            return GrammarType(type="choice", value=list(self.value))
        if self.kind == "structural_tag":  # in xgrammar's `format` form, which vLLM takes too
            return GrammarType(type="structural_tag", value=segments.to_xgrammar(self.schema))
        return GrammarType(type=self.kind, value=self.value)

    @property
    def grammar_dialect(self) -> str | None:
        """'lark' or 'gbnf' for a grammar (decided as llguidance decides it), else None."""
        return matching.grammar_dialect(self.value) if self.kind == "grammar" else None

    @property
    def schema(self) -> dict:
        """A json_schema's schema; a structural_tag's canonical spec (playground.constraints.segments)."""
        return self.value.data if isinstance(self.value, _Frozen) else {}

    def with_guidance(self, **options: Any) -> Constraint:
        """The JSON schema with these llguidance options added to its own `x-guidance` (they win over the layout's)."""
        if self.kind != "json_schema":
            raise ValueError(f"llguidance's JSON options apply to a json_schema, not to a {self.kind}")
        own = self.schema.get("x-guidance")
        guidance = {**own, **options} if isinstance(own, dict) else options
        return replace(self, value=_Frozen({**self.schema, "x-guidance": guidance}))

    def with_schema(self, schema: dict) -> Constraint:
        """The JSON schema constraint reading `schema` instead (a form for the engines: the compiler's lenient one)."""
        if self.kind != "json_schema":
            raise ValueError(f"a schema replaces a json_schema's, not a {self.kind}'s")
        return replace(self, value=_Frozen(schema))

    def engine_input(self) -> str:
        """The text an engine compiles: schema JSON, a regex (choices become an alternation), a grammar."""
        if self.kind == "json_schema":
            return json.dumps(jsonformat.with_layout(self.schema, self.layout))
        if self.kind == "choice":
            return "(" + "|".join(_escape_rust_regex(c) for c in self.value) + ")"
        if self.kind == "structural_tag":
            return json.dumps(self.schema)
        return self.value

    def validate(self, text: str, budget_s: float | None = None) -> Validation:
        """The verdict on a finished output; the last line of defence whatever engine made the mask.

        Bounded in time and memory (`budget_s`, default 2 s): past it the verdict is valid=None."""
        if self.kind == "none":
            return Validation(valid=None, message="no constraint")
        if self.kind == "json_schema":
            return schema_check.validate(self.schema, text, budget_s or schema_check.VERDICT_BUDGET_S)
        if self.kind == "structural_tag":
            return segments.validate(self.schema, text, budget_s)
        if self.kind == "choice":
            ok = text in self.value
            return Validation(valid=ok, message="one of the choices" if ok else "not one of the choices")
        return _validate_match(self.kind, self.value, text, budget_s)


class _Frozen:
    """A hashable wrapper for a schema dict, so constraints can key the compile cache."""

    __slots__ = ("data", "_key")

    def __init__(self, data: dict) -> None:
        self.data = data
        self._key = json.dumps(data, sort_keys=True)

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Frozen) and other._key == self._key

    def __repr__(self) -> str:
        return self._key


def _load_json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidConstraintError(f"invalid JSON in {what}: {json_problem(exc)}") from None
    except RecursionError:
        raise InvalidConstraintError(f"the JSON in {what} is nested too deeply") from None
    except ValueError as exc:  # an integer longer than Python's digit limit, say
        raise InvalidConstraintError(f"invalid JSON in {what}: {first_line(exc)}") from None


def _escape_rust_regex(text: str) -> str:
    """Escape for the Rust regex dialect the engines use (Python's re.escape over-escapes some chars)."""
    return re.sub(r"([\\.+*?()|\[\]{}^$#&\-~])", r"\\\1", text)


def _validate_match(kind: str, value: str, text: str, budget_s: float | None = None) -> Validation:
    """Regex and grammar verdicts, read as the engines read them (see playground.constraints.matching)."""
    outcome = matching.full_match(kind, value, text, budget_s)
    if outcome.ok:
        return Validation(valid=True, message="full match" if kind == "regex" else "parses with the grammar")
    if outcome.ok is None:
        return Validation(valid=None, message=f"could not check: {outcome.message}")
    what = f"does not fully match /{value}/" if kind == "regex" else "does not parse with the grammar"
    return Validation(valid=False, message=f"{what}: {outcome.message}")


def check_constraint(kind: str, text: str) -> str | None:
    """For live checks in the UI: an error message, or None when the text is a usable constraint.

    A schema no value satisfies (minimum above maximum, say) is refused here as every engine refuses it,
    so the editor never calls it valid.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"the text contains invalid Unicode at position {exc.start}"
    try:
        constraint = Constraint.parse(kind, text)
    except ConstraintError as exc:
        return exc.message
    if constraint.kind == "json_schema":
        from playground.constraints.backends.base import EngineRefusal, check_satisfiable

        try:
            check_satisfiable(constraint.engine_input())
        except EngineRefusal as exc:
            return exc.message
    return None
