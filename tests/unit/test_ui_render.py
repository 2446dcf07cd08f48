"""playground.render turns results into HTML: everything escaped, colours by probability, tables and chart data."""

from __future__ import annotations

import math
import re

from playground import render
from playground.debug.why import TokenReason
from playground.render.debugger import reasons_html
from playground.types import (
    GeneratedToken,
    GenerationResult,
    NextTokenCandidate,
    NextTokenDistribution,
    Sequence,
    Timings,
    Token,
    Validation,
)

SCRIPT = "<script>alert(1)</script>"


def tok(
    text: str, p: float, *, raw: float | None = None, token_id: int = 1, alts=(), raw_alts=(), mass=None, special=False
) -> GeneratedToken:
    return GeneratedToken(
        id=token_id,
        text=text,
        logprob=math.log(p),
        raw_logprob=math.log(raw if raw is not None else p),
        special=special,
        mass_kept=mass,
        top_tokens=[Token(id=i, text=t, logprob=math.log(q)) for i, t, q in alts],
        raw_top_tokens=[Token(id=i, text=t, logprob=math.log(q)) for i, t, q in raw_alts],
    )


def seq(
    text: str, logprob: float, *, seed: int | None = None, valid: bool | None = True, finish="eos_token", tokens=()
) -> Sequence:
    return Sequence(
        generated_text=text,
        finish_reason=finish,
        generated_tokens=len(tokens) or 1,
        tokens=list(tokens),
        seed=seed,
        total_logprob=logprob,
        validation=Validation(valid=valid, message="checked"),
    )


def result(best: Sequence, others: list[Sequence] = (), kind="json_schema") -> GenerationResult:
    return GenerationResult(
        model_id="m",
        provider_id="local",
        prompt="p",
        input_length=7,
        best=best,
        best_of_sequences=list(others),
        constraint_kind=kind,
        constraint_engine="llguidance",
        timings=Timings(compile_s=0.012, time_to_first_token_s=0.25, tokens_per_s=31.5),
    )


def test_script_token_is_escaped_everywhere_it_appears() -> None:
    evil = tok(SCRIPT, 0.5, alts=[(1, SCRIPT, 0.5)], raw_alts=[(2, '"><img src=x onerror=alert(1)>', 0.9)])
    html = render.tokens_html([evil])
    assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&quot;&gt;&lt;img" in html


def test_whitespace_and_control_bytes_are_visible() -> None:
    label = render.token_label(" a\tb\n\x00")
    assert label == (
        '<span class="ws">·</span>a<span class="ws">⇥</span>b<span class="ws">↵</span><span class="ws">\\x00</span>'
    )
    assert render.token_label("") == '<span class="ws">∅</span>'


def test_newline_token_breaks_the_line_after_its_span() -> None:
    html = render.token_span(0, tok("\n", 0.9), "constrained")
    assert html.endswith("</span><br>")


def test_colours_run_from_red_to_green_by_probability() -> None:
    assert render.colour(0.0) == "hsl(0, 80%, 82%)"
    assert render.colour(0.5) == "hsl(60, 80%, 82%)"
    assert render.colour(1.0) == "hsl(120, 80%, 82%)"
    assert render.prob(float("-inf")) == 0.0  # masked: truly zero
    assert render.prob(None) is None and render.colour(None) == "hsl(0, 0%, 90%)"  # unreported: grey, not red


def test_raw_mode_colours_by_the_models_own_probability() -> None:
    token = tok("x", 1.0, raw=0.25)
    assert "background:hsl(120, 80%, 82%)" in render.token_span(0, token, "constrained")
    assert "background:hsl(30, 80%, 82%)" in render.token_span(0, token, "raw")


def test_popover_lists_raw_and_constrained_alternatives_with_mass_kept() -> None:
    token = tok(
        "{",
        0.6,
        raw=0.01,
        token_id=5,
        mass=0.02,
        alts=[(5, "{", 0.6), (6, '{"', 0.4)],
        raw_alts=[(9, "Sure", 0.5), (5, "{", 0.01)],
    )
    html = render.token_span(3, token, "constrained")
    assert 'data-index="3"' in html
    assert "mass kept 2.0%" in html
    assert "raw model" in html and "under the constraint" in html
    assert '<td class="alt masked">Sure</td><td class="num">50.0%</td>' in html
    assert '<td class="alt chosen">{</td><td class="num">60.0%</td>' in html


