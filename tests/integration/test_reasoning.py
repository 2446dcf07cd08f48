"""Reasoning segments on the engine: a thinking model reasons freely, then the constraint engages.

The tiny thinking model writes noise, so these tests hold the mechanics: which tokens are reasoning, which were
forced (the opening `<think>`, the budget's `</think>`), where the constraint engaged, and that the verdict judges
the answer alone. The embedded model, which has no reasoning of its own, reasons in think_first's plain-text block.
"""

from __future__ import annotations

import copy
import re

import pytest

from playground.debug.evaluation import run_rows
from playground.decoding import reasoning
from playground.errors import ModelError, ParameterError
from playground.types import ChatMessage, GenerateParameters

CHAT = [ChatMessage(role="user", content="Is the sky blue?")]
YES_NO = {"type": "choice", "value": ["yes", "no"]}


@pytest.fixture(scope="module")
def thinking_engine(thinking_model):
    from playground.decoding.engine import Engine

    return Engine(thinking_model, compile_workers=1)


def params(**fields) -> GenerateParameters:
    return GenerateParameters(**{"max_new_tokens": 24, "grammar": YES_NO, **fields})


def test_a_thinking_template_is_known_without_a_flag_and_the_flag_overrides_it(thinking_model, loaded_model) -> None:
    assert reasoning.model_format(thinking_model.tokenizer).family == "think"
    assert reasoning.model_format(loaded_model.tokenizer) is None  # the embedded template has no reasoning
    assert reasoning.model_format(thinking_model.tokenizer, "none") is None
    assert reasoning.model_format(loaded_model.tokenizer, "gpt-oss").end == "<|channel|>final<|message|>"
    custom = reasoning.model_format(loaded_model.tokenizer, "<reason>,</reason>")
    assert (custom.start, custom.end) == ("<reason>", "</reason>")
    harmony = copy.copy(loaded_model.tokenizer)
    harmony.chat_template = "{{ '<|start|>assistant<|channel|>analysis<|message|>' }}"
    assert reasoning.model_format(harmony).family == "gpt-oss"
    harmony.chat_template = "{% if thinking %}Here is my thought process: ... Here is my response:{% endif %}"
    assert reasoning.model_format(harmony) is None  # granite's plain text: by the flag only
    with pytest.raises(ModelError, match="START,END"):
        reasoning.model_format(loaded_model.tokenizer, "thinking")


@pytest.mark.parametrize("constraint_engine", ["llguidance", "xgrammar", "outlines_core"])
def test_the_model_reasons_freely_then_the_budget_forces_the_end_and_the_constraint_engages(
    thinking_engine, constraint_engine: str
) -> None:
    result = thinking_engine.generate(CHAT, params(max_reasoning_tokens=5, constraint_engine=constraint_engine))
    seq = result.best
    tokens, span = seq.tokens, seq.reasoning
    # the template leaves the opening to the model: forced; five tokens of thought; the budget forces the end
    assert [t.text for t in tokens[:1]] == ["<think>"] and tokens[0].forced
    assert [t.segment for t in tokens[:6]] == ["reasoning"] * 6 and not any(t.forced for t in tokens[1:5])
    assert tokens[5].text == "</think>" and tokens[5].forced and tokens[5].segment == "reasoning"
    assert span.ended_by == "budget" and span.answer_token == 6 and span.tokens == 6
    assert all(t.segment == "answer" for t in tokens[6:])
    # the raw text keeps the reasoning and its delimiters; the constraint and the verdict saw the answer alone
    assert seq.generated_text.startswith("<think>") and "</think>" in seq.generated_text
    assert seq.answer in ("yes", "no") and seq.generated_text.endswith(seq.answer)
    assert span.text == seq.generated_text[len("<think>") : seq.generated_text.index("</think>")]
    assert seq.validation.valid is True, seq.validation
    # unconstrained thought keeps all the mass but the end of text's (an answer is owed); the answer is masked
    assert all(t.mass_kept > 0.9 for t in tokens[1:5]) and min(t.mass_kept for t in tokens[6:]) < 0.1


def test_the_model_ends_its_reasoning_itself_and_may_not_end_the_turn_while_reasoning(thinking_engine) -> None:
    tok = thinking_engine.tokenizer
    end, eos = tok.convert_tokens_to_ids("</think>"), min(thinking_engine.runner.eos_ids)
    # EOS is what the model wants most, but an answer is owed: the reasoning runs until the budget ends it
    held = thinking_engine.generate(CHAT, params(max_reasoning_tokens=4, logit_bias={str(eos): 100}))
    assert held.best.reasoning.ended_by == "budget" and held.best.reasoning.tokens == 5
    assert eos not in [t.id for t in held.best.tokens[: held.best.reasoning.answer_token]]
    # the model writes the end delimiter itself: the constraint engages right after it
    wrote = thinking_engine.generate(CHAT, params(logit_bias={str(end): 100}))
    span = wrote.best.reasoning
    assert span.ended_by == "model" and span.answer_token == 2 and not wrote.best.tokens[1].forced
    assert wrote.best.answer in ("yes", "no") and wrote.best.validation.valid is True


