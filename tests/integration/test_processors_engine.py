"""Custom logits processors inside the engine's decode loop, on the embedded model."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

from playground import processors
from playground.errors import ProcessorError
from playground.types import ChatMessage, GenerateParameters

torch.set_num_threads(1)
PLUGINS = Path(__file__).resolve().parent.parent / "plugins"
BANNED = ["banana", "Banana", "the"]
CODE_PROMPT = "Write a Python function that prints the numbers from 1 to 10, with a docstring and comments."


def chat(text: str) -> list[ChatMessage]:
    return [ChatMessage(role="user", content=text)]


def longest_whitespace_run(text: str) -> int:
    return max((len(run) for run in re.findall(r"\s+", text)), default=0)


def texts(result) -> list[str]:
    """The chosen sequence and every other best_of candidate."""
    return [result.best.generated_text] + [s.generated_text for s in result.best_of_sequences]


def params(*specs: dict, **kwargs) -> GenerateParameters:
    return GenerateParameters(max_new_tokens=kwargs.pop("max_new_tokens", 24), logits_processors=list(specs), **kwargs)


@pytest.mark.parametrize(
    "inputs",
    [
        chat("Repeat this sentence exactly: I ate a banana and a banana split."),
        chat("Repeat exactly: the cat sat on the mat by the door."),
        "My favourite fruit is the banana. I eat a banana every day because the banana",
    ],
    ids=["repeat-banana", "repeat-the", "continue-banana"],
)
def test_ban_strings_greedy_never_emits_a_banned_string(engine, inputs) -> None:
    free = engine.generate(inputs, params()).best.generated_text
    assert any(b in free for b in BANNED), f"the prompt no longer tempts the model: {free!r}"
    banned = engine.generate(inputs, params({"name": "ban_strings", "params": BANNED})).best.generated_text
    assert banned.strip() and not any(b in banned for b in BANNED), banned


def test_ban_strings_sampled_rows_each_obey(engine) -> None:
    inputs = chat("Repeat this sentence exactly: I ate a banana and a banana split.")
    spec = {"name": "ban_strings", "params": BANNED}
    for seed in (1, 2):
        result = engine.generate(inputs, params(spec, do_sample=True, temperature=1.2, seed=seed, best_of=2))
        outputs = texts(result)
        assert len(outputs) == 2
        for text in outputs:
            assert not any(b in text for b in BANNED), text


def test_max_whitespace_keeps_every_run_short(engine) -> None:
    free = engine.generate(chat(CODE_PROMPT), params(max_new_tokens=40)).best.generated_text
    assert longest_whitespace_run(free) > 2, f"the prompt no longer tempts indentation: {free!r}"
    for limit, extra in ((2, {}), (1, {"do_sample": True, "seed": 7, "best_of": 2})):
        spec = {"name": "max_whitespace", "params": [str(limit)]}
        result = engine.generate(chat(CODE_PROMPT), params(spec, max_new_tokens=40, **extra))
        for text in texts(result):
            assert text.strip() and longest_whitespace_run(text) <= limit, text


def test_processor_and_constraint_compose(engine) -> None:
    choices = ["yes", "no"]  # no letter in common, so banning one's first letter leaves only the other
    grammar = {"type": "choice", "value": choices}
    inputs = chat("Is a banana yellow? Answer yes or no.")
    free = engine.generate(inputs, params(grammar=grammar)).best.generated_text
    assert free in choices
    result = engine.generate(inputs, params({"name": "ban_strings", "params": [free[0]]}, grammar=grammar)).best
    assert result.generated_text == next(c for c in choices if c != free)
    assert result.validation.valid is True


def test_a_processor_that_raises_fails_only_its_request(engine, registered: list[str]) -> None:
    def explode_at_third_step(params: list[str], tokenizer):
        calls = []

        def processor(input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            calls.append(input_ids.shape[1])
            if len(calls) == 3:
                raise RuntimeError(f"exploded at length {input_ids.shape[1]}")
            return scores

        return processor

    registered.append("explode")
    processors.register_factory("explode", explode_at_third_step, description="fails on its third call")
    with pytest.raises(
        ProcessorError, match=r"processor 'explode' failed: RuntimeError: exploded at length \d+"
    ) as caught:
        engine.generate("Once upon a time", params({"name": "explode"}))
    assert caught.value.status == 422
    after = engine.generate("Once upon a time", params({"name": "ban_strings", "params": ["the"]}, max_new_tokens=12))
    assert after.best.generated_tokens == 12 and "the" not in after.best.generated_text


def test_unknown_names_and_bad_params_fail_before_decoding(engine) -> None:
    with pytest.raises(ProcessorError, match="unknown logits processor 'nope'; registered: .*ban_strings"):
        engine.generate("Hi", params({"name": "nope"}))
    with pytest.raises(ProcessorError, match="max_whitespace needs a whole number, got 'many'"):
        engine.generate("Hi", params({"name": "max_whitespace", "params": ["many"]}))


def test_example_plugin_drives_generation(engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(PLUGINS))
    monkeypatch.delitem(sys.modules, "sp_example_plugin", raising=False)
    if "no_digits" in {info.name for info in processors.list_factories()}:
        processors.unregister_factory("no_digits")
    try:
        assert processors.load_custom_modules(["sp_example_plugin"]) == ["no_digits"]
        inputs = chat("Count from 1 to 10, separated by commas.")
        free = engine.generate(inputs, params()).best.generated_text
        assert re.search(r"\d", free), f"the prompt no longer tempts digits: {free!r}"
        result = engine.generate(inputs, params({"name": "no_digits"})).best.generated_text
        assert result.strip() and not re.search(r"\d", result), result
    finally:
        processors.unregister_factory("no_digits")
        sys.modules.pop("sp_example_plugin", None)
