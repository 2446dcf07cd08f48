"""The processor registry, its errors, the built-ins' masks (checked against brute force), and plugin loading."""

from __future__ import annotations

import importlib.metadata
import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from playground import processors
from playground.errors import ConstraintError, ProcessorError
from playground.processors import PluginLoadError
from playground.types import ProcessorSpec

torch.set_num_threads(1)
PLUGINS = Path(__file__).resolve().parent.parent / "plugins"
BUILTINS = {"ban_strings", "max_whitespace", "json_schema", "regex", "choice", "grammar"}
WS_RUN = re.compile(r"\s+")


@pytest.fixture(scope="module")
def tokenizer(loaded_model):
    return loaded_model.tokenizer


@pytest.fixture(scope="module")
def vocab(tokenizer) -> int:
    return len(tokenizer)


@pytest.fixture
def plugin_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """tests/plugins on sys.path, as if the example plugin were installed, and not yet imported."""
    monkeypatch.syspath_prepend(str(PLUGINS))
    _forget_plugin()
    yield
    _forget_plugin()


def _forget_plugin() -> None:
    for module in [
        m for m in sys.modules if m.split(".")[0] in ("sp_example_plugin", "sp_callable_plugin", "sp_broken")
    ]:
        del sys.modules[module]
    for name in ("no_digits", "no_vowels"):
        if name in {info.name for info in processors.list_factories()}:
            processors.unregister_factory(name)


def _identity(params: list[str], tokenizer) -> object:
    return lambda input_ids, scores: scores


# --- registry ---------------------------------------------------------------------------------


def test_builtins_are_registered_with_descriptions() -> None:
    infos = {info.name: info for info in processors.list_factories()}
    assert BUILTINS <= set(infos)
    for name in BUILTINS:
        assert infos[name].builtin is True
        assert "params" in infos[name].description


def test_register_get_and_list(registered: list[str]) -> None:
    registered.append("test_identity")
    processors.register_factory("test_identity", _identity, description="does nothing")
    assert processors.get_factory("test_identity") is _identity
    info = next(i for i in processors.list_factories() if i.name == "test_identity")
    assert (info.description, info.builtin) == ("does nothing", False)
    names = [i.name for i in processors.list_factories()]
    assert names == sorted(names)


def test_same_factory_twice_is_a_no_op_and_another_needs_replace(registered: list[str]) -> None:
    registered.append("test_dup")
    processors.register_factory("test_dup", _identity)
    processors.register_factory("test_dup", _identity)
    other = lambda params, tokenizer: _identity(params, tokenizer)  # noqa: E731
    with pytest.raises(ProcessorError, match=r"'test_dup' is already registered; pass replace=True"):
        processors.register_factory("test_dup", other)
    processors.register_factory("test_dup", other, replace=True)
    assert processors.get_factory("test_dup") is other


@pytest.mark.parametrize("name", ["", "has space", "1starts_with_digit", None])
def test_bad_names_are_refused(name) -> None:
    with pytest.raises(ProcessorError, match="invalid processor name"):
        processors.register_factory(name, _identity)


def test_factory_must_be_callable() -> None:
    with pytest.raises(ProcessorError, match="'test_nc' is not callable"):
        processors.register_factory("test_nc", "not a function")


def test_unknown_name_lists_the_registered_ones(tokenizer) -> None:
    with pytest.raises(ProcessorError) as caught:
        processors.build_processors([ProcessorSpec(name="no_such_thing")], tokenizer)
    message = caught.value.message
    assert "unknown logits processor 'no_such_thing'" in message
    assert all(name in message for name in BUILTINS)
    assert caught.value.status == 422 and caught.value.field == "logits_processors"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"name": "ban_strings"}, "'ban_strings': ban_strings needs at least one string to ban"),
        ({"name": "ban_strings", "params": ["ok", ""]}, "cannot ban an empty string"),
        ({"name": "max_whitespace"}, "takes one parameter, the longest whitespace run allowed; got 0"),
        ({"name": "max_whitespace", "params": ["two"]}, "needs a whole number, got 'two'"),
        ({"name": "max_whitespace", "params": ["-1"]}, "needs a number from 0 to 1000000, got -1"),
        ({"name": "max_whitespace", "params": ["9" * 26]}, f"needs a number from 0 to 1000000, got {'9' * 26}"),
        ({"name": "regex", "params": ["a", "b"]}, "'regex': regex takes one parameter, the pattern; got 2"),
    ],
)
def test_bad_params_give_the_factorys_message(tokenizer, spec: dict, message: str) -> None:
    with pytest.raises(ProcessorError, match=re.escape(message)) as caught:
        processors.build_processors([spec], tokenizer)
    assert caught.value.status == 422


