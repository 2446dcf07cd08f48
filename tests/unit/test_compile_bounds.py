"""Bounds an engine can't handle are refused before compiling, and the compile limits are flags."""

from __future__ import annotations

import pytest

from playground.cli import parse_args
from playground.constraints.backends import EngineRefusal
from playground.constraints.backends.outlines_core import OUTLINES_CORE_MAX_REPEAT, check_bounds, max_repetition
from playground.constraints.compile_pool import CompileLimits


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("abc", 1),
        ("[a-z]{1,100000}", 100000),
        ("a{5,}", 5),
        ("a{3}", 3),
        ("(a{1,10}){2}", 20),
        ("((a{2}){3}|b{7}){2}", 14),
        ("([a-z]{1,1000}){1,1000}", 1_000_000),
        ("x{2}(y)z{3}", 3),
        (r"\{1000}", 1),
        ("[{]{9}x", 9),
        ("[]{}]{4}", 4),
        ("[^]{]{6}", 6),
    ],
)
def test_max_repetition_multiplies_nested_counts(pattern, expected):
    assert max_repetition(pattern) == expected


def test_outlines_core_refuses_counts_it_would_unroll():
    with pytest.raises(EngineRefusal, match=f"up to 100000 exceeds its limit of {OUTLINES_CORE_MAX_REPEAT}") as info:
        check_bounds("regex", "[a-z]{1,100000}")
    assert info.value.kind == "unsupported"
    check_bounds("regex", "[a-z]{1,20}")


def test_outlines_core_bound_applies_to_the_regex_a_schema_becomes():
    with pytest.raises(EngineRefusal, match="up to 50000"):
        check_bounds("json_schema", '{"type": "string", "maxLength": 50000}')


def test_compile_limit_flags():
    args = parse_args(["--compile-timeout", "3", "--compile-memory", "256", "--compile-workers", "3"])
    assert (args.compile_timeout, args.compile_memory, args.compile_workers) == (3.0, 256, 3)
    defaults = parse_args([])
    assert CompileLimits(defaults.compile_timeout, defaults.compile_memory, defaults.compile_workers) == CompileLimits()


@pytest.mark.parametrize("flags", [["--compile-memory", "10"], ["--compile-workers", "0"], ["--compile-memory", "x"]])
def test_compile_limit_flags_refuse_nonsense(flags, capsys):
    with pytest.raises(SystemExit):
        parse_args(flags)
    assert flags[0] in capsys.readouterr().err
