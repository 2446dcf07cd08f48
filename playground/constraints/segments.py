"""Segment constraints (vLLM's `structural_tag`): free text, with JSON segments between a begin and an end marker.

Two request forms are read into one spec: vLLM's legacy `{"structures": [{"begin", "schema", "end"}], "triggers"}`
(free text; a trigger starts a segment) and xgrammar's `{"format": {...}}` with `triggered_tags`,
`tags_with_separator` or a single `tag`. The spec compiles to a Lark grammar for llguidance (lazy free text up to
a trigger, `%json` segments, special tokens by id) and to xgrammar's own structural tag; the verdict judges each
segment on its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from playground.constraints import jsonformat, schema_check
from playground.errors import ConstraintError, InvalidConstraintError, UnsupportedConstraintError, json_problem
from playground.types import SegmentVerdict, Validation

MAX_STRUCTURES = 64
_DECODER = json.JSONDecoder()
# A literal as an engine writes it: text, or a special token's id (the tokenizer's, when the marker is one).
Piece = str | int


def parse(value: Any) -> dict[str, Any]:
    """The canonical spec of a structural tag in either form; a problem names the field at fault."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise InvalidConstraintError(f"invalid JSON in the structural tag: {json_problem(exc)}") from None
    if not isinstance(value, dict):
        raise InvalidConstraintError("a structural tag is an object: {structures, triggers} or {format}")
    if "format" in value:
        return _from_format(value["format"])
    unknown = sorted(set(value) - {"type", "structures", "triggers"})
    if unknown:
        raise InvalidConstraintError(f"structural tag: unknown keys {unknown}; use structures and triggers, or format")
    structures = _structures(value.get("structures"), "structures", "schema")
    triggers = value.get("triggers")
    if not isinstance(triggers, list) or not triggers or not all(isinstance(t, str) and t for t in triggers):
        raise InvalidConstraintError("structural tag: triggers must be a non-empty list of non-empty strings")
    return _checked(structures, triggers, free_text=True, at_least_one=False, stop_after_first=False, separator="")


def _from_format(fmt: Any) -> dict[str, Any]:
    """xgrammar's newer form: the three formats that are segments of JSON between markers, and `or` of segments
    (a `tag` or `tags_with_separator`) and a `json_schema`: calls, or an answer in that schema instead (tools beside
    a response format)."""
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "or":
        return _calls_or_answer(fmt.get("elements"))
    if kind == "tag":
        structures = _structures([fmt], "format", "content")
        return _checked(structures, [], free_text=False, at_least_one=True, stop_after_first=True, separator="")
    if kind not in ("triggered_tags", "tags_with_separator"):
        raise UnsupportedConstraintError(
            f"structural tag format {kind!r} is not supported here; use triggered_tags, tags_with_separator or tag "
            "(each tag's content a json_schema), or `or` of such segments and a json_schema"
        )
    structures = _structures(fmt.get("tags"), "format.tags", "content")
    at_least_one, stop_after_first = bool(fmt.get("at_least_one")), bool(fmt.get("stop_after_first"))
    if kind == "tags_with_separator":
        separator = fmt.get("separator", "")
        if not isinstance(separator, str):
            raise InvalidConstraintError("structural tag: format.separator must be a string")
        return _checked(structures, [], False, at_least_one, stop_after_first, separator)
    triggers = fmt.get("triggers")
    if not isinstance(triggers, list) or not triggers or not all(isinstance(t, str) and t for t in triggers):
        raise InvalidConstraintError("structural tag: format.triggers must be a non-empty list of non-empty strings")
    return _checked(structures, triggers, True, at_least_one, stop_after_first, "")