def test_overridden_token_is_marked_and_explained() -> None:
    token = tok("{", 0.9, raw=0.01, token_id=5, alts=[(5, "{", 0.9)], raw_alts=[(9, "Sure", 0.7)])
    assert token.overridden
    html = render.tokens_html([token, tok("a", 0.9, alts=[(1, "a", 0.9)], raw_alts=[(1, "a", 0.9)])])
    assert html.count('class="tok overridden"') == 1
    assert "the model wanted Sure (70.0%); the constraint did not allow it" in html
    assert "constraint overrode the model (1)" in html


def test_empty_answer_says_so() -> None:
    assert "No answer yet." in render.tokens_html([])


def test_bestof_table_lists_every_candidate_best_first_and_marks_the_chosen() -> None:
    best = seq("A", -1.5, seed=11)
    others = [seq("<b>C</b>", -9.0, seed=13, valid=False), seq("B", -3.25, seed=12, finish="length")]
    html = render.bestof_html(result(best, others))
    rows = re.findall(r'<tr class="cand( chosen)?">(.*?)</tr>', html)
    assert len(rows) == 3
    assert [bool(chosen) for chosen, _ in rows] == [True, False, False]
    assert "★ 1" in rows[0][1] and "-1.500" in rows[0][1] and ">11<" in rows[0][1] and "✓ valid" in rows[0][1]
    assert "-3.250" in rows[1][1] and ">length<" in rows[1][1]
    assert "&lt;b&gt;C&lt;/b&gt;" in rows[2][1] and "✗ invalid" in rows[2][1]


def test_single_candidate_explains_best_of() -> None:
    assert "Set best_of &gt; 1" in render.bestof_html(result(seq("A", -1.0)))


def test_chart_rows_sort_by_either_distribution_and_zero_masked_tokens() -> None:
    dist = NextTokenDistribution(
        prefix="",
        candidates=[
            NextTokenCandidate(id=1, text="Sure", raw_logprob=math.log(0.6), logprob=None, allowed=False),
            NextTokenCandidate(id=2, text="{", raw_logprob=math.log(0.05), logprob=math.log(0.9), allowed=True),
            NextTokenCandidate(id=3, text="<x>", raw_logprob=math.log(0.01), logprob=math.log(0.1), allowed=True),
        ],
        mass_kept=0.06,
        allowed_count=2,
        vocab_size=100,
    )
    rows = render.chart_rows(dist)
    assert [r.text for r in rows] == ["{", "Sure", "<x>"]
    assert rows[1].constrained == 0.0 and not rows[1].allowed
    assert math.isclose(rows[0].raw, 0.05) and math.isclose(rows[0].constrained, 0.9)
    html = render.next_token_html(dist, "at the <end>")
    assert "keeps 6.0% of the model&#x27;s probability mass" in html and "2 of 100 tokens allowed" in html
    assert "at the &lt;end&gt;" in html and "&lt;x&gt;" in html and "<x>" not in html
    assert 'class="bar con" style="width:90.0%"' in html
    assert html.count('class="bar-row masked"') == 1


def test_verdicts_are_green_when_valid_and_red_when_invalid_or_not_enforced() -> None:
    ok = render.validation_html(seq("{}", -1, valid=True), "json_schema")
    bad = render.validation_html(seq("x", -1, valid=False), "regex")
    loose = seq("{}", -1, valid=True).model_copy(
        update={"validation": Validation(valid=True, message="ok", enforced=False)}
    )
    unenforced = render.validation_html(loose, "json_schema")
    assert "pg-ok" in ok and 'data-valid="valid"' in ok
    assert "pg-bad" in bad and "✗ invalid (regex)" in bad
    assert "pg-bad" in unenforced and "not enforced by the provider" in unenforced
    assert "nothing to validate" in render.validation_html(
        seq("x", -1, valid=None).model_copy(update={"validation": Validation(valid=None)}), "none"
    )


def test_details_show_finish_counts_seed_and_timings() -> None:
    best = seq("x", -1, seed=42, finish="stop_sequence").model_copy(
        update={"stop_sequence": "</s>", "generated_tokens": 3}
    )
    html = render.details_html(result(best))
    assert 'data-finish="stop_sequence"' in html
    assert "stop_sequence (&quot;&lt;/s&gt;&quot;)" in html
    assert "3 generated · 7 prompt" in html
    assert "<b>seed</b> 42" in html
    assert "250 ms" in html and "31.5 tokens/s" in html and "12 ms" in html and "via llguidance" in html


