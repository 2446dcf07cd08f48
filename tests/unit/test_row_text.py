"""A row's text decoded as its tokens arrive (runner.RowText) is the whole row's text, byte for byte, at every
token: characters split across tokens, special tokens, drafts undone; tokenizers whose text does not join decode
the whole row."""

from __future__ import annotations

import random

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from playground.decoding.reasoning import ReasoningFormat, ReasoningPlan
from playground.decoding.runner import RowText, text_joins

CORPUS = [
    'Hello world, café au lait. Ünïcödé and 中文字符 and emoji 😀🎉 in JSON: {"name": "Zoë", "ok": true}',
    "naïve résumé — ‘quotes’ “double” … ½ € ¥ ✓ ✗ 🚲 🇫🇷",
    "The quick brown fox jumps over the lazy dog.\n\tindented\r\n  spaces  ",
]


def trained(pre_tokenizer, decoder, normalizer=None, **kwargs) -> PreTrainedTokenizerFast:
    """A small BPE tokenizer trained here (no hub): merges across multi-byte characters, and special tokens."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer, tok.decoder = pre_tokenizer, decoder
    if normalizer is not None:
        tok.normalizer = normalizer
    alphabet = pre_tokenizers.ByteLevel.alphabet() if isinstance(decoder, decoders.ByteLevel) else []
    trainer = trainers.BpeTrainer(vocab_size=420, initial_alphabet=alphabet, special_tokens=["<|end|>", "<|start|>"])
    tok.train_from_iterator(CORPUS * 4, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|end|>", bos_token="<|start|>", **kwargs)


@pytest.fixture(scope="module")
def byte_level() -> PreTrainedTokenizerFast:
    return trained(pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel())


def whole(tokenizer):
    calls = []

    def decode(ids: list[int]) -> str:
        calls.append(len(ids))
        return tokenizer.decode(ids, skip_special_tokens=True)

    return decode, calls


def test_a_byte_level_row_decodes_only_its_new_tokens_and_matches_the_whole_text(byte_level) -> None:
    assert text_joins(byte_level)
    decode, calls = whole(byte_level)
    text = RowText(decode, joins=True)
    rng = random.Random(7)
    vocab = len(byte_level)  # the byte-level alphabet: random ids split characters across tokens
    ids: list[int] = []
    for _ in range(600):
        if ids and rng.random() < 0.1:  # a draft undone: the row goes back a few tokens
            del ids[len(ids) - rng.randint(1, min(4, len(ids))) :]
        ids.append(rng.randrange(vocab))
        assert text(ids) == byte_level.decode(ids, skip_special_tokens=True)
    assert any("\ufffd" in byte_level.decode([i]) for i in ids)  # split characters were met
    assert sum(calls) < 5 * len(calls)  # a few ids a call, not the whole row (~300 ids a call)


def test_another_row_s_ids_or_a_changed_past_start_over_at_what_they_share(byte_level) -> None:
    decode, _ = whole(byte_level)
    text = RowText(decode, joins=True)
    row = byte_level("café 中文 😀 done", add_special_tokens=False).input_ids
    for n in range(1, len(row) + 1):
        text(row[:n])
    for ids in (row[:3] + row[5:], row[::-1], [], row, row[:-1] + [row[0]]):
        assert text(ids) == byte_level.decode(ids, skip_special_tokens=True)


def test_a_text_that_ends_in_a_written_replacement_character_stays_exact(byte_level) -> None:
    """U+FFFD the row writes (EF BF BD) is never held as if a character were cut: it is decoded again."""
    decode, _ = whole(byte_level)
    text = RowText(decode, joins=True)
    ids: list[int] = []
    for piece in ("ok \ufffd", " then", " \ufffd", "é"):
        ids += byte_level(piece, add_special_tokens=False).input_ids
        assert text(ids) == byte_level.decode(ids, skip_special_tokens=True)


def test_kept_markup_and_a_thinking_model_s_delimiters_join_too() -> None:
    """Tokens decoded as they are (an added `<tool_call>`, special tokens the text keeps) cut the bytes around them
    in the whole row's text as well: a tool call's markup (skip_special_tokens=False, as runner.text keeps it) and
    a reasoning plan's delimiters (kept even where special) give the whole row's text at every token."""
    tokenizer = trained(pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel())
    tokenizer.add_tokens(["<tool_call>"])
    tokenizer.add_special_tokens({"additional_special_tokens": ["<think>", "</think>"]})
    marks = [tokenizer.convert_tokens_to_ids(t) for t in ("<tool_call>", "<think>", "</think>")]
    plan = ReasoningPlan(
        ReasoningFormat("test", "<think>", "</think>"),
        tokenizer,
        [],
        [],
        None,
        False,
        False,
        keep={marks[1]: "<think>", marks[2]: "</think>"},
    )
    kept = lambda ids: tokenizer.decode(ids, skip_special_tokens=False)  # noqa: E731
    for decode in (kept, plan.decode):
        text, rng, ids = RowText(decode, joins=True), random.Random(11), []
        for _ in range(400):
            if ids and rng.random() < 0.15:
                del ids[len(ids) - rng.randint(1, min(4, len(ids))) :]
            ids.append(rng.choice(marks) if rng.random() < 0.15 else rng.randrange(len(tokenizer) - 3))
            assert text(ids) == decode(ids)
        assert set(marks) <= set(ids)


def test_tokenizers_whose_text_does_not_join_decode_the_whole_row() -> None:
    metaspace = trained(pre_tokenizers.Metaspace(), decoders.Metaspace())  # SentencePiece: a first space dropped
    ids = metaspace("hello world again", add_special_tokens=False).input_ids
    k = next(k for k in range(1, len(ids)) if metaspace.convert_ids_to_tokens(ids[k]).startswith("\u2581"))
    assert metaspace.decode(ids[:k]) + metaspace.decode(ids[k:]) != metaspace.decode(ids)  # " world" lost its space
    assert not text_joins(metaspace)
    decode, calls = whole(metaspace)
    text = RowText(decode, joins=False)
    for n in range(1, len(ids) + 1):
        assert text(ids[:n]) == metaspace.decode(ids[:n], skip_special_tokens=True)
    assert calls == list(range(1, len(ids) + 1))

    cleaned = trained(
        pre_tokenizers.ByteLevel(add_prefix_space=False),
        decoders.ByteLevel(),
        normalizers.NFC(),
        clean_up_tokenization_spaces=True,
        clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output=True,
    )
    assert not text_joins(cleaned)  # " ," -> "," across two tokens
    # transformers leaves a BPE model's text uncleaned unless told otherwise (Llama 3's config asks for a clean-up)
    uncleaned = trained(
        pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel(), clean_up_tokenization_spaces=True
    )
    assert text_joins(uncleaned)
    assert uncleaned.decode(uncleaned("a , b .", add_special_tokens=False).input_ids) == "a , b ."

    class Own(PreTrainedTokenizerFast):
        def _decode(self, *args, **kwargs) -> str:
            return super()._decode(*args, **kwargs).strip()

    own = Own(tokenizer_object=trained(pre_tokenizers.ByteLevel(), decoders.ByteLevel()).backend_tokenizer)
    assert not text_joins(own)