def _calls_or_answer(elements: Any) -> dict[str, Any]:
    kinds = [e.get("type") if isinstance(e, dict) else None for e in elements] if isinstance(elements, list) else []
    if len(kinds) != 2 or "json_schema" not in kinds or not {"tag", "tags_with_separator"} & set(kinds):
        raise UnsupportedConstraintError(
            "structural tag: format `or` is supported here with two elements: segments (tag or tags_with_separator) "
            "and a json_schema (the answer when there is no segment)"
        )
    segments_at = 1 - kinds.index("json_schema")
    spec = _from_format(elements[segments_at])
    try:
        spec["answer"] = _schema(elements[1 - segments_at].get("json_schema"))
    except ConstraintError as exc:
        raise type(exc)(f"structural tag: format.elements[{1 - segments_at}].json_schema: {exc.message}") from None
    spec["at_least_one"] = True  # no segment is the answer's case
    return spec


def _structures(items: Any, where: str, body: str) -> list[dict[str, Any]]:
    """Each segment's begin, JSON schema (checked as any schema constraint is) and end."""
    if not isinstance(items, list) or not items or len(items) > MAX_STRUCTURES:
        raise InvalidConstraintError(f"structural tag: {where} must list 1 to {MAX_STRUCTURES} segments")
    out = []
    for index, item in enumerate(items):
        at = f"{where}[{index}]" if where != "format" else where
        if not isinstance(item, dict) or not isinstance(item.get("begin"), str) or not item["begin"]:
            raise InvalidConstraintError(f"structural tag: {at} needs a non-empty begin string")
        if not isinstance(item.get("end", ""), str):
            raise InvalidConstraintError(f"structural tag: {at}.end must be a string")
        schema = item.get(body)
        if body == "content":
            if not isinstance(schema, dict) or schema.get("type") != "json_schema":
                raise UnsupportedConstraintError(
                    f"structural tag: {at}.content must be {{type: json_schema, json_schema: ...}}"
                )
            schema = schema.get("json_schema")
        try:
            schema = _schema(schema)
        except ConstraintError as exc:
            raise type(exc)(f"structural tag: {at}.{body}: {exc.message}") from None
        out.append({"begin": item["begin"], "schema": schema, "end": item.get("end", "")})
    return out


def _schema(schema: Any) -> dict[str, Any]:
    """A segment's schema, checked as a json_schema constraint's is (absent: any JSON)."""
    if schema is None or schema is True:
        return {}
    if schema is False:
        return {"not": {}}
    if not isinstance(schema, dict):
        raise schema_check.not_a_schema(schema)
    schema_check.check_schema(schema)
    return schema


def _checked(
    structures: list[dict[str, Any]],
    triggers: list[str],
    free_text: bool,
    at_least_one: bool,
    stop_after_first: bool,
    separator: str,
) -> dict[str, Any]:
    for index, structure in enumerate(structures):
        if free_text and not any(structure["begin"].startswith(t) for t in triggers):
            raise InvalidConstraintError(
                f"structural tag: segment {index}'s begin {structure['begin']!r} starts with none of the triggers"
            )
    return {
        "structures": structures,
        "triggers": list(dict.fromkeys(triggers)),
        "free_text": free_text,
        "at_least_one": at_least_one,
        "stop_after_first": stop_after_first,
        "separator": separator,
        "answer": None,  # `or`: the JSON schema an answer without segments follows
    }


# --- llguidance: a Lark grammar ---------------------------------------------------------------------


