"""Constraint parsing, live checks and verdicts, without a model."""

from __future__ import annotations

import threading

import pytest

from playground.constraints import Constraint, check_constraint
from playground.errors import ConstraintError, InvalidConstraintError
from tests.support import INVALID_CONSTRAINTS, table_rows

# Beyond what every parse refuses: regex features the engines do not support.
UNSUPPORTED_REGEX = [("regex", "(?=a)a", "look-around"), ("regex", r"(a)\1", "backreferences")]


@pytest.mark.parametrize(("kind", "text", "words"), table_rows(INVALID_CONSTRAINTS) + UNSUPPORTED_REGEX)
def test_live_check_names_the_problem(kind, text, words):
    message = check_constraint(kind, text)
    assert message is not None and words in message


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("json_schema", '{"type": "object"}'),
        ("regex", "[0-9]{3}"),
        ("choice", "yes\nno"),
        ("choice", '["a", "b"]'),
        ("grammar", 'start: "a" | "b"'),
        ("none", ""),
    ],
)
def test_live_check_accepts_usable_constraints(kind, text):
    assert check_constraint(kind, text) is None


def test_verdicts():
    schema = Constraint.json_schema({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    assert schema.validate('{"n": 1}').valid is True
    assert "schema violation at n" in schema.validate('{"n": "x"}').message
    assert schema.validate("{").valid is False
    assert Constraint.regex("[0-9]+").validate("12a").valid is False
    assert Constraint.choice(["a", "b"]).validate("b").valid is True
    assert Constraint.grammar('start: "x" "y"').validate("xy").valid is True
    assert Constraint.grammar('start: "x" "y"').validate("yx").valid is False
    assert Constraint.none().validate("anything").valid is None


def test_multiple_of_divides_the_decimals_written_not_binary_floats():
    prices = Constraint.json_schema({"type": "number", "multipleOf": 0.01})
    assert [prices.validate(t).valid for t in ("19.99", "4.35", "0.07", "20", "1e308")] == [True] * 5
    assert "19.995 is not a multiple of 0.01" in prices.validate("19.995").message
    assert Constraint.json_schema({"multipleOf": 0.1}).validate("0.3").valid is True
    assert Constraint.json_schema({"type": "integer", "multipleOf": 3}).validate("10").valid is False
    draft3 = {"$schema": "http://json-schema.org/draft-03/schema#", "divisibleBy": 0.01}
    assert [Constraint.json_schema(draft3).validate(t).valid for t in ("19.99", "19.995")] == [True, False]


def test_a_key_named_twice_is_not_judged_by_its_last_value_alone():
    schema = Constraint.json_schema({"type": "object", "additionalProperties": {"type": "integer"}})
    verdict = schema.validate('{"ab": "x", "ab": 2}')  # json.loads keeps 2: "x" would pass unseen
    assert verdict.valid is False and "the key 'ab' appears twice" in verdict.message
    assert schema.validate('{"a": {"b": 1, "b": 1}}').valid is False
    assert schema.validate('{"ab": 1, "cd": 2}').valid is True


def test_nan_and_infinity_are_not_json_though_python_reads_them():
    anything = Constraint.json_schema({})
    for text in ("NaN", "Infinity", "-Infinity", "[1, NaN]", '{"x": -Infinity}'):
        verdict = anything.validate(text)
        assert verdict.valid is False and verdict.message.startswith("not JSON: "), text
    assert "NaN is not a JSON value" in anything.validate("[NaN]").message
    assert anything.validate('["NaN", 1e308]').valid is True
    cut = anything.validate('{"a": "b')
    assert cut.message == "not JSON: Unterminated string starting at (line 1, column 7)"
    with pytest.raises(
        InvalidConstraintError, match=r"JSON schema: Unterminated string starting at \(line 1, column 7\)"
    ):
        Constraint.parse("json_schema", '{"a": "b')


@pytest.mark.parametrize(
    ("fmt", "good", "bad"),
    [
        ("date-time", "2024-02-28T10:00:00Z", "2024-02-31T10:00:00Z"),
        ("time", "10:00:00Z", "99:99:99Z"),
        ("uri", "https://example.org/a", "not a uri"),
        ("hostname", "example.com", "-bad-.host"),
        ("duration", "P1D", "1D"),
    ],
)
def test_formats_are_checked_by_the_verdict(fmt, good, bad):
    # jsonschema checks these only when their optional packages are installed (requirements.txt)
    schema = Constraint.json_schema({"type": "string", "format": fmt})
    assert schema.validate(f'"{good}"').valid is True
    verdict = schema.validate(f'"{bad}"')
    assert verdict.valid is False and f"is not a '{fmt}'" in verdict.message


def test_draft4_pattern_properties_are_read_like_the_later_drafts():
    draft4 = "http://json-schema.org/draft-04/schema#"
    words = {"$schema": draft4, "type": "object", "patternProperties": {"^[a-w]{2}$": {"type": "string"}}}
    schema = Constraint.json_schema(words)
    assert schema.validate('{"en": "Hello"}').valid is True  # not "could not check": the regex was read at parse
    assert schema.validate('{"en": 1}').valid is False
    nested = {"$schema": draft4, "properties": {"x": {"patternProperties": {"(?=x)[a-z]+": {}}}}}
    with pytest.raises(InvalidConstraintError, match=r"at properties/x/patternProperties: .*look-around"):
        Constraint.json_schema(nested)


def test_a_schema_nested_past_the_recursion_limit_on_a_worker_thread_is_a_clear_error():
    # /inspect reads the schema on a worker thread, where the limit is hit inside rpds (a Rust panic, not an Exception)
    schema: dict = {"type": "string"}
    for _ in range(120):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    caught: list[BaseException] = []

    def read() -> None:
        try:
            Constraint.json_schema(schema)
        except BaseException as exc:  # noqa: BLE001 - what escapes is the point
            caught.append(exc)

    worker = threading.Thread(target=read)
    worker.start()
    worker.join()
    assert isinstance(caught[0], InvalidConstraintError) and "nested too deeply" in str(caught[0])


def test_choices_become_an_escaped_alternation():
    assert Constraint.choice(["a.b", "c|d", "a.b"]).engine_input() == r"(a\.b|c\|d)"


def test_pydantic_model_and_schema_text_are_the_same_constraint():
    from pydantic import BaseModel

    class Point(BaseModel):
        x: int

    assert Constraint.json_schema(Point) == Constraint.json_schema(Point.model_json_schema())
    with pytest.raises(InvalidConstraintError, match="must be an object"):
        Constraint.json_schema("[1, 2]")


def test_deeply_nested_schemas_and_bad_unicode_are_clear_errors():
    deep = '{"type":"object","properties":{"a":' * 400 + '{"type":"string"}' + "}}" * 400
    message = check_constraint("json_schema", deep)
    assert message is not None and "nested too deeply" in message
    assert "invalid Unicode" in check_constraint("regex", "a\ud800")


def test_chat_text_parts_must_hold_strings():
    from pydantic import ValidationError

    from playground.types import ChatMessage

    with pytest.raises(ValidationError, match="needs a string `text`, got int"):
        ChatMessage(role="user", content=[{"type": "text", "text": 5}])
    with pytest.raises(ValidationError, match="needs a string `text`, got none"):  # it was taken as ""
        ChatMessage(role="user", content=[{"type": "text"}])
    assert (
        ChatMessage(role="user", content=[{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]).text() == "ab"
    )


def test_an_assistants_refusal_part_reads_as_its_text_as_vllm_reads_it():
    """A replayed OpenAI conversation holds them; they were "only text content parts are supported"."""
    from pydantic import ValidationError

    from playground.types import ChatMessage
    from playground.wire import responses

    said = ChatMessage(
        role="assistant", content=[{"type": "refusal", "refusal": "I can't."}, {"type": "text", "text": "!"}]
    )
    assert said.text() == "I can't.!"
    with pytest.raises(ValidationError, match="a refusal content part is an assistant's, not a user message's"):
        ChatMessage(role="user", content=[{"type": "refusal", "refusal": "no"}])
    with pytest.raises(ValidationError, match="needs a string `refusal`, got none"):
        ChatMessage(role="assistant", content=[{"type": "refusal", "text": "no"}])
    replayed = {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]}
    request = responses.ResponsesRequest.model_validate({"input": [{"role": "user", "content": "hi"}, replayed]})
    assert responses.chat_request(request).messages[1].text() == "I can't."
    from playground.errors import ParameterError

    mine = {"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}
    with pytest.raises(ParameterError, match=r"input\[0\].content\[0\]: text parts only"):
        responses.chat_request(responses.ResponsesRequest.model_validate({"input": [mine]}))


def test_a_refusal_found_in_the_compile_cache_reads_as_the_first_one(monkeypatch):
    """The inspect panel compiles what the user types: a send after it must not speak of an earlier request."""
    from playground.constraints import compiler
    from playground.errors import UnsatisfiableConstraintError

    refused = compiler._Outcome(error=UnsatisfiableConstraintError("no value satisfies the schema"))
    cache = compiler.ConstraintCompiler(tokenizer=None)
    monkeypatch.setattr(cache, "_compile_one", lambda constraint, engine, background: refused)
    schema = Constraint.parse("json_schema", '{"type": "integer", "minimum": 5, "maximum": 1}')
    messages = []
    for _ in range(2):
        with pytest.raises(UnsatisfiableConstraintError) as caught:
            cache.compile(schema, "llguidance")
        messages.append(caught.value.message)
    assert messages == ["no value satisfies the schema"] * 2


def test_under_auto_an_engine_s_failure_names_the_refusals_before_it_too(monkeypatch):
    """A 100,000-value enum: llguidance refuses it (its lexer's limit), xgrammar then times out; the 422 named only
    xgrammar's timeout, while llguidance by name answers at once with the real cause."""
    from playground.constraints import compiler
    from playground.errors import CompileTimeoutError, UnsupportedConstraintError

    outcomes = {
        "llguidance": compiler._Outcome(error=UnsupportedConstraintError("llguidance refused: lexer too big")),
        "xgrammar": compiler._Outcome(error=CompileTimeoutError("xgrammar took longer than 10 s")),
    }
    cache = compiler.ConstraintCompiler(tokenizer=None)
    monkeypatch.setattr(cache, "_compile_one", lambda constraint, engine, background: outcomes[engine])
    with pytest.raises(CompileTimeoutError) as caught:
        cache.compile(Constraint.json_schema({"enum": ["a", "b"]}))
    assert caught.value.message == "xgrammar took longer than 10 s; before it, llguidance refused: lexer too big"
    with pytest.raises(CompileTimeoutError) as alone:
        cache.compile(Constraint.json_schema({"enum": ["a", "b"]}), "xgrammar")
    assert alone.value.message == "xgrammar took longer than 10 s"


@pytest.mark.parametrize(
    ("text", "dialect"),
    [
        ('start: "a"', "lark"),
        ('?start: "a" | "b"', "lark"),
        ('  ?start : "a"', "lark"),
        ('root ::= "a"', "gbnf"),
        ('root ::= start\nstart ::= "a"', "gbnf"),  # a GBNF rule named start (llguidance's test says Lark)
    ],
)
def test_lark_is_told_from_gbnf_with_an_inlined_start_too(text: str, dialect: str) -> None:
    assert Constraint.parse("grammar", text).grammar_dialect == dialect


def test_an_engine_refusal_reads_without_the_engine_log_line_prefix() -> None:
    import xgrammar

    from playground.constraints.backends.base import EngineRefusal, refusing

    with pytest.raises(EngineRefusal) as caught:
        refusing("xgrammar", "grammar", lambda: xgrammar.Grammar.from_ebnf("root ::= foo"))
    assert caught.value.message.startswith(
        'xgrammar refused the grammar: EBNF parser error at line 1, column 10: Rule "foo"'
    )


def test_a_lark_mistake_under_an_inlined_start_is_named_as_lark() -> None:
    message = check_constraint("grammar", '?start: foo\nfoo: "a" | missing\n')
    assert message is not None and 'unknown name: "missing"' in message and "not GBNF" not in message


@pytest.mark.parametrize(
    ("refusal", "engine", "outcome"),
    [
        ("unsupported", "auto", "second"),  # an engine's limit: auto goes on to the next
        ("unsupported", "first", "UnsupportedConstraintError"),  # the engine named: its refusal
        ("unsatisfiable", "auto", "UnsatisfiableConstraintError"),  # nothing matches: no engine would do better
    ],
)
def test_an_engine_that_refuses_while_building_its_template_is_a_refusal_not_a_failure(
    monkeypatch, refusal: str, engine: str, outcome: str
) -> None:
    """llguidance's first masks run as its template is built (after the worker's compile): a matcher stopped there is
    the engine's refusal, which `auto` falls back from as from a compile's (it was an exception out of the compile)."""
    from types import SimpleNamespace

    from playground.constraints import backends, compiler
    from playground.constraints.backends.base import EngineRefusal

    def rebuild(*_: object) -> object:
        raise EngineRefusal(refusal, "first stopped the constraint before the first token: a limit")

    fakes = {
        "first": SimpleNamespace(refusal=lambda *_: None, rebuild_template=rebuild),
        "second": SimpleNamespace(refusal=lambda *_: None, rebuild_template=lambda *_: "second's template"),
    }
    monkeypatch.setattr(backends, "get", fakes.__getitem__)
    monkeypatch.setattr(backends, "auto_order", lambda kind: ("first", "second"))
    monkeypatch.setattr(compiler._backends, "get", lambda engine, tokenizer: None)
    cache = compiler.ConstraintCompiler(tokenizer=None)
    monkeypatch.setattr(cache, "pool", lambda background=False: SimpleNamespace(compile=lambda *_: (None, [])))
    regex = Constraint.parse("regex", "b{1000000}")
    if outcome == "second":
        compiled = cache.compile(regex, engine)
        assert (compiled.engine, compiled.template) == ("second", "second's template")
        assert compiled.warnings[0].startswith("first stopped the constraint before the first token: a limit")
        return
    with pytest.raises(ConstraintError) as caught:
        cache.compile(regex, engine)
    assert type(caught.value).__name__ == outcome and caught.value.message.startswith("first stopped")


def test_a_grammar_with_single_quoted_literals_gets_the_hint_on_every_route():
    """The UI's editor gave the hint; the API said only "1(8): lexer error"."""
    with pytest.raises(InvalidConstraintError) as caught:
        Constraint.grammar("start: 'yes' | 'no'")
    assert caught.value.message.endswith("hint: Lark literals take double quotes: write \"yes\", not 'yes'")
    with pytest.raises(InvalidConstraintError) as plain:
        Constraint.grammar('start: "yes" missing_rule')
    assert "hint" not in plain.value.message


def test_a_lark_error_at_a_line_and_column_quotes_that_line_and_what_stands_there():
    """It said "1(19): lexer error" alone; blank lines are not counted, as the engines read the grammar."""
    with pytest.raises(InvalidConstraintError) as caught:
        Constraint.grammar('start: "yes | "no"')
    assert caught.value.message.endswith('(line 1: `start: "yes | "no"`; there: the end of the line, column 19)')
    with pytest.raises(InvalidConstraintError) as caught:
        Constraint.grammar('start: x\n\n   \nx: "a" | ]b')
    assert caught.value.message.endswith('(line 2: `x: "a" | ]b`; there: `]b` at column 10)')


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        (r"\bword\b", "at position 0: word boundaries (\\b, \\B) are not supported"),
        (r"ab\Bx", "at position 2: word boundaries"),
        (r"(?P<n>a)(?P=n)", "at position 8: backreferences are not supported (named ones, (?P=name), too)"),
    ],
)
def test_regex_refusals_name_what_is_not_supported_where(pattern: str, message: str):
    """`\\b` read "at 1(8): ... lookarounds not supported yet; WordUnicode", `(?P=n)` "unrecognized flag"."""
    from playground.errors import UnsupportedConstraintError

    with pytest.raises(UnsupportedConstraintError) as caught:
        Constraint.regex(pattern)
    assert caught.value.message.startswith(f"invalid regex {message}")


@pytest.mark.parametrize(("schema", "got"), [(None, "null"), ([1], "an array"), ('"x"', "a string"), (3, "a number")])
def test_a_schema_that_is_no_object_is_named_in_json_s_words(schema: object, got: str) -> None:
    """It said "got NoneType" (Python's name) for a schema sent as null."""
    with pytest.raises(
        InvalidConstraintError, match=rf"^a JSON schema must be an object \(or true or false\), got {got}$"
    ):
        Constraint.json_schema(schema)
