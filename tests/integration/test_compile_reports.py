"""Each request reports its own fallbacks and warnings, and whether its compile came from the cache."""

from __future__ import annotations

from playground.constraints import Constraint
from playground.constraints.compiler import LENIENT_NOTE
from playground.types import ChatMessage, GenerateParameters


def ask(text: str) -> list[ChatMessage]:
    return [ChatMessage(role="user", content=text)]


def _params(schema: dict, engine: str) -> GenerateParameters:
    return GenerateParameters(max_new_tokens=1, grammar={"type": "json", "value": schema}, constraint_engine=engine)


def _llguidance_refuses(key: str) -> dict:
    """llguidance refuses to intersect these patterns, lenient or not (xgrammar takes them): `auto` falls back to
    xgrammar."""
    return {
        "type": "string",
        "allOf": [{"pattern": "^((.){10,10}){10,10}$"}, {"pattern": "(t|8){10,10}..$"}],
        "title": key,
    }


def test_auto_reads_a_keyword_llguidance_does_not_implement_leniently_and_says_so(engine):
    """`not` is beyond llguidance: `auto` takes its lenient reading (the rest of the schema enforced, before an engine
    that drops what it cannot enforce without a word: xgrammar wrote an object here), names the keyword, and the
    verdict still judges by it."""
    schema = {"allOf": [{"enum": [1.1]}, {"not": {"type": "string"}}]}  # a MaskBench schema
    params = _params(schema, "auto").model_copy(update={"max_new_tokens": 8})
    auto = engine.generate(ask("A number, as JSON."), params)
    assert auto.constraint_engine == "llguidance" and auto.generated_text == "1.1" and auto.best.validation.valid
    assert any("(lenient)" in w and '"not"' in w for w in auto.warnings), auto.warnings
    assert LENIENT_NOTE in auto.warnings and not any("fell back" in w for w in auto.warnings)
    either = Constraint.json_schema({"allOf": [{"enum": [1.1, "x"]}, {"not": {"type": "string"}}]})
    compiled = engine.compiler.compile(either, "auto")
    assert compiled.engine == "llguidance" and compiled.constraint == either  # the verdict's, `not` and all
    assert compiled.constraint.validate('"x"').valid is False
    strict = Constraint.json_schema({"type": "integer", "not": {"const": 3}, "x-guidance": {"lenient": False}})
    assert engine.compiler.compile(strict, "auto").engine == "xgrammar"  # a schema's own `lenient` stands
    phone = engine.compiler.compile(Constraint.json_schema({"type": "string", "format": "phone-number"}), "auto")
    assert phone.engine == "llguidance" and "Unknown format: phone-number" in phone.warnings  # a free string, named
    # refused leniently too (patterns it cannot intersect): xgrammar, and the report says both reasons
    both = Constraint.json_schema({**_llguidance_refuses("both"), "not": {"const": "x"}})
    fell_back = engine.compiler.compile(both, "auto")
    assert fell_back.engine == "xgrammar" and 'Unimplemented keys: ["not"]' in fell_back.warnings[0]
    assert "read leniently, llguidance refused the json_schema: Unable to determine" in fell_back.warnings[0]


def test_explicit_engine_after_auto_fallback_reports_no_fallback(engine):
    schema = _llguidance_refuses("after_auto")
    auto = engine.generate(ask("hi"), _params(schema, "auto"))
    assert auto.constraint_engine == "xgrammar"
    assert "fell back to xgrammar" in auto.warnings[0]
    explicit = engine.generate(ask("hi"), _params(schema, "xgrammar"))
    assert explicit.constraint_engine == "xgrammar"
    assert not any("fell back" in w for w in explicit.warnings), explicit.warnings


def test_auto_after_explicit_engine_still_reports_its_fallback(engine):
    schema = _llguidance_refuses("before_auto")
    explicit = engine.generate(ask("hi"), _params(schema, "xgrammar"))
    assert not any("fell back" in w for w in explicit.warnings)
    for _ in range(2):  # the second auto finds both outcomes cached and still reports the fallback
        auto = engine.generate(ask("hi"), _params(schema, "auto"))
        assert auto.constraint_engine == "xgrammar"
        assert "llguidance refused" in auto.warnings[0] and "fell back to xgrammar" in auto.warnings[0]


def test_results_say_when_the_compile_came_from_the_cache(engine):
    params = GenerateParameters(max_new_tokens=1, grammar={"type": "regex", "value": "(cached|flag)[0-9]"})
    first = engine.generate(ask("hi"), params)
    second = engine.generate(ask("hi"), params)
    assert (first.timings.compile_cached, second.timings.compile_cached) == (False, True)
    assert engine.generate(ask("hi"), GenerateParameters(max_new_tokens=1)).timings.compile_cached is False


def test_constraint_processors_by_name_compile_with_the_engines_compiler(engine):
    """So they get the engine's limits (--compile-timeout, --compile-memory) and share its cache."""
    pattern = "(by|name)[0-9]{2}"
    params = GenerateParameters(max_new_tokens=1, logits_processors=[{"name": "regex", "params": [pattern]}])
    engine.generate(ask("hi"), params)
    assert engine.compiler.compile(Constraint.regex(pattern)).cached