def to_lark(spec: dict[str, Any], pieces: Callable[[str], list[Piece]] = lambda text: [text]) -> str:
    """The Lark grammar llguidance compiles; `pieces` splits a marker into text and special-token ids.

    Free text before a text trigger is lazy (`stop=` the trigger), so the trigger starts the segment; other free
    text may contain no trigger (nor a special one spelled out), so a trigger always starts a checked segment.
    As in xgrammar, `at_least_one` puts a segment first, and `stop_after_first` ends the answer with it.
    """
    text_triggers = [t for t in spec["triggers"] if _special(pieces(t)) is None]
    lines = []
    for index, structure in enumerate(spec["structures"]):
        begin, schema = structure["begin"], jsonformat.with_layout(structure["schema"], jsonformat.DEFAULT_LAYOUT)
        lines.append(f"body{index}: %json {json.dumps(schema)} {_literal(pieces, structure['end'])}".rstrip())
        lines.append(f"seg{index}: {_literal(pieces, begin)} body{index}")
        trigger = next((t for t in spec["triggers"] if begin.startswith(t)), None)
        if trigger in text_triggers:  # its trigger is the stop of the free text before it
            lines.append(f"after{index}: {_literal(pieces, begin[len(trigger) :])} body{index}".rstrip())
    one = "seg: " + " | ".join(f"seg{i}" for i in range(len(spec["structures"])))
    if not spec["free_text"]:
        sep = f"{_literal(pieces, spec['separator'])} " if spec["separator"] else ""
        many = f"seg ({sep}seg)*" if not spec["stop_after_first"] else "seg"
        start = many if spec["at_least_one"] else f"({many})?"
        if spec.get("answer") is not None:
            answer = jsonformat.with_layout(spec["answer"], jsonformat.DEFAULT_LAYOUT)
            lines += [f"segs: {start}", f"answer: %json {json.dumps(answer)}"]
            start = "segs | answer"
        return "\n".join([f"start: {start}", one, *lines]) + "\n"
    chunks = []
    for n, trigger in enumerate(spec["triggers"]):
        mine = [i for i, s in enumerate(spec["structures"]) if s["begin"].startswith(trigger)]
        if trigger in text_triggers:
            others = [t for t in spec["triggers"] if t != trigger]
            body = f"/(?s:.*)/ & ~/{_contains(others)}/" if others else "/(?s:.*)/"
            lines.append(f"pre{n}[stop={_string(trigger)}]: {body}")
            chunks.append(f"pre{n} ({' | '.join(f'after{i}' for i in mine)})")
        else:
            chunks.append(f"tail ({' | '.join(f'seg{i}' for i in mine)})")
    lines.append("tail: TAIL?")
    lines.append(f"TAIL: /(?s:.+)/ & ~/{_contains(spec['triggers'])}/")
    if spec["at_least_one"]:
        start = "seg" if spec["stop_after_first"] else "seg chunk* tail"
    else:
        start = "chunk | tail" if spec["stop_after_first"] else "chunk* tail"
    return "\n".join([f"start: {start}", "chunk: " + " | ".join(chunks), one, *lines]) + "\n"


def _special(parts: list[Piece]) -> int | None:
    return parts[0] if len(parts) == 1 and isinstance(parts[0], int) else None


def _literal(pieces: Callable[[str], list[Piece]], text: str) -> str:
    """A marker as Lark: quoted text, with a special token written by id (the model's own token for it)."""
    if not text:
        return ""
    return " ".join(f"<[{p}]>" if isinstance(p, int) else _string(p) for p in pieces(text))


