"""The Compare tab's engines view: the same turn once per engine, one column each, all text escaped."""

from __future__ import annotations

import re

from playground.providers.local import LocalProvider
from playground.providers.registry import Registry
from playground.ui.compare_engines import compare_engines
from playground.ui.state import ChatState, Form


def _form(registry: Registry, **kwargs) -> Form:
    return Form(model=registry.default_model, max_new_tokens=kwargs.pop("max_new_tokens", 8), **kwargs)


def _columns(html: str) -> list[str]:
    return re.split(r'(?=<div class="pg-side pg-engine-col")', html)[1:]


def test_each_engine_gets_a_column_with_text_verdict_figures_and_token_differences(engine) -> None:
    registry = Registry([LocalProvider([engine])])
    f = _form(registry, kind="choice", constraint_text="<b>yes</b>\n<i>no</i>")
    columns = _columns(compare_engines(registry, f, ChatState(), "Answer <b>yes</b> or no.", None))
    assert [re.search(r"<h4>(.*?)</h4>", c).group(1) for c in columns] == ["llguidance", "xgrammar", "outlines_core"]
    for column, name in zip(columns, ["llguidance", "xgrammar", "outlines_core"]):
        assert 'data-valid="valid"' in column
        assert f"<b>engine</b> {name}" in column
        assert re.search(r"<b>compile</b> [0-9.]+ ms", column) and "<b>tokens/s</b>" in column
        assert re.search(r"<b>mass kept</b> \d+%", column)
        assert re.search(r'<pre class="answer">&lt;(b|i)&gt;', column)  # the answer shown as text
        assert "<b>yes</b>" not in column and "<i>no</i>" not in column
    assert "reference for the token differences" in columns[0]
    assert all("same tokens as the first column" in c or "differs from token" in c for c in columns[1:])


def test_an_engine_that_refuses_is_a_column_with_its_reason_and_another_model_gets_one_too(engine) -> None:
    registry = Registry([LocalProvider([engine])])
    schema = '{"type": "array", "items": {"type": "integer"}, "uniqueItems": true, "maxItems": 2}'
    f = _form(registry, kind="json_schema", constraint_text=schema)
    columns = _columns(compare_engines(registry, f, ChatState(), "Two numbers as a JSON list.", "not-loaded"))
    assert len(columns) == 4
    assert 'role="alert"' in columns[0] and "uniqueItems" in columns[0]  # llguidance refuses the keyword
    assert "<b>engine</b> xgrammar" in columns[1]
    assert (
        "<h4>not-loaded (auto)</h4>" in columns[3] and "no provider serves model &#x27;not-loaded&#x27;" in columns[3]
    )


def test_without_a_constraint_it_says_what_to_pick(engine) -> None:
    registry = Registry([LocalProvider([engine])])
    html = compare_engines(registry, _form(registry, kind="none"), ChatState(), "hi", None)
    assert 'role="alert"' in html and "pick a constraint" in html