def test_enable_thinking_false_closes_the_reasoning_in_the_prompt_and_the_constraint_engages_at_once(
    thinking_engine,
) -> None:
    result = thinking_engine.generate(CHAT, params(chat_template_kwargs={"enable_thinking": False}))
    seq = result.best
    assert result.prompt.endswith("<think>\n\n</think>\n\n")
    assert seq.reasoning.ended_by == "prompt" and seq.reasoning.answer_token == 0 and seq.reasoning.tokens == 0
    assert seq.generated_text == seq.answer and seq.answer in ("yes", "no")
    assert all(t.segment == "answer" for t in seq.tokens)


def test_a_plain_prompt_says_itself_whether_reasoning_is_open(thinking_engine) -> None:
    opened = thinking_engine.generate("Question: 2+2?\n<think>", params(max_reasoning_tokens=3))
    assert opened.best.reasoning.ended_by == "budget" and not opened.best.tokens[0].forced
    plain = thinking_engine.generate("Question: 2+2? Answer:", params())
    assert plain.best.reasoning.ended_by == "prompt" and plain.best.answer in ("yes", "no")


def test_the_embedded_model_thinks_first_in_a_plain_text_block_then_answers_under_the_constraint(engine) -> None:
    result = engine.generate(
        CHAT, GenerateParameters(max_new_tokens=30, think_first=True, max_reasoning_tokens=6, grammar=YES_NO)
    )
    seq = result.best
    assert result.prompt.endswith("<|im_start|>assistant\n<think>\n")
    assert seq.reasoning.ended_by == "budget" and seq.reasoning.delimiters == ("<think>", "</think>")
    closing = seq.tokens[6 : seq.reasoning.answer_token]
    assert "".join(t.text for t in closing) == "\n</think>\n" and all(t.forced for t in closing)
    assert seq.answer in ("yes", "no") and seq.validation.valid is True
    assert seq.reasoning.text == seq.generated_text[: seq.generated_text.index("\n</think>")]
    raw = engine.generate(
        "Is 17 prime?\n",
        GenerateParameters(max_new_tokens=12, think_first=True, max_reasoning_tokens=2, grammar=YES_NO),
    )
    assert raw.prompt == "Is 17 prime?\n<think>\n" and raw.best.reasoning.ended_by == "budget"
    assert raw.best.answer in ("yes", "no")


def test_a_budget_of_none_shuts_a_block_the_prompt_opened_before_any_thought(engine) -> None:
    """A chat turn counts the start it writes, so budget 0 gives no thought; a block the prompt opened (think_first,
    /generate's prompt) got one free token of thought first, as the budget was checked only after a token."""
    raw = engine.generate(
        "Is 17 prime?\n",
        GenerateParameters(max_new_tokens=12, think_first=True, max_reasoning_tokens=0, grammar=YES_NO),
    )
    assert raw.best.reasoning.text.strip() == "" and raw.best.reasoning.ended_by == "budget"
    assert all(token.forced for token in raw.best.tokens[: raw.best.reasoning.answer_token])
    assert raw.best.answer in ("yes", "no")


def test_a_budget_on_a_model_that_does_not_reason_is_refused_by_name(engine) -> None:
    with pytest.raises(
        ParameterError, match=r"max_reasoning_tokens \(or reasoning_effort\): this model writes no reasoning"
    ):
        engine.generate(CHAT, params(max_reasoning_tokens=8))
    # a budget of none (reasoning_effort "none" or "minimal") is what a model without reasoning already does
    result = engine.generate(CHAT, params(max_reasoning_tokens=0))
    assert result.best.reasoning is None and result.best.answer in ("yes", "no")


