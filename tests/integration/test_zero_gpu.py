"""On ZeroGPU every forward pass runs inside a `spaces.GPU` call: the UI's and the API's, for every feature.

Hugging Face's `spaces` cannot lease a GPU here, so a stand-in package of that name does what its
decorator does to a call (spaces 0.51, spaces/zero/wrappers.py): runs it on a worker of its own, the
lease, with arguments and results pickled across, a raised error turned into a generic one. It marks
the worker's thread; the model's forward, wrapped, records every call made anywhere else.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from playground.providers.local import LocalProvider
from playground.providers.registry import Registry
from playground.server import create_app
from playground.ui import debugger, handlers
from playground.ui.compare_engines import compare_engines
from playground.ui.state import ChatState, Form
from tests.support import serving

STAND_IN = '''
"""A stand-in for Hugging Face's spaces package: GPU runs each call on a lease thread of its own."""
import inspect
import pickle
import queue
import threading

lease = threading.local()  # lease.held is True on a lease's thread only
calls = []


def _across(value):
    return pickle.loads(pickle.dumps(value))  # the real one sends arguments and results through pipes


def GPU(task=None, **options):
    def wrap(fn):
        if inspect.isgeneratorfunction(fn):
            def streamed(*args, **kwargs):
                calls.append(fn.__name__)
                args, kwargs = _across((args, kwargs))
                out, stop = queue.Queue(), threading.Event()

                def work():
                    lease.held = True
                    try:
                        for item in fn(*args, **kwargs):
                            out.put(("item", _across(item)))
                            if stop.is_set():
                                break
                    except Exception as exc:
                        out.put(("error", RuntimeError("ZeroGPU worker error: " + type(exc).__name__)))
                    out.put(("end", None))

                threading.Thread(target=work, daemon=True).start()
                try:
                    while True:
                        kind, value = out.get()
                        if kind == "end":
                            return
                        if kind == "error":
                            raise value
                        yield value
                finally:
                    stop.set()
            return streamed

        def called(*args, **kwargs):
            calls.append(fn.__name__)
            args, kwargs = _across((args, kwargs))
            box = {}

            def work():
                lease.held = True
                try:
                    box["value"] = _across(fn(*args, **kwargs))
                except Exception as exc:
                    box["error"] = RuntimeError("ZeroGPU worker error: " + type(exc).__name__)

            worker = threading.Thread(target=work)
            worker.start()
            worker.join()
            if "error" in box:
                raise box["error"]
            return box["value"]
        return called
    return wrap(task) if task is not None else wrap
