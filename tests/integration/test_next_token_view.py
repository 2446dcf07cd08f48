"""The next-token view scores through the decoder's own pipeline, EOS gate included."""

from __future__ import annotations

from playground.types import ChatMessage, GenerateParameters

ASK = [ChatMessage(role="user", content="Reply with the number 5 and nothing else.")]


def _eos_in(tokens, eos_ids: set[int]) -> bool:
    return any(t.id in eos_ids for t in tokens)


def test_view_refuses_eos_where_the_decoder_does(engine):
    # xgrammar ignores `not`, so its mask allows EOS after "15"; the final check refuses "15" and the
    # JSON EOS gate takes EOS away, in decoding and in the view alike.
    eos_ids = engine.runner.eos_ids
    for refused, gated in (({"const": 15}, True), ({"const": 99}, False)):
        schema = {"type": "integer", "not": refused}
        params = GenerateParameters(
            grammar={"type": "json", "value": schema}, constraint_engine="xgrammar", max_new_tokens=3, top_n_tokens=20
        )
        decoded = engine.generate(ASK, params)
        assert [t.text for t in decoded.best.tokens[:2]] == ["1", "5"]
        after_15 = decoded.best.tokens[2]
        assert _eos_in(after_15.raw_top_tokens, eos_ids)  # the model would like to stop here
        view = engine.next_token_distribution(ASK, params, prefix="15", top_k=20)
        eos = [c for c in view.candidates if c.id in eos_ids]
        assert eos, "EOS is among the view's candidates"
        assert eos[0].allowed == _eos_in(after_15.top_tokens, eos_ids) == (not gated)
