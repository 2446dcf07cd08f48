"""Native code never reads a constraint in the server first: input that crashes it costs a 422.

On the old code the Lark chain below killed the test process itself (SIGSEGV in llguidance's parser
build, a stack overflow; GBNF did at 5,000 rules). The GBNF chain here is 1,500 rules, cheaper to convert,
and crashes only on the sandbox's smaller stack: the server's threads would have room for it.
"""

from __future__ import annotations

import os

import pytest
from fastapi.testclient import TestClient

from playground.constraints import Constraint, matching, sandbox
from playground.errors import InvalidConstraintError
from playground.providers.registry import Registry
from playground.server import create_app
from tests.fakes import FakeProvider


def _lark_chain(n: int) -> str:
    return "start: r0\n" + "\n".join(f'r{i}: r{i + 1} "a"' for i in range(n)) + f'\nr{n}: "b"\n'


def _gbnf_chain(n: int) -> str:
    return "root ::= r0\n" + "\n".join(f'r{i} ::= r{i + 1} "a"' for i in range(n)) + f'\nr{n} ::= "b"\n'


@pytest.mark.parametrize("grammar", [_lark_chain(3000), _gbnf_chain(1500)], ids=["lark", "gbnf"])
def test_a_grammar_that_crashes_the_native_parser_is_a_422(grammar: str) -> None:
    with pytest.raises(InvalidConstraintError, match="crashed the checker") as caught:
        Constraint.grammar(grammar)
    assert caught.value.status == 422
    outcome = matching.full_match("grammar", grammar, "b" + "a" * 10)  # the verdict path is proven too
    assert outcome.ok is None and "crashed" in outcome.message


def test_every_route_that_reads_a_grammar_answers_422_and_the_server_lives_on() -> None:
    client = TestClient(create_app(Registry([FakeProvider("b")]), ui=False))
    grammar = {"type": "grammar", "value": _lark_chain(3000)}
    body = {"inputs": "x", "parameters": {"max_new_tokens": 1, "grammar": grammar}}
    assert client.post("/generate", json=body).status_code == 422
    assert client.post("/inspect", json={"grammar": grammar}).status_code == 422
    chat = {"messages": [{"role": "user", "content": "x"}], "structured_outputs": {"grammar": grammar["value"]}}
    assert client.post("/v1/chat/completions", json=chat).status_code in (400, 422)
    assert client.get("/health").status_code == 200
    ok = {"inputs": "x", "parameters": {"grammar": {"type": "grammar", "value": 'start: "b"'}}}
    assert client.post("/generate", json=ok).json()["validation"]["valid"] is True


def test_readable_grammars_and_regexes_still_pass_through_the_sandbox() -> None:
    assert matching.syntax_error("grammar", _lark_chain(100)) is None
    assert matching.full_match("grammar", _lark_chain(100), "b" + "a" * 100).ok is True
    assert "unclosed group" in (matching.syntax_error("regex", "(ab") or "")


def test_a_sandbox_that_died_while_idle_is_replaced_not_reported() -> None:
    pool = sandbox.SandboxPool(workers=1)
    assert pool.call("playground.constraints.matching:local_syntax_error", "regex", "a+") is None
    box = pool._idle.get_nowait()
    os.kill(box.process.pid, 9)
    box.process.join(5)
    pool._idle.put(box)
    assert pool.call("playground.constraints.matching:local_syntax_error", "regex", "b+") is None


def test_the_probe_stack_is_smaller_than_the_servers() -> None:
    assert sandbox.PROBE_STACK * 4 <= max(sandbox._server_stack(), 4 * sandbox.PROBE_STACK)
    assert sandbox.on_probe_stack(sum, [1, 2, 3]) == 6


def test_a_compile_worker_crashed_by_its_input_is_reported_as_a_crash() -> None:
    from types import SimpleNamespace

    from playground.constraints.compile_pool import CompileLimits, CompilePool
    from playground.errors import CompileMemoryError

    pool = CompilePool.__new__(CompilePool)
    pool.limits = CompileLimits()
    worker = SimpleNamespace(process=SimpleNamespace(exitcode=-11, join=lambda timeout: None))
    error = pool._died(worker, "compiling the grammar with xgrammar")
    assert isinstance(error, CompileMemoryError) and error.status == 422
    assert "crashed the compile worker (signal 11)" in error.message


def test_a_client_whose_inputs_keep_killing_sandboxes_waits_and_others_do_not() -> None:
    from playground import client_scope

    pool = sandbox.SandboxPool(workers=1)
    with client_scope.scoped("client:hostile"):
        for i in range(sandbox.MAX_STRIKES):
            grammar = _lark_chain(3000 + i)  # a new input each time: nothing is remembered
            with pytest.raises(sandbox.SandboxError, match="crashed the checker"):
                pool.call("playground.constraints.matching:local_syntax_error", "grammar", grammar)
        with pytest.raises(sandbox.SandboxError, match="crashed or overran the checker 5 times") as caught:
            pool.call("playground.constraints.matching:local_syntax_error", "regex", "a+")
        assert caught.value.transient  # not the input's verdict: not remembered for it
    with client_scope.scoped("client:other"):
        assert pool.call("playground.constraints.matching:local_syntax_error", "regex", "a+") is None