'''

SCHEMA = '{"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}'


class Forwards:
    """Counts the model's forward passes inside a lease and outside one (where each one happened)."""

    def __init__(self, spaces: Any) -> None:
        self.spaces = spaces
        self.inside = 0
        self.outside: list[str] = []

    def wrap(self, forward: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            if getattr(self.spaces.lease, "held", False):
                self.inside += 1
            else:
                self.outside.append(threading.current_thread().name)
            return forward(*args, **kwargs)

        return counted

    @contextmanager
    def expect(self, what: str) -> Iterator[None]:
        """The block ran the model, and only inside leases."""
        before = self.inside
        yield
        assert self.outside == [], f"{what}: forwards outside a GPU lease, on threads {sorted(set(self.outside))}"
        assert self.inside > before, f"{what}: no forward ran at all"


@pytest.fixture
def zero_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: Any) -> Iterator[tuple[Registry, Forwards]]:
    """A registry whose local provider was made on ZeroGPU hardware, with the stand-in `spaces` installed."""
    (tmp_path / "spaces").mkdir()
    (tmp_path / "spaces" / "__init__.py").write_text(STAND_IN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "spaces", raising=False)
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    provider = LocalProvider([engine])
    spaces = sys.modules["spaces"]
    assert spaces.__file__ == str(tmp_path / "spaces" / "__init__.py")
    forwards = Forwards(spaces)
    monkeypatch.setattr(engine.model, "forward", forwards.wrap(engine.model.forward))
    yield Registry([provider]), forwards
    sys.modules.pop("spaces", None)


def _form(registry: Registry, **kwargs: Any) -> Form:
    return Form(model=registry.default_model, max_new_tokens=kwargs.pop("max_new_tokens", 6), **kwargs)


def test_every_ui_forward_runs_inside_a_lease(zero_gpu: tuple[Registry, Forwards]) -> None:
    registry, forwards = zero_gpu
    state = ChatState()
    choice = _form(registry, kind="choice", constraint_text="yes\nno")
    with forwards.expect("streaming chat"):
        steps = list(handlers.chat(registry, choice, state, "Yes or no?"))
    assert steps[-1].error == "" and state.result.generated_text in {"yes", "no"}
    assert len([s for s in steps if s.tokens and not s.details]) >= 1  # it streamed
    with forwards.expect("best_of"):
        best_of = _form(registry, kind="choice", constraint_text="red\nblue", do_sample=True, seed=3, best_of=2)
        final = list(handlers.chat(registry, best_of, ChatState(), "A colour?"))[-1]
    assert final.error == "" and final.bestof.count('<tr class="cand') == 2
    with forwards.expect("next-token chart"):
        chart = handlers.next_token(registry, state, 0)
    assert "at token #0" in chart and 'class="bar-row' in chart
    with forwards.expect("Compare"):
        free, bound = handlers.compare(registry, choice, state, "Yes or no?")
    assert "unconstrained" in free and 'data-valid="valid"' in bound
    with forwards.expect("Compare engines"):
        columns = compare_engines(registry, choice, state, "Yes or no?", None)
    assert columns.count('data-valid="valid"') == 3
    branches, _ = debugger.pin(state, debugger.BranchState(), 0)
    with forwards.expect("debugger branch"):
        branches, _, shown = debugger.branch(registry, state, branches, "n")
    assert len(branches.branches) == 1 and 'role="alert"' not in shown
    with forwards.expect("debugger reasons"):
        reasons = debugger.reasons_html(registry, state, 0)
    assert "before token #0" in reasons
    checked = debugger.check_instance(registry, choice, "maybe")  # masks only: no forward needed
    assert "maybe" in checked and forwards.outside == []


def test_a_bad_request_inside_a_lease_is_still_its_own_error(zero_gpu: tuple[Registry, Forwards]) -> None:
    registry, forwards = zero_gpu
    f = _form(registry, kind="regex", constraint_text="[0-9]+")
    state = ChatState()
    list(handlers.chat(registry, f, state, "A number?"))
    branches, _ = debugger.pin(state, debugger.BranchState(), 0)
    leases = len(forwards.spaces.calls)
    _, _, shown = debugger.branch(registry, state, branches, "x")  # the regex refuses an x
    assert len(forwards.spaces.calls) == leases + 1
    assert 'role="alert"' in shown and "ZeroGPU worker error" not in shown and "refuse" in shown


def test_every_api_forward_runs_inside_a_lease(zero_gpu: tuple[Registry, Forwards]) -> None:
    registry, forwards = zero_gpu
    grammar = {"type": "json", "value": SCHEMA}
    with serving(create_app(registry, ui=False)) as url, httpx.Client(base_url=url, timeout=120) as client:
        with forwards.expect("/generate with best_of"):
            body = {
                "inputs": "ok?",
                "parameters": {"max_new_tokens": 8, "best_of": 2, "do_sample": True, "seed": 1, "details": True},
            }
            answer = client.post("/generate", json={**body, "parameters": {**body["parameters"], "grammar": grammar}})
        assert answer.status_code == 200, answer.text
        assert len(answer.json()["details"]["best_of_sequences"]) == 1
        with forwards.expect("/generate_stream"):
            streamed = client.post("/generate_stream", json={"inputs": "Hi", "parameters": {"max_new_tokens": 4}})
        assert streamed.status_code == 200 and streamed.text.count("data:") >= 4
        with forwards.expect("/v1/chat/completions stream"):
            chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "stream": True}
            chunks = client.post("/v1/chat/completions", json=chat)
        assert chunks.status_code == 200 and "[DONE]" in chunks.text
        with forwards.expect("/next_token"):
            dist = client.post("/next_token", json={"inputs": "ok?", "parameters": {"grammar": grammar}})
        assert dist.status_code == 200 and dist.json()["allowed_count"] >= 1
        check = client.post("/check", json={"grammar": grammar, "text": '{"ok": true}'})
        assert check.status_code == 200 and check.json()["accepted"] is True
        leases = len(forwards.spaces.calls)
        bad = client.post("/generate", json={"inputs": "x", "parameters": {"grammar": {"type": "regex", "value": "("}}})
        assert bad.status_code == 422 and "ZeroGPU worker error" not in bad.text
        assert len(forwards.spaces.calls) > leases  # it failed inside the lease, and came back as itself
    assert forwards.outside == []
