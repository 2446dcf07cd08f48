"""The prefix cache reveals nothing across clients: each finds only its own sequences, and /info shows
no hit counters or sizes that move with another client's request.

On the old code one shared cache served every client and /info counted its hits: a client recovered
another's 4-digit PIN by watching the counter while guessing prefixes.
"""

from __future__ import annotations

from fastapi.testclient import TestClient

from playground import client_scope
from playground.decoding.prefix_cache import PrefixCache
from playground.providers.registry import Registry
from playground.server import create_app
from playground.ui.state import ChatState
from tests.fakes import FakeProvider
from tests.unit.test_prefix_cache import kv

SECRET = [1, 2, 3, 4, 5, 6]  # a system prompt with a PIN at the end, say


def test_a_client_never_reuses_another_clients_sequence() -> None:
    cache = PrefixCache(100)
    with client_scope.scoped("client:victim"):
        cache.scoped().store(SECRET, kv(len(SECRET)))
    with client_scope.scoped("client:attacker"):
        assert cache.scoped().lookup([*SECRET, 7]) == (0, None)
        assert cache.scoped().lookup([1, 2, 3, 4, 5, 9, 9]) == (0, None)
    with client_scope.scoped("client:victim"):
        n, hit = cache.scoped().lookup([*SECRET, 7])
    assert n == len(SECRET) and hit.get_seq_length() == len(SECRET)


def test_a_client_storing_its_own_sequence_keeps_another_clients_identical_one() -> None:
    cache = PrefixCache(100)
    cache.store(SECRET[:3], kv(3), "client:a")
    cache.store(SECRET, kv(len(SECRET)), "client:b")  # extends a's entry, but a's is not b's to drop
    assert cache.lookup([*SECRET[:3], 0], "client:a")[0] == 3


def test_the_public_figures_hold_no_counter_another_client_moves() -> None:
    cache = PrefixCache(100)
    before = cache.public_usage()
    cache.store(SECRET, kv(len(SECRET)), "client:victim")
    cache.lookup([*SECRET, 7], "client:victim")
    assert cache.public_usage() == before
    assert not {"hits", "misses", "reused_tokens", "entries", "tokens"} & set(before)


class _Recording(FakeProvider):
    """Records the client scope each call runs under (in the request's thread or its stream's)."""

    def __init__(self) -> None:
        super().__init__("ok")
        self.scopes: list[str] = []

    def generate(self, model, inputs, params):  # type: ignore[no-untyped-def]
        self.scopes.append(client_scope.current())
        return super().generate(model, inputs, params)

    def stream(self, model, inputs, params):  # type: ignore[no-untyped-def]
        self.scopes.append(client_scope.current())
        yield from super().stream(model, inputs, params)


def test_every_http_request_runs_as_its_client_streams_included() -> None:
    fake = _Recording()
    app = create_app(Registry([fake]), ui=False)
    body = {"inputs": "x", "parameters": {"max_new_tokens": 2}}
    for address in ("10.0.0.1", "10.0.0.2"):
        client = TestClient(app, client=(address, 50000))
        client.post("/generate", json=body)
        with client.stream("POST", "/generate_stream", json=body) as r:
            r.read()
    a, a_stream, b, b_stream = fake.scopes
    assert a == a_stream and b == b_stream and a != b
    assert client_scope.LOCAL not in fake.scopes


def test_a_made_up_header_is_not_a_new_client() -> None:
    """A header the client chooses would make it a new client per request, first in every fair queue."""
    fake = _Recording()
    client = TestClient(create_app(Registry([fake]), ui=False), client=("10.0.0.3", 50000))
    body = {"inputs": "x", "parameters": {"max_new_tokens": 2}}
    for key in ("a", "b"):
        client.post("/generate", json=body, headers={"Authorization": f"Bearer {key}"})
    assert len(set(fake.scopes)) == 1


def test_each_ui_conversation_is_its_own_client() -> None:
    one, other = ChatState(), ChatState()
    assert one.cache_scope() == one.cache_scope() != other.cache_scope()
    assert "_scope" not in one.model_dump()


def test_the_compile_cache_never_tells_a_client_what_another_compiled(monkeypatch) -> None:
    from playground.constraints import Constraint
    from playground.constraints import compiler as compiler_module
    from playground.constraints.compiler import ConstraintCompiler, _Outcome

    compiles = []
    monkeypatch.setattr(
        ConstraintCompiler,
        "_compile_one",
        lambda self, c, e, background: compiles.append(e) or _Outcome(template=object()),
    )
    monkeypatch.setattr(compiler_module, "_for_request", lambda c, e, outcome, cached, r: cached)
    compiler = ConstraintCompiler(tokenizer=None)
    secret = Constraint.regex("PIN 4831")
    with client_scope.scoped("client:victim"):
        assert compiler.compile(secret) is False
    with client_scope.scoped("client:attacker"):
        assert compiler.compile(secret) is False  # compiled afresh: nothing says the victim sent it
        assert compiler.compile(secret) is True  # its own compile is cached for itself
    assert len(compiles) == 2