def test_the_panels_mark_the_reasoning_where_the_constraint_engaged_and_the_figures_of_each_segment(
    thinking_engine,
) -> None:
    from playground import render

    result = thinking_engine.generate(CHAT, params(max_reasoning_tokens=3))
    seq = result.best
    span = seq.reasoning
    html = render.tokens_html(seq.tokens)
    classes = re.findall(r'<span class="(tok[^"]*)" data-index="(\d+)"', html)
    assert [int(i) for c, i in classes if "reasoning" in c.split()] == list(range(span.answer_token))
    assert html.count('class="engaged"') == 1
    assert re.search(r'class="engaged"[^>]*>▸</span><span class="tok[^"]*" data-index="' + str(span.answer_token), html)
    reasoning, answer = span.figures["reasoning"], span.figures["answer"]
    assert (reasoning.tokens, reasoning.forced) == (span.tokens, 2)  # the opening <think>, the budget's </think>
    assert answer.tokens == len(seq.tokens) - span.tokens and answer.mass_kept_mean < reasoning.mass_kept_mean
    assert f"<b>reasoning</b> {span.tokens} tokens" in html and f"<b>answer</b> {answer.tokens} tokens" in html
    # the budget counts the opening <think>: <think> and two tokens of thought, then </think>
    assert "4 tokens · max_reasoning_tokens forced its end · the constraint engaged at token 4" in render.details_html(
        result
    )


def test_compare_runs_the_turn_with_and_without_reasoning_both_judged(thinking_engine, engine) -> None:
    from playground.providers.local import LocalProvider
    from playground.providers.registry import Registry
    from playground.ui.compare_reasoning import compare_reasoning
    from playground.ui.state import ChatState, Form

    for served, budget in ((thinking_engine, 3), (engine, 4)):  # a thinking model; the embedded one thinks first
        registry = Registry([LocalProvider([served])])
        form = Form(
            model=registry.default_model,
            kind="choice",
            constraint_text="yes\nno",
            max_new_tokens=20,
            max_reasoning_tokens=budget,
        )
        with_it, without = compare_reasoning(registry, form, ChatState(), "Is the sky <b>blue</b>?")
        assert "<h4>with reasoning</h4>" in with_it and '<details class="reasoning">' in with_it
        assert "<h4>without reasoning</h4>" in without and '<details class="reasoning">' not in without
        assert 'data-valid="valid"' in with_it and 'data-valid="valid"' in without
        assert re.search(r'<pre class="answer">(yes|no)</pre>', with_it)


def test_the_next_token_view_follows_the_reasoning_then_the_constraint(thinking_engine) -> None:
    p = params(max_reasoning_tokens=4)
    at_start = thinking_engine.next_token_distribution(CHAT, p)
    assert at_start.allowed_count == 1 and [c.text for c in at_start.candidates if c.allowed] == ["<think>"]
    seq = thinking_engine.generate(CHAT, p).best
    reasoning = seq.generated_text[: seq.generated_text.index("</think>")]
    thinking = thinking_engine.next_token_distribution(CHAT, p, prefix="<think>")
    assert thinking.allowed_count > thinking.vocab_size - 5  # free, but for the end of text
    spent = thinking_engine.next_token_distribution(CHAT, p, prefix=reasoning)  # four tokens: the budget's end
    assert [c.text for c in spent.candidates if c.allowed] == ["</think>"] and spent.allowed_count == 1
    answer = thinking_engine.next_token_distribution(CHAT, p, prefix=reasoning + "</think>")
    assert 0 < answer.allowed_count < 10  # the choice's first tokens
    assert all(c.text[:1] in "yn" for c in answer.candidates if c.allowed)


def test_an_evaluation_row_judges_the_answer_alone(engine) -> None:
    """The Evaluate tab's rows took a thinking turn's whole text: `agree` compared `<think>...</think>yes` with `yes`
    (agreement 0% on right answers), and the figures and first refusal counted the reasoning's forced delimiters."""
    turn = GenerateParameters(max_new_tokens=30, think_first=True, max_reasoning_tokens=6, grammar=YES_NO)
    result = engine.generate(CHAT, turn)  # greedy: the rows below decode the same turn
    (row,) = run_rows(engine.generate, [CHAT], [result.best.answer], turn, engine)
    answer = [t for t in row.tokens if t.segment != "reasoning"]
    assert row.text == result.best.answer in ("yes", "no") and row.agree is True
    assert row.tokens_count == len(answer) < len(row.tokens) and row.forced == sum(t.forced for t in answer)
    assert row.first_refusal is None or row.first_refusal.position >= result.best.reasoning.answer_token


@pytest.mark.parametrize("prefix", ["<think>\nab", '<tool_call>\n{"name": "get_time", "arguments": {'])
def test_a_continued_prefix_with_special_tokens_is_the_text_the_answer_follows(thinking_engine, prefix: str) -> None:
    """The prefix's text was decoded without its special tokens (2 characters for `<think>\\nab`) while the row's text
    keeps them: the answer came back cut at the wrong character ("ink>\\nab..."), its first token's text with it."""
    result = thinking_engine.generate(CHAT, GenerateParameters(max_new_tokens=3, continue_from=prefix, seed=1))
    best = result.best
    assert best.continued_from == prefix
    assert best.generated_text == "".join(t.text for t in best.tokens)
    assert not best.generated_text.startswith(prefix[2:6])