def test_a_malformed_spec_is_a_processor_error(tokenizer) -> None:
    with pytest.raises(
        ProcessorError, match=r"needs \{name, params: \[str\]\}: params: Input should be a valid list$"
    ) as caught:
        processors.build_processors([{"name": "ban_strings", "params": "banana"}], tokenizer)
    assert caught.value.field == "logits_processors"


def test_a_factory_that_crashes_is_a_processor_error(tokenizer, registered: list[str]) -> None:
    def crash(params: list[str], tokenizer) -> None:
        raise RuntimeError("disk on fire")

    registered.append("test_crash")
    processors.register_factory("test_crash", crash)
    with pytest.raises(ProcessorError, match="'test_crash' could not be built: RuntimeError: disk on fire"):
        processors.build_processors([{"name": "test_crash"}], tokenizer)


def test_constraint_factories_keep_their_constraint_errors(tokenizer) -> None:
    with pytest.raises(ConstraintError, match="non-empty list"):
        processors.build_processors([{"name": "choice", "params": []}], tokenizer)
    with pytest.raises(ConstraintError, match="invalid JSON in JSON schema"):
        processors.build_processors([{"name": "json_schema", "params": ["{nope"]}], tokenizer)


def test_regex_factory_allows_only_matching_tokens(tokenizer, vocab: int) -> None:
    (proc,) = processors.build_processors([{"name": "regex", "params": ["[0-9]{3}"]}], tokenizer)
    prompt = torch.tensor([tokenizer.encode("Three digits:")])
    out = proc(prompt, torch.zeros(1, vocab))
    allowed = torch.isfinite(out[0]).nonzero().flatten().tolist()
    assert allowed and all(re.fullmatch(r"[0-9]{1,3}", tokenizer.decode([i])) for i in allowed)


def test_build_keeps_order_and_makes_fresh_instances(tokenizer) -> None:
    specs = [{"name": "max_whitespace", "params": ["1"]}, ProcessorSpec(name="ban_strings", params=["x"])]
    first = processors.build_processors(specs, tokenizer)
    second = processors.build_processors(specs, tokenizer)
    assert [p.name for p in first] == ["max_whitespace", "ban_strings"]
    assert first[0].processor is not second[0].processor


# --- run-time failures --------------------------------------------------------------------------


def test_named_processor_turns_exceptions_into_processor_errors() -> None:
    def boom(input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        raise KeyError("state lost")

    wrapped = processors.NamedProcessor("flaky", boom)
    with pytest.raises(ProcessorError, match=r"processor 'flaky' failed: KeyError: 'state lost'"):
        wrapped(torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, 10))


def test_named_processor_refuses_a_wrong_return_value() -> None:
    wrapped = processors.NamedProcessor("lazy", lambda input_ids, scores: None)
    with pytest.raises(
        ProcessorError, match=r"'lazy' failed: it returned NoneType instead of scores of shape \(1, 10\)"
    ):
        wrapped(torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, 10))
    halved = processors.NamedProcessor("half", lambda input_ids, scores: scores / 2)
    assert torch.equal(halved(torch.zeros(1, 3, dtype=torch.long), torch.full((1, 10), 4.0)), torch.full((1, 10), 2.0))


# --- ban_strings --------------------------------------------------------------------------------