def _string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _contains(texts: list[str]) -> str:
    """A Lark regex body matching any text that contains one of `texts`."""
    escaped = (re.sub(r"([\\.+*?()|\[\]{}^$#&\-~/])", r"\\\1", t) for t in texts)
    alternatives = "|".join(e.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t") for e in escaped)
    return f"(?s:.*({alternatives}).*)"


# --- xgrammar: its own structural tag ---------------------------------------------------------------


def to_xgrammar(spec: dict[str, Any]) -> dict[str, Any]:
    """xgrammar's structural tag (its `format` form) for the spec."""
    tags = [
        {
            "type": "tag",
            "begin": s["begin"],
            "content": {"type": "json_schema", "json_schema": s["schema"]},
            "end": s["end"],
        }
        for s in spec["structures"]
    ]
    flags = {"at_least_one": spec["at_least_one"], "stop_after_first": spec["stop_after_first"]}
    if spec["free_text"]:
        fmt = {"type": "triggered_tags", "triggers": spec["triggers"], "tags": tags, **flags}
    else:
        fmt = {"type": "tags_with_separator", "tags": tags, "separator": spec["separator"], **flags}
    if spec.get("answer") is not None:
        fmt = {"type": "or", "elements": [fmt, {"type": "json_schema", "json_schema": spec["answer"]}]}
    return {"type": "structural_tag", "format": fmt}


# --- the verdict ------------------------------------------------------------------------------------


def validate(spec: dict[str, Any], text: str, budget_s: float | None = None) -> Validation:
    """Each segment judged against its schema, and the text around them against the spec's rules (with an `or`
    answer and no segment: the whole text against the answer's schema)."""
    if spec.get("answer") is not None and _next_begin(spec, text, 0) is None:
        judged = schema_check.validate(spec["answer"], text, budget_s or schema_check.VERDICT_BUDGET_S)
        return Validation(valid=judged.valid, message=f"no segment; the answer: {judged.message}")
    segments: list[SegmentVerdict] = []
    problems: list[str] = []
    position, outside = 0, []
    while True:
        found = _next_begin(spec, text, position)
        if found is None:
            outside.append(text[position:])
            break
        at, structure = found
        outside.append(text[position:at])
        verdict, position = _segment(structure, text, at + len(structure["begin"]), budget_s)
        segments.append(verdict)
        if position < 0:  # a segment without its end: what follows is no longer readable
            outside.append("")
            break
    if spec["free_text"]:
        stray = next((t for t in spec["triggers"] for piece in outside if t in piece), None)
        if stray is not None:
            problems.append(f"the trigger {stray!r} starts no segment")
    else:
        gaps = outside[1:-1] if len(outside) > 2 else []
        if outside[0].strip() or outside[-1].strip() or any(g != spec["separator"] for g in gaps):
            problems.append("text outside the segments (only segments are allowed)")
    if spec["at_least_one"] and not segments:
        problems.append("no segment (at least one is required)")
    elif spec["at_least_one"] and spec["free_text"] and outside[0]:
        problems.append("text before the first segment (at_least_one puts a segment first)")
    if spec["stop_after_first"] and (len(segments) > 1 or (segments and outside[-1].strip())):
        problems.append("more after the first segment (stop_after_first)")
    return _verdict(segments, problems)


def _next_begin(spec: dict[str, Any], text: str, position: int) -> tuple[int, dict[str, Any]] | None:
    """The earliest segment begin at or after `position` (the longest begin where several start there)."""
    best: tuple[int, dict[str, Any]] | None = None
    for structure in spec["structures"]:
        at = text.find(structure["begin"], position)
        if at < 0:
            continue
        if best is None or at < best[0] or (at == best[0] and len(structure["begin"]) > len(best[1]["begin"])):
            best = (at, structure)
    return best


def _segment(structure: dict[str, Any], text: str, start: int, budget_s: float | None) -> tuple[SegmentVerdict, int]:
    """One segment's verdict and where the text after it starts (-1: the rest of the text is unreadable)."""
    try:
        _, stop = _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError):
        content = text[start:]
        why = schema_check.validate(structure["schema"], content).message if content.strip() else "no JSON"
        verdict = SegmentVerdict(
            begin=structure["begin"], start=start, end=len(text), content=content, valid=False, message=why
        )
        return verdict, -1
    content = text[start:stop]
    judged = schema_check.validate(structure["schema"], content, budget_s or schema_check.VERDICT_BUDGET_S)
    valid, message = judged.valid, judged.message
    closed = text.startswith(structure["end"], stop)
    if not closed:
        valid, message = False, f"{message}; the end marker {structure['end']!r} does not follow"
    verdict = SegmentVerdict(
        begin=structure["begin"], start=start, end=stop, content=content, valid=valid, message=message
    )
    return verdict, stop + len(structure["end"]) if closed else -1


def _verdict(segments: list[SegmentVerdict], problems: list[str]) -> Validation:
    bad = [i for i, s in enumerate(segments) if s.valid is False]
    unknown = [i for i, s in enumerate(segments) if s.valid is None]
    count = f"{len(segments)} segment{'s' if len(segments) != 1 else ''}"
    if bad:
        first = segments[bad[0]]
        message = f"{count}; segment {bad[0] + 1} is invalid: {first.message}"
        return Validation(valid=False, message="; ".join([message, *problems]), segments=segments)
    if problems:
        return Validation(valid=False, message=f"{count}; " + "; ".join(problems), segments=segments)
    if unknown:
        return Validation(
            valid=None, message=f"{count}; segment {unknown[0] + 1} could not be checked", segments=segments
        )
    return Validation(valid=True, message=f"{count}, each valid" if segments else "no segment", segments=segments)
