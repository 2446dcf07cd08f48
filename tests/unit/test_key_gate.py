"""The key gate: no key twice in one JSON object, read off the row's text as it grows (no model needed)."""

from __future__ import annotations

import torch

from playground.decoding.key_gate import KeyGate

VOCAB = ['"', '",', '":', "a", 'a"', 'a":', "ab", "b", 'b"', '"a"', ' "a"', '"b"', "}", ",", "1", ' "']


class Runner:
    vocab_size = len(VOCAB)
    special_ids: set[int] = set()

    def token_text(self, token_id: int) -> str:
        return VOCAB[token_id]


def refused(gate: KeyGate, text: str) -> set[str]:
    out = gate.apply(torch.zeros(len(VOCAB)), text)
    return {VOCAB[i] for i in range(len(VOCAB)) if not torch.isfinite(out[i])}


def test_inside_a_key_the_tokens_that_close_it_as_a_written_key_are_refused() -> None:
    gate = KeyGate(Runner())
    assert refused(gate, '{"a": 1, "') == {'a"', 'a":'}  # `a` alone may still become `ab`
    assert refused(gate, '{"a": 1, "a') == {'"', '",', '":', '"a"', '"b"'}  # whatever follows the closing quote
    assert refused(gate, '{"a": 1, "ab') == set()  # no written key starts so
    assert refused(gate, '{"a": 1, "ab": 2, "') == {'a"', 'a":'}  # (`ab` would close as `ab"`: no such token)


def test_where_a_key_starts_a_token_that_writes_a_written_key_whole_is_refused() -> None:
    gate = KeyGate(Runner())
    assert refused(gate, '{"a": 1,') == {'"a"', ' "a"'}
    assert refused(gate, "{") == set()  # nothing written yet


def test_only_the_object_being_written_counts_and_values_are_not_keys() -> None:
    gate = KeyGate(Runner())
    assert refused(gate, '{"a": {"b": 1, "') == {'b"'}
    assert refused(gate, '{"a": "') == set()  # a string value may say anything
    assert refused(gate, '{"a": {"b": 1}, "') == {'a"', 'a":'}


def test_a_text_that_changed_behind_is_read_again_and_a_non_json_text_is_left_alone() -> None:
    gate = KeyGate(Runner())
    assert refused(gate, '{"a": 1, "') == {'a"', 'a":'}
    assert refused(gate, '{"b": 1, "') == {'b"'}  # a refused draft took the text back: scanned from the start
    assert refused(gate, "not json") == set()
    masked = torch.zeros(len(VOCAB))
    masked[VOCAB.index('a"')] = float("-inf")
    masked[VOCAB.index('a":')] = float("-inf")
    assert gate.apply(masked, '{"a": 1, "') is masked  # the mask refused them already: nothing to copy


def test_keys_are_read_with_their_escapes_and_an_escape_under_way_closes_nothing() -> None:
    gate = KeyGate(Runner())
    assert refused(gate, '{"a\\nb": 1, "a?b') == set()  # `a\nb` is no `a?b`
    assert refused(gate, '{"\\u0061": 1, "') == {'a"', 'a":'}  # `\u0061` is `a`
    assert refused(gate, '{"a": 1, "a\\') == set()  # the next `"` is the key's own
    assert refused(gate, '{"a\\"b": 1, "a') == set()  # its rest is written `\"b"`: the quote alone closes `a`


def test_a_character_still_cut_is_read_once_whole() -> None:
    gate = KeyGate(Runner())
    assert refused(gate, '{"a": 1, "\ufffd') == {'a"', 'a":'}
    assert gate._fed == '{"a": 1, "'  # (the cut character left out: the next step goes on from here)