def _masked(row: torch.Tensor) -> set[int]:
    """The token ids a one-row scores tensor masks."""
    assert row.shape[0] == 1
    return set(torch.isinf(row[0]).nonzero().flatten().tolist())


def _expected_bans(tokenizer, generated: list[int], banned: list[str], vocab: int) -> set[int]:
    """Brute force: every token whose decoded addition makes a banned string appear."""
    texts = tokenizer.batch_decode([generated + [i] for i in range(vocab)], skip_special_tokens=True)
    return {i for i, text in enumerate(texts) if any(b in text for b in banned)}


@pytest.mark.parametrize(
    "generated_text",
    ["", " I love ban", " I said bana", " cat do", "Hello, b"],
)
def test_ban_strings_masks_exactly_the_completing_tokens(tokenizer, vocab: int, generated_text: str) -> None:
    banned = ["banana", "cat dog", "!?"]
    (proc,) = processors.build_processors([{"name": "ban_strings", "params": banned}], tokenizer)
    prompt = tokenizer.encode("Say banana:")
    generated = tokenizer.encode(generated_text) if generated_text else []
    proc(torch.tensor([prompt]), torch.zeros(1, vocab))  # the first call marks where the prompt ends
    for step in range(1, len(generated) + 1):  # feed the generated tokens one step at a time
        out = proc(torch.tensor([prompt + generated[:step]]), torch.zeros(1, vocab))
    if not generated:
        out = proc(torch.tensor([prompt]), torch.zeros(1, vocab))
    assert _masked(out) == _expected_bans(tokenizer, generated, banned, vocab)


def test_ban_strings_masks_across_tokens_per_row(tokenizer, vocab: int) -> None:
    (proc,) = processors.build_processors([{"name": "ban_strings", "params": ["banana"]}], tokenizer)
    prompt = tokenizer.encode("Fruit:")
    rows = [tokenizer.encode(" I love ban"), tokenizer.encode(" I love apples")]
    width = max(len(r) for r in rows)
    rows = [r + [tokenizer.encode(" x")[0]] * (width - len(r)) for r in rows]  # same length, no "ban" tail
    proc(torch.tensor([prompt, prompt]), torch.zeros(2, vocab))
    out = proc(torch.tensor([prompt + rows[0], prompt + rows[1]]), torch.zeros(2, vocab))
    ana = tokenizer.convert_tokens_to_ids("ana")
    assert torch.isinf(out[0, ana]) and torch.isfinite(out[1, ana])
    assert _masked(out[0:1]) == _expected_bans(tokenizer, rows[0], ["banana"], vocab)
    assert _masked(out[1:2]) == _expected_bans(tokenizer, rows[1], ["banana"], vocab)


# --- max_whitespace -----------------------------------------------------------------------------


def _longest_run(text: str) -> int:
    return max((len(m) for m in WS_RUN.findall(text)), default=0)


def _expected_ws(tokenizer, generated: list[int], limit: int, vocab: int) -> set[int]:
    texts = tokenizer.batch_decode([generated + [i] for i in range(vocab)], skip_special_tokens=True)
    return {i for i, text in enumerate(texts) if _longest_run(text) > limit}


@pytest.mark.parametrize(
    ("generated_text", "limit"),
    [("", 0), ("", 2), ("hello", 1), ("hello ", 1), ("hello \n", 2), ("a\n\n", 3), ("x \t", 4), ("if x:\n", 4)],
)
def test_max_whitespace_masks_exactly_the_tokens_that_overrun(
    tokenizer, vocab: int, generated_text: str, limit: int
) -> None:
    (proc,) = processors.build_processors([{"name": "max_whitespace", "params": [str(limit)]}], tokenizer)
    prompt = tokenizer.encode("Write code:\n\n\n\n\n")  # the prompt's own whitespace does not count
    generated = tokenizer.encode(generated_text) if generated_text else []
    out = proc(torch.tensor([prompt]), torch.zeros(1, vocab))
    for step in range(1, len(generated) + 1):
        out = proc(torch.tensor([prompt + generated[:step]]), torch.zeros(1, vocab))
    assert _masked(out) == _expected_ws(tokenizer, generated, limit, vocab)
    assert tokenizer.eos_token_id not in _masked(out)


