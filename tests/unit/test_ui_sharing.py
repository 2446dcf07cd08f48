"""Share links and the autosave, without a browser."""

from __future__ import annotations

import base64
import random
import zlib

import gradio as gr
import pytest

from playground.errors import PlaygroundError
from playground.types import FailedCandidate, GenerationResult, Sequence
from playground.types.sizes import MAX_INPUT_CHARS, MAX_MESSAGES, MAX_SEED
from playground.ui import controls, handlers, sharing
from playground.ui.state import FIELDS, ChatState, Form, drawn_seed, export_session


def test_a_share_link_carries_settings_messages_and_the_seed_the_turn_used() -> None:
    form = Form(model="embedded", kind="regex", constraint_text="[a-z]+", do_sample=True, max_new_tokens=7)
    best = Sequence(generated_text="abc", finish_reason="eos_token", generated_tokens=2, seed=4242)
    messages = [{"role": "user", "content": "hi <b>"}, {"role": "assistant", "content": "abc", "constraint": "regex"}]
    state = ChatState(messages=messages, result=GenerationResult(model_id="m", prompt="p", input_length=1, best=best))
    query = sharing.share_query(form, state)
    assert query.startswith("?session=")
    loaded, restored = sharing.read_query(query.removeprefix("?session="))
    assert loaded == form.model_copy(update={"seed": 4242}) and restored == messages


def test_a_best_of_turn_s_drawn_seed_is_its_base_not_the_winner_s() -> None:
    """Candidate k ran seed base+k: the link and the Code tab pinned the winner's seed, which draws other candidates
    unless candidate 0 won."""

    def turn(*seeds: int) -> GenerationResult:
        best, *others = (
            Sequence(generated_text=str(s), finish_reason="length", generated_tokens=1, seed=s) for s in seeds
        )
        return GenerationResult(model_id="m", prompt="p", input_length=1, best=best, best_of_sequences=others)

    assert drawn_seed(turn(12, 11, 13)) == 11 and drawn_seed(turn(7)) == 7 and drawn_seed(None) is None
    assert drawn_seed(turn(0, MAX_SEED)) == MAX_SEED  # base MAX_SEED: the next candidate's wraps to 0
    # a candidate that failed is left out of the sequences, not of the seeds drawn (it was the winner's, 12)
    failed = turn(12, 13).model_copy(
        update={"failed_candidates": [FailedCandidate(index=0, seed=11, generated_tokens=1, error="dead end")]}
    )
    assert drawn_seed(failed) == 11
    query = sharing.share_query(Form(best_of=3, do_sample=True), ChatState(result=turn(12, 11, 13)))
    assert sharing.read_query(query.split("=", 1)[1])[0].seed == 11


def test_damaged_links_are_named_and_the_autosave_is_the_fallback() -> None:
    with pytest.raises(PlaygroundError, match="share link is damaged"):
        sharing.read_query("not-a-link")
    saved = export_session(Form(kind="choice", constraint_text="a\nb"), ChatState())
    form, messages, note = sharing.restored(None, saved)
    assert form.kind == "choice" and messages == [] and note == ""
    assert sharing.restored(None, None) is None


def test_a_restored_answer_says_how_to_see_its_tokens() -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "abc"}]
    saved = export_session(Form(), ChatState(messages=messages))
    assert sharing.restored(None, saved)[2] == sharing.RETRY_HINT
    query = sharing.share_query(Form(), ChatState(messages=messages)).removeprefix("?session=")
    assert sharing.restored(query, None)[2] == f"✓ opened a shared session (2 messages) · {sharing.RETRY_HINT}"
    one = sharing.share_query(Form(), ChatState(messages=messages[:1])).removeprefix("?session=")
    assert sharing.restored(one, None)[2] == "✓ opened a shared session (1 message)"


def _controls(**special: object) -> list[object]:
    """The page's form controls in Form order: plain text boxes but for the ones a test names."""
    return [special.get(name, gr.Textbox()) for name in FIELDS]


def test_a_session_from_another_server_is_fitted_to_this_page_and_each_change_is_named() -> None:
    page = _controls(
        best_of=gr.Slider(1, 4),
        max_new_tokens=gr.Slider(1, 512),
        temperature=gr.Slider(0.0, 2.0),
        truncate=gr.Number(precision=0),  # as the page has it: no minimum
        kind=gr.Radio(choices=[("None", "none"), ("Regex", "regex")]),
        constraint_engine=gr.Dropdown(choices=["auto", "llguidance"]),
        model=gr.Dropdown(choices=["embedded"], allow_custom_value=True),
    )
    sent = Form(
        model="org/other",
        kind="<b>lark</b>",
        best_of=9,
        max_new_tokens=10**9,
        temperature=-1.0,
        truncate=-3,
        constraint_engine="xgrammar",
        do_sample=True,
        seed=-5,
        max_reasoning_tokens=-1,
    )
    form, notes = sharing.fitted(sent, page)
    assert (form.best_of, form.max_new_tokens, form.temperature, form.truncate) == (4, 512, 0.0, 0)
    assert (form.kind, form.constraint_engine, form.model, form.do_sample) == ("none", "auto", "org/other", True)
    assert notes == [
        "kind '<b>lark</b>' is not offered here: set to 'none'",
        "max_new_tokens 1000000000 is out of this server's range: set to 512",
        "best_of 9 is out of this server's range: set to 4",
        "constraint_engine 'xgrammar' is not offered here: set to 'auto'",
        "temperature -1.0 is out of this server's range: set to 0.0",
        "truncate -3 is out of this server's range: set to 0",  # (each was kept, and every Send refused)
        "seed -5 is out of this server's range: left blank",
        "max_reasoning_tokens -1 is out of this server's range: left blank",
    ]
    assert (form.seed, form.max_reasoning_tokens) == (None, None)
    # past 64 bits the page could not be sent the value (it hung); a file's NaN failed every Send
    form, notes = sharing.fitted(Form(truncate=10**30, temperature=float("nan")), page)
    assert (form.truncate, form.temperature) == (0, 1.0)
    assert notes == ["temperature nan is out of this server's range: set to 1.0",
                     "truncate 1000000000000000000000000000000 is out of this server's range: set to 0"]  # fmt: skip
    assert sharing.fitted(form, page) == (form, [])
    many = Form(stop="a\nb\nc\nd\ne\nf")  # a file with six: every Send was refused ("at most 4 items")
    form, notes = sharing.fitted(many, page)
    assert form.stop == "a\nb\nc\nd" and notes == ["stop has 6 sequences, at most 4 here: kept the first ones"]


