"""Pydantic's validation errors -> one line that names each field, for every surface that validates; a message's
field names as a route's client sent them."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from playground.errors import ParameterError


def renamed(text: str, names: Mapping[str, str | None]) -> str:
    """`text` with each field name of the engine's (one with an underscore: never a word of prose; never a quoted
    value, which is the user's) as the route's client sent it."""
    for engine_name, sent in names.items():
        if sent and "_" in engine_name:
            text = re.sub(rf"(?<![\w.'\"]){re.escape(engine_name)}(?![\w'\"])", sent, text)
    return text


_TYPE_NAMES = frozenset({"str", "int", "float", "bool", "list", "dict", "none", "bytes"})


def _union_member(item: Any) -> bool:
    """Whether a loc entry names the union member pydantic tried (`constrained-str`, `dict[str,any]`, `str`, a model
    class such as `NamedToolChoice`), not a field: the client never wrote it."""
    if not isinstance(item, str):
        return False
    return item in _TYPE_NAMES or "[" in item or "-" in item or (item[:1].isupper() and item.isidentifier())


def field_name(loc: Sequence[Any]) -> str:
    """`("body", "parameters", "top_p")` -> `parameters.top_p`; list indices become `[i]`."""
    parts: list[str] = []
    for item in loc:
        if item == "body" and not parts:
            continue
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif parts:
            parts.append(f".{item}")
        else:
            parts.append(str(item))
    return "".join(parts)


def error_field(error: dict[str, Any]) -> str:
    """The field a pydantic error is about, as the client wrote it: without the union member pydantic tried
    (`("stop", "constrained-str")` -> `stop`); none for a body that is not JSON (its loc is a character offset)."""
    if error.get("type") == "json_invalid":
        return ""
    return field_name([item for item in error.get("loc", ()) if not _union_member(item)])


def describe(
    error: dict[str, Any], *, unknown_hint: str = "not a parameter of this endpoint", whole: str = "request body"
) -> str:
    """A pydantic error as `field: message`, with pydantic's wording made plainer.

    `unknown_hint` follows "unknown field" (a config file lists the allowed ones, where a typo is likely);
    `whole` names the document when the error is about all of it.
    """
    field = error_field(error)
    kind = error.get("type", "")
    message = str(error.get("msg", "invalid value"))
    if kind == "extra_forbidden":
        message = f"unknown field ({unknown_hint})" if unknown_hint else "unknown field"
    elif kind == "json_invalid":
        detail = (error.get("ctx") or {}).get("error", "")
        where = error.get("loc", ())[-1:]  # FastAPI puts the character's offset last: json's message ends before it
        if detail and where and isinstance(where[0], int):
            detail = f"{detail.removesuffix(' at')} at character {where[0]}"
        message = f"request body is not valid JSON ({detail})" if detail else "request body is not valid JSON"
    elif kind == "missing":
        message = "field required"
    message = message.removeprefix("Value error, ")
    if not field and kind != "json_invalid":
        field = whole
    return f"{field}: {message}" if field else message


def validation_message(
    errors: Sequence[dict[str, Any]], *, prefix: Sequence[Any] = (), whole: str = "request body"
) -> str:
    """All validation errors in one line, each naming its field (under `prefix`, the caller's own name)."""
    described = (describe({**e, "loc": (*prefix, *e.get("loc", ()))}, whole=whole) for e in errors)
    return "; ".join(described) or "invalid request"


def parameter_error(exc: ValidationError, *, prefix: Sequence[Any] = ()) -> ParameterError:
    """A ParameterError for a validation failure, its fields in name order (not the model's declaration order,
    which inheritance shuffles); `field` is the first named."""
    errors = sorted(exc.errors(), key=lambda error: [str(part) for part in error["loc"]])
    first = error_field({**errors[0], "loc": (*prefix, *errors[0]["loc"])}) if errors else ""
    return ParameterError(validation_message(errors, prefix=prefix), field=first or None)
