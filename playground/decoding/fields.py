"""Confidence per JSON field: the tokens that wrote each value, rolled up by JSON path.

For each leaf value: the model's own probability of it (min and product over its tokens, before the
constraint), the least share of probability mass the constraint kept, whether the constraint overrode
the model's first choice inside it, and how many of its tokens the constraint forced.
"""

from __future__ import annotations

import json
import math
from typing import Any

from playground.constraints.jsonstate import Path, path_text
from playground.types import FieldConfidence, GeneratedToken

_WS = " \t\r\n"


def value_spans(text: str) -> list[tuple[Path, int, int, Any]]:
    """(path, start, end, value) of every leaf value, in order; stops quietly where the JSON breaks."""
    spans: list[tuple[Path, int, int, Any]] = []
    try:
        _parse(text, 0, (), spans)
    except (ValueError, IndexError, RecursionError):
        pass
    return spans


def _ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _parse(text: str, i: int, path: Path, spans: list) -> int:
    i = _ws(text, i)
    if text[i] == "{":
        return _parse_object(text, i + 1, path, spans)
    if text[i] == "[":
        return _parse_array(text, i + 1, path, spans)
    value, end = json.JSONDecoder().raw_decode(text, i)
    spans.append((path, i, end, value))
    return end


def _parse_object(text: str, i: int, path: Path, spans: list) -> int:
    i = _ws(text, i)
    if text[i] == "}":
        return i + 1
    while True:
        key, i = json.decoder.scanstring(text, _ws(text, i) + 1)
        i = _ws(text, i)
        if text[i] != ":":
            raise ValueError("expected ':'")
        i = _ws(text, _parse(text, i + 1, (*path, key), spans))
        if text[i] == "}":
            return i + 1
        if text[i] != ",":
            raise ValueError("expected ',' or '}'")
        i += 1


def _parse_array(text: str, i: int, path: Path, spans: list) -> int:
    i = _ws(text, i)
    if text[i] == "]":
        return i + 1
    index = 0
    while True:
        i = _ws(text, _parse(text, i, (*path, index), spans))
        if text[i] == "]":
            return i + 1
        if text[i] != ",":
            raise ValueError("expected ',' or ']'")
        i, index = i + 1, index + 1


def field_confidence(text: str, tokens: list[GeneratedToken], start: int = 0) -> list[FieldConfidence]:
    """Roll `tokens` (whose texts add up to text[start:]) up by the JSON path of the value they wrote."""
    offsets, at = [], start
    for token in tokens:
        piece = "" if token.special else token.text
        offsets.append((at, at + len(piece)))
        at += len(piece)
    fields = []
    for path, begin, end, value in value_spans(text):
        inside = [t for t, (a, b) in zip(tokens, offsets) if a < end and b > begin and b > a]
        if not inside:
            continue
        raw = [t.raw_logprob if t.raw_logprob is not None else (t.logprob or 0.0) for t in inside]
        kept = [t.mass_kept for t in inside if t.mass_kept is not None]
        fields.append(
            FieldConfidence(
                path=path_text(path),
                value=value,
                tokens=len(inside),
                prob_min=math.exp(min(raw)),
                prob_product=math.exp(sum(raw)),
                mass_kept_min=min(kept) if kept else None,
                overridden=any(t.overridden for t in inside),
                forced=sum(1 for t in inside if t.forced),
            )
        )
    return fields