def _byte_tokens(tokenizer, data: bytes) -> list[int]:
    """`data` as one byte-level token per byte (as a model writes a char it has no whole token for)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return tokenizer.convert_tokens_to_ids([bytes_to_unicode()[b] for b in data])


@pytest.mark.parametrize(
    ("text", "tail", "limit"),
    [
        ("a ", "\u2009".encode()[:2], 1),  # a thin space's last byte would make a run of 2
        ("a", "\u2009".encode()[:1], 0),  # after its first byte, every token that completes it
        ("a ", "\u3000".encode()[:2], 1),  # an ideographic space
        ("a ", "\u2009".encode(), 2),  # a whole one, in three tokens, lengthens the run
        ("a", "\u00a0".encode(), 1),  # a no-break space, in two
        ("a ", "\u00e9".encode()[:1], 1),  # the first byte of a letter: the run is over whatever follows
    ],
)
def test_max_whitespace_counts_a_whitespace_char_split_across_byte_tokens(
    tokenizer, vocab: int, text: str, tail: bytes, limit: int
) -> None:
    (proc,) = processors.build_processors([{"name": "max_whitespace", "params": [str(limit)]}], tokenizer)
    prompt = tokenizer.encode("Go:")
    generated = tokenizer.encode(text) + _byte_tokens(tokenizer, tail)
    out = proc(torch.tensor([prompt]), torch.zeros(1, vocab))
    for step in range(1, len(generated) + 1):
        out = proc(torch.tensor([prompt + generated[:step]]), torch.zeros(1, vocab))
    assert _masked(out) == _expected_ws(tokenizer, generated, limit, vocab)


def test_max_whitespace_tracks_each_row_and_wider_scores(tokenizer, vocab: int) -> None:
    (proc,) = processors.build_processors([{"name": "max_whitespace", "params": ["2"]}], tokenizer)
    prompt = tokenizer.encode("Go:")
    a, b = tokenizer.encode("x  "), tokenizer.encode("x y")
    assert len(a) == len(b)
    proc(torch.tensor([prompt, prompt]), torch.zeros(2, vocab + 64))
    out = proc(torch.tensor([prompt + a, prompt + b]), torch.zeros(2, vocab + 64))
    space = tokenizer.encode(" ")[0]
    assert torch.isinf(out[0, space]) and torch.isfinite(out[1, space])
    assert torch.isfinite(out[:, vocab:]).all()
    assert _masked(out[0:1, :vocab]) == _expected_ws(tokenizer, a, 2, vocab)


# --- plugins ------------------------------------------------------------------------------------


def _check_no_digits(tokenizer, vocab: int) -> None:
    (proc,) = processors.build_processors([{"name": "no_digits"}], tokenizer)
    out = proc(torch.tensor([tokenizer.encode("Year:")]), torch.zeros(1, vocab))
    masked = _masked(out)
    assert tokenizer.encode("7")[0] in masked and tokenizer.encode(" year")[0] not in masked
    assert all(any(c.isdigit() for c in tokenizer.decode([i])) for i in masked)


def test_plugin_loaded_by_module_name(tokenizer, vocab: int, plugin_path: None) -> None:
    assert processors.load_custom_modules(["sp_example_plugin"]) == ["no_digits"]
    info = next(i for i in processors.list_factories() if i.name == "no_digits")
    assert info.builtin is False and "Example plugin" in info.description
    _check_no_digits(tokenizer, vocab)
    with pytest.raises(ProcessorError, match=r"'no_digits': no_digits takes no parameters, got \['3'\]"):
        processors.build_processors([{"name": "no_digits", "params": ["3"]}], tokenizer)


def test_plugin_loaded_through_its_entry_point(tokenizer, vocab: int, plugin_path: None) -> None:
    found = importlib.metadata.entry_points(group=processors.ENTRY_POINT_GROUP)
    assert ("no_digits", "sp_example_plugin") in {(ep.name, ep.value) for ep in found}
    assert "no_digits" in processors.load_entry_points()
    _check_no_digits(tokenizer, vocab)


def _write_dist(root: Path, name: str, entry_points: str, modules: dict[str, str]) -> None:
    """An installed-looking distribution: a *.dist-info with entry_points.txt, and its modules."""
    dist = root / f"{name}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{processors.ENTRY_POINT_GROUP}]\n{entry_points}\n")
    for module, source in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))


def test_entry_point_callable_gets_register_factory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plugin_path: None, tokenizer
) -> None:
    source = """
        def no_vowels(params, tokenizer):
            return lambda input_ids, scores: scores

        def register(register_factory):
            register_factory("no_vowels", no_vowels, description="registered by a callable")
    """
    _write_dist(tmp_path, "sp_callable_plugin", "vowels = sp_callable_plugin:register", {"sp_callable_plugin": source})
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "no_vowels" in processors.load_entry_points()
    info = next(i for i in processors.list_factories() if i.name == "no_vowels")
    assert info.description == "registered by a callable"
    assert len(processors.build_processors([{"name": "no_vowels"}], tokenizer)) == 1


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            "raise RuntimeError('boom at import')",
            "cannot import custom module 'sp_broken': RuntimeError: boom at import",
        ),
        (
            "import not_installed_anywhere",
            "cannot import custom module 'sp_broken': ModuleNotFoundError: No module named 'not_installed_anywhere'",
        ),
        (
            "from playground.processors import register_factory\nregister_factory('ban_strings', print)",
            "custom module 'sp_broken' failed while registering: a processor named 'ban_strings' is already registered",
        ),
    ],
)
def test_a_module_that_fails_stops_loading_with_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plugin_path: None, source: str, message: str
) -> None:
    (tmp_path / "sp_broken.py").write_text(source + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginLoadError, match=re.escape(message)):
        processors.load_custom_modules(["sp_broken"])
    assert processors.get_factory("ban_strings") is processors.ban_strings_factory


def test_a_missing_module_names_itself() -> None:
    with pytest.raises(
        PluginLoadError, match=r"cannot import custom module 'nowhere\.to_be\.found': ModuleNotFoundError"
    ):
        processors.load_custom_modules(["nowhere.to_be.found"])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("sp_missing_module_xyz", "failed to load: ModuleNotFoundError: No module named 'sp_missing_module_xyz'"),
        (
            "sp_callable_plugin:NOT_CALLABLE",
            "failed to load: TypeError: it is a int, not a module or a register(register_factory) callable",
        ),
    ],
)
def test_a_broken_entry_point_names_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plugin_path: None, value: str, message: str
) -> None:
    _write_dist(tmp_path, "sp_callable_plugin", f"broken = {value}", {"sp_callable_plugin": "NOT_CALLABLE = 3\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        PluginLoadError, match=re.escape(f"entry point 'broken' ({value}) of {processors.ENTRY_POINT_GROUP} {message}")
    ):
        processors.load_entry_points()


def test_max_whitespace_builds_its_table_before_the_first_step(engine, monkeypatch) -> None:
    """The per-token whitespace table (49k tokens decoded) was built inside the first decoding step and took that
    step's budget on a slow host (WorkBudgetError); the factory, outside any step, builds it now."""
    from playground.processors import builtin

    built = []
    monkeypatch.setattr(builtin, "_tables", {})  # a fresh table: nothing built yet
    real = builtin.TokenTable.whitespace
    monkeypatch.setattr(builtin.TokenTable, "whitespace", lambda self: built.append(1) or real(self))
    processor = builtin.max_whitespace_factory(["1"], engine.tokenizer)
    assert built == [1]
    processor(torch.tensor([[1, 2]]), torch.zeros(1, engine.runner.vocab_size))  # the first step only reads it
    assert processor.table._whitespace is not None
