"""The editor's memory per kind, without a browser."""

from __future__ import annotations

from playground.constraints.examples import PERSON_SCHEMA
from playground.ui import drafts


def test_a_kind_comes_back_with_the_users_text_and_only_an_unchanged_example_is_named() -> None:
    assert drafts.example_title("json_schema", PERSON_SCHEMA + "\n") == "Person"
    assert drafts.example_title("json_schema", '{"type": "string"}') is None
    saved = drafts.remember({}, "regex", "[a-z]+")
    assert drafts.remember(saved, "none", "") == saved
    assert drafts.text_for(saved, "regex") == ("[a-z]+", "")
    text, message = drafts.text_for(saved, "json_schema")
    assert text == PERSON_SCHEMA and message.startswith("Invent a person")