def test_a_session_naming_a_model_this_server_does_not_serve_opens_on_its_default_and_says_so() -> None:
    """The picker fell back to the default model without a word (with loading off)."""
    from playground.providers.registry import Registry
    from playground.ui.state import UISettings
    from tests.fakes import FakeProvider

    registry = Registry([FakeProvider("yes")])
    closed, open_ = UISettings(allow_model_loading=False), UISettings(allow_model_loading=True)
    assert sharing.unserved(registry, closed, "org/<b>elsewhere</b>") == (
        registry.default_model,
        f"model 'org/<b>elsewhere</b>' is not served here: opened on {registry.default_model!r}",
    )
    assert sharing.unserved(registry, closed, registry.default_model) is None
    assert sharing.unserved(registry, open_, "org/elsewhere") is None  # the picker loads it


def test_a_session_nested_too_deeply_is_named_on_every_path_without_a_traceback(tmp_path, caplog) -> None:
    """`[[[...]]]` past the recursion limit was "model failure (RecursionError)", logged with its traceback."""
    deep = "[" * 200_000 + "]" * 200_000
    file = tmp_path / "deep.json"
    file.write_text(deep)
    link = base64.urlsafe_b64encode(zlib.compress(deep.encode(), 9)).decode().rstrip("=")
    readers = [lambda: controls.import_file(str(file)), lambda: sharing.read_query(link)]
    for read in [*readers, lambda: sharing.restored(None, deep), lambda: sharing.restored(link, None)]:
        with pytest.raises(PlaygroundError) as caught:
            read()
        message = "session file is nested too deeply to read: not a session file"
        assert handlers.error_message(caught.value) == message
    assert not caplog.records


def _link(text: str) -> str:
    return base64.urlsafe_b64encode(zlib.compress(text.encode(), 9)).decode().rstrip("=")


def test_a_link_that_unpacks_past_a_session_s_size_is_refused_unread() -> None:
    """A 20 KB link held a 16 MB message: unpacked without a bound, then sent to the page and autosaved."""
    huge = export_session(Form(), ChatState(messages=[{"role": "user", "content": "a" * 16_000_000}]))
    link = _link(huge)
    assert len(link) < sharing.MAX_QUERY_CHARS
    with pytest.raises(PlaygroundError, match=f"unpacks to more than {sharing.MAX_SESSION_BYTES} bytes"):
        sharing.read_query(link)


def test_a_session_past_a_chat_s_limits_is_refused_by_link_and_file_alike(tmp_path) -> None:
    many = [{"role": "user", "content": "x"}] * (MAX_MESSAGES + 1)
    long = [{"role": "user", "content": "é" * (MAX_INPUT_CHARS + 1)}]
    told = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y" * (MAX_INPUT_CHARS + 1)}]
    cases = ((many, f"at most {MAX_MESSAGES}"), (long, f"at most {MAX_INPUT_CHARS}"), (told, "last answers hold"))
    huge = Form(system_prompt="b" * (MAX_INPUT_CHARS + 1))
    for messages, words, form in [*((m, w, Form()) for m, w in cases), ([], "setting system_prompt has", huge)]:
        text = export_session(form, ChatState(messages=messages))
        file = tmp_path / "s.json"
        file.write_text(text)
        with pytest.raises(PlaygroundError, match=words):
            sharing.read_query(_link(text))
        with pytest.raises(PlaygroundError, match=words):
            controls.import_file(str(file))


def test_a_session_too_long_for_a_link_says_to_export_it() -> None:
    """Past httpx's URL length, Gradio failed the page's opening event and the page waited for ever."""
    noise = base64.b64encode(random.Random(0).randbytes(60_000)).decode()  # packs badly: ~80 KB of link
    with pytest.raises(PlaygroundError, match="too long for a link .* export it as a file"):
        sharing.share_query(Form(), ChatState(messages=[{"role": "user", "content": noise}]))
    with pytest.raises(PlaygroundError, match="longer than a link can be"):
        sharing.read_query("A" * (sharing.MAX_QUERY_CHARS + 1))


def test_a_chat_the_page_made_comes_back_though_its_last_answer_took_it_past_the_limit() -> None:
    """A Send checks the messages it sends; the answer then joins them. A reload refused such a chat (the autosave
    goes through the same reader as a link)."""
    messages = [{"role": "user", "content": "x" * (MAX_INPUT_CHARS - 10)}, {"role": "assistant", "content": "y" * 50}]
    saved = export_session(Form(), ChatState(messages=messages))
    assert sharing.restored(None, saved)[1] == messages