def test_error_and_constraint_boxes_escape_their_message() -> None:
    assert "&lt;script&gt;" in render.error_box(SCRIPT) and "<script" not in render.error_box(SCRIPT)
    assert "pg-bad" in render.constraint_status("regex", "invalid regex at position 0")
    assert "constraint is valid" in render.constraint_status("regex", None)
    assert render.constraint_status("none", None) == ""


def test_chat_shows_every_message_exactly_unless_markdown_is_asked_for():
    from playground.render.chat import bubble_text, chatbot_value

    user = {"role": "user", "content": "# x *a* <b>b</b> & ```"}
    free = {"role": "assistant", "content": "**bold** <i>", "constraint": "none"}
    bound = {"role": "assistant", "content": "12*12*12*1 <b>", "constraint": "grammar"}
    assert [bubble_text(m) for m in chatbot_value([user, free, bound])] == [
        "# x *a* &lt;b&gt;b&lt;/b&gt; &amp; ```",
        "**bold** &lt;i&gt;",
        '<pre class="pg-answer"><code>12*12*12*1 &lt;b&gt;</code></pre>',
    ]
    assert [bubble_text(m) for m in chatbot_value([user, free, bound], markdown=True)] == [
        "````\n# x *a* <b>b</b> & ```\n````",
        "**bold** &lt;i&gt;",
        "```\n12*12*12*1 <b>\n```",
    ]


def test_the_chatbot_keeps_every_indent_and_tab_of_a_message():
    """Gradio dedents string contents (inspect.cleandoc) and expands tabs; the bubbles must not lose them."""
    import gradio as gr

    from playground.render.chat import chatbot_value

    user = {"role": "user", "content": "  first line indented\n\tx\ty\n    four"}
    answer = {"role": "assistant", "content": 'def f():\n    return 1\n\t"tab"', "constraint": "choice"}
    shown = gr.Chatbot(render_markdown=False).postprocess(chatbot_value([user, answer])).model_dump()
    texts = [message["content"][0]["text"] for message in shown]
    assert texts == [
        "  first line indented\n\tx\ty\n    four",
        '<pre class="pg-answer"><code>def f():\n    return 1\n\t"tab"</code></pre>',
    ]


def test_the_regex_status_says_how_the_engines_read_classes() -> None:
    note = render.constraint_status("regex", None)
    assert "Unicode" in note and "[0-9]" in note and "\\d" in note
    assert "GBNF" in render.constraint_status("grammar", "bad") and "pg-bad" in render.constraint_status("grammar", "x")
    assert "Unicode" not in render.constraint_status("json_schema", None)


def test_forced_tokens_are_drawn_as_such_with_a_legend() -> None:
    forced = tok('"name"', 1.0, token_id=7).model_copy(update={"forced": True})
    html = render.tokens_html([tok("{", 0.9), forced])
    assert html.count('class="tok forced"') == 1
    assert "forced by the constraint, not sampled (1)" in html


def test_details_say_when_the_compile_came_from_the_cache() -> None:
    fresh = result(seq("x", -1))
    cached = fresh.model_copy(update={"timings": Timings(compile_s=0.0001, compile_cached=True)})
    assert "(cached)" not in render.details_html(fresh)
    assert "0 ms (cached)" in render.details_html(cached)


def test_the_token_panel_is_one_tab_stop() -> None:
    html = render.tokens_html([tok("a", 0.5), tok("b", 0.5), tok("c", 0.5)])
    assert re.findall(r'tabindex="(-?\d)"', html) == ["0", "-1", "-1"]
    assert 'role="group"' in html and "arrow keys move" in html


def test_reasons_list_the_refused_tokens_that_mattered_and_count_the_rest() -> None:
    reasons = [
        TokenReason(id=1, text="yes", allowed=True, reason="allowed"),
        TokenReason(id=2, text="maybe", allowed=False, reason="not in the choice"),
        TokenReason(id=3, text="zzz", allowed=False, reason="not in the choice"),
        TokenReason(id=4, text="qqq", allowed=False, reason="not in the choice"),
        TokenReason(id=5, text="<eos>", allowed=False, reason="the answer is not complete"),
    ]
    raw = {1: math.log(0.6), 2: math.log(0.3), 3: math.log(0.0001), 4: math.log(0.00002)}
    html = reasons_html("before token #0", reasons, raw)
    assert [re.sub("<[^>]+>", "", cell) for cell in re.findall(r"<tr class=\"\w+\"><td>(.*?)</td>", html)] == [
        "yes",
        "maybe",
        "&lt;eos&gt;",
    ]
    assert ">0.0%<" not in html and "and 2 more of its likeliest tokens refused, each under 0.05%" in html
