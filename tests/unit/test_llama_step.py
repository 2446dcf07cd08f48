"""The lean step on a tiny random Llama (no download): the model's own logits and cache, or no step at all.

Its speed is benchmarks/step.py's and benchmarks/decode.py's; here only that it computes what the model's
forward computes (one token or several per row, ragged batches, with the C kernel's attention or sdpa), that
the steps take it, and that it stands aside wherever it could differ.
"""

from __future__ import annotations

import copy

import pytest
import torch
from transformers.cache_utils import DynamicSlidingWindowLayer

from playground.decoding.batch import BatchCache
from playground.decoding.runner import ModelRunner
from playground.models import LoadedModel, quant_weights
from playground.models.llama_step import LlamaStep, _allowed
from tests.support import TinyTokenizer, tiny_llama

VOCAB = 64
PROMPT = [5, 9, 3, 17, 30, 11]


def runner_for(model: torch.nn.Module) -> ModelRunner:
    return ModelRunner(LoadedModel("tiny", model, TinyTokenizer((0, 2)), "cpu", "float32", 0.0))


def logprobs(logits: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.reshape(-1).float(), dim=-1)


@pytest.mark.parametrize(
    "config",
    [{}, {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}}, {"attention_bias": True}],
    ids=["default", "scaled-rope", "biases"],
)
def test_the_step_gives_the_models_logprobs_and_cache(config: dict) -> None:
    runner = runner_for(tiny_llama(vocab_size=VOCAB, **config))
    step = LlamaStep.for_model(runner.model)
    assert step is not None
    with torch.inference_mode():
        _, ours = runner.forward(runner.ids(PROMPT))
        theirs = copy.deepcopy(ours)
        for position, token in enumerate([7, 40, 2, 63], start=len(PROMPT)):
            got = step(token, position, ours)
            want, theirs = runner.forward(runner.ids([token]), theirs)
            torch.testing.assert_close(logprobs(got), logprobs(want), atol=1e-4, rtol=0)
        for mine, model_s in zip(ours.layers, theirs.layers):
            torch.testing.assert_close(mine.keys, model_s.keys, atol=1e-5, rtol=0)
            torch.testing.assert_close(mine.values, model_s.values, atol=1e-5, rtol=0)


def test_a_lone_rows_steps_take_it_one_token_or_several() -> None:
    model = tiny_llama(vocab_size=VOCAB)
    runner, reference = runner_for(model), runner_for(copy.deepcopy(model))
    forwards = []
    model.register_forward_pre_hook(lambda *_: forwards.append(1))  # after the runner chose its step
    batch = BatchCache(runner)
    with torch.inference_mode():
        batch.adopt(runner.forward(runner.ids(PROMPT))[1])
        forwards.clear()
        seen = list(PROMPT)
        for tokens in ([7], [8, 9, 40], [2]):  # fast-forwarded tokens: several positions in one step, causal
            got = batch.forward([tokens])[0]
            seen += tokens
            want = reference.forward(reference.ids(seen), keep=len(tokens))[0][0]
            for k in range(len(tokens)):
                torch.testing.assert_close(logprobs(got[k]), logprobs(want[k]), atol=1e-4, rtol=0)
        assert forwards == []  # the lean step ran, not the model's forward


@pytest.fixture(scope="module")
def attend(tmp_path_factory: pytest.TempPathFactory):
    """The C kernel's attention (quant_weights.Kernels.attend), each call's row and query counts recorded."""
    kernels = quant_weights.build(tmp_path_factory.mktemp("kernels"))
    assert kernels is not None, "qlinear.c must compile here (make test installs a C compiler)"
    calls: list[tuple[int, int]] = []

    def counted(q, keys, values, allowed, scale):
        calls.append((q.shape[0], q.shape[2]))
        return kernels.attend(q, keys, values, allowed, scale)

    counted.calls = calls
    return counted


def test_with_the_kernel_s_attention_one_token_a_row_still_gets_the_model_s_logits(attend) -> None:
    """Steps of one new token per row (a lone row's, a ragged batch's) take the kernel's attention instead of
    sdpa; steps of several tokens keep sdpa; every logit stays the model's."""
    model = tiny_llama(vocab_size=VOCAB, head_dim=16)  # (a head a whole number of vectors, as real models have)
    runner, reference = runner_for(model), runner_for(copy.deepcopy(model))
    runner._lean_step = LlamaStep.for_model(model, attend)
    reference._lean_step = None
    with torch.inference_mode():
        mine, theirs = ragged_batches(runner, reference, [PROMPT, PROMPT[:2], [4, 8, 15, 16]])
        attend.calls.clear()
        for tokens in ([[7], [40], [2]], [[8, 9, 63], [3], [5, 6]], [[63], [1], [9]]):
            for row_got, row_want in zip(mine.forward(tokens), theirs.forward(tokens)):
                for k in range(row_got.shape[0]):
                    torch.testing.assert_close(logprobs(row_got[k]), logprobs(row_want[k]), atol=1e-4, rtol=0)
        same_real_columns(mine, theirs)
        assert attend.calls == [(3, 1)] * 2 * model.config.num_hidden_layers  # the two one-token steps, every layer

        attend.calls.clear()
        _, ours = runner.forward(runner.ids(PROMPT))
        _, plain = reference.forward(reference.ids(PROMPT))
        for position, token in enumerate([7, 40, 2], start=len(PROMPT)):
            got = runner.lone_step(token, position, ours)
            want, plain = reference.forward(reference.ids([token]), plain)
            torch.testing.assert_close(logprobs(got), logprobs(want), atol=1e-4, rtol=0)
        assert attend.calls == [(1, 1)] * 3 * model.config.num_hidden_layers

    declined = []  # where the kernel declines (None), sdpa serves the same step
    step = LlamaStep.for_model(model, lambda *args: declined.append(1))
    with torch.inference_mode():
        _, ours = runner.forward(runner.ids(PROMPT))
        got = step(7, len(PROMPT), ours)
        want = reference.forward(reference.ids([*PROMPT, 7]))[0]
    torch.testing.assert_close(logprobs(got), logprobs(want), atol=1e-4, rtol=0)
    assert len(declined) == model.config.num_hidden_layers


def test_it_stands_aside_where_it_could_differ() -> None:
    hooked = tiny_llama(vocab_size=VOCAB)
    hooked.model.layers[0].mlp.register_forward_hook(lambda *_: None)
    assert LlamaStep.for_model(hooked) is None
    assert LlamaStep.for_model(tiny_llama(vocab_size=VOCAB).to("meta")) is None

    model = tiny_llama(vocab_size=VOCAB)
    step, runner = LlamaStep.for_model(model), runner_for(model)
    with torch.inference_mode():
        _, cache = runner.forward(runner.ids(PROMPT))
        sliding = copy.deepcopy(cache)
        sliding.layers[1] = DynamicSlidingWindowLayer(sliding_window=4)
        assert step(7, len(PROMPT), sliding) is None
        model.model.layers[1].self_attn.q_proj = torch.nn.Sequential(model.model.layers[1].self_attn.q_proj)
        assert step(7, len(PROMPT), cache) is None  # an adapter's layer in place of a projection
        assert cache.get_seq_length() == len(PROMPT)  # and the cache is left as it was

    model = tiny_llama(vocab_size=VOCAB)
    step, runner = LlamaStep.for_model(model), runner_for(model)
    with torch.inference_mode():
        half = runner.fresh_cache()  # a fresh cache (a first prefill's) takes the step, one half filled does not
        half.layers[0].update(*[torch.zeros(1, model.config.num_key_value_heads, 2, model.config.head_dim)] * 2)
        assert step.rows([[7, 8]], torch.tensor([[0, 1]]), half) is None
        assert [layer.is_initialized for layer in half.layers] == [True] + [False] * (len(half.layers) - 1)
        assert step.rows([[7, 8]], torch.tensor([[0, 1]]), runner.fresh_cache()) is not None


def ragged_batches(runner: ModelRunner, reference: ModelRunner, prompts: list[list[int]]) -> list[BatchCache]:
    """The prompts prefilled one by one and joined into one batch, on each runner (the shorter padded on the left)."""
    batches = []
    for each in (runner, reference):
        batch = BatchCache(each)
        for prompt in prompts:
            row = BatchCache(each)
            row.adopt(each.forward(each.ids(prompt))[1])
            batch.merge(row)
        batches.append(batch)
    return batches


def same_real_columns(mine: BatchCache, theirs: BatchCache) -> None:
    """The two batches' keys and values agree where a row holds a token (padding's columns are nobody's: the lean
    step leaves zeros there, the model's forward a pad token's keys)."""
    assert torch.equal(mine.mask, theirs.mask)
    real = mine.mask.bool()[:, None, :, None]
    for a, b in zip(mine.kv.layers, theirs.kv.layers):
        torch.testing.assert_close(a.keys * real, b.keys * real, atol=1e-5, rtol=0)
        torch.testing.assert_close(a.values * real, b.values * real, atol=1e-5, rtol=0)


def test_a_batchs_ragged_rows_take_it_and_get_the_models_logits_and_cache() -> None:
    model = tiny_llama(vocab_size=VOCAB)
    runner, reference = runner_for(model), runner_for(copy.deepcopy(model))
    forwards, scored = [], []
    model.register_forward_pre_hook(lambda *_: forwards.append(1))  # after the runner chose its step
    model.lm_head.register_forward_pre_hook(lambda _, args: scored.append(args[0].shape[:-1].numel()))
    with torch.inference_mode():
        mine, theirs = ragged_batches(runner, reference, [PROMPT, PROMPT[:2], [4, 8, 15, 16]])
        assert not bool(mine.mask.all())
        forwards.clear()
        scored.clear()
        # one token a row, then ragged runs of tokens (padded on the right), then one again
        for tokens in ([[7], [40], [2]], [[8, 9, 63], [3], [5, 6]], [[63], [1], [9]]):
            got = mine.forward(tokens)
            reference._lean_step = None  # the reference takes the model's own forward
            want = theirs.forward(tokens)
            for row_got, row_want in zip(got, want):
                assert row_got.shape == row_want.shape
                for k in range(row_got.shape[0]):
                    torch.testing.assert_close(logprobs(row_got[k]), logprobs(row_want[k]), atol=1e-4, rtol=0)
        assert forwards == []  # the lean step ran, not the model's forward
        assert scored == [3, 6, 3]  # the ragged step scored its 6 tokens, not its 9 places
        same_real_columns(mine, theirs)


@pytest.mark.parametrize("prefixes", [[PROMPT, PROMPT[:3], None], [None, None, None]], ids=["cached", "fresh"])
def test_a_ragged_prefill_takes_it_and_scores_each_rows_last_token(prefixes: list) -> None:
    """Several prompts joining at once (batch.py's prefill: their new tokens padded on the left), after what the
    prefix cache held of them or from nothing: each row's last logits and the cache are the model's, and only the
    real tokens reach the linear layers."""
    model = tiny_llama(vocab_size=VOCAB)
    runner, reference = runner_for(model), runner_for(copy.deepcopy(model))
    reference._lean_step = None
    forwards, scored, projected = [], [], []
    model.register_forward_pre_hook(lambda *_: forwards.append(1))
    model.lm_head.register_forward_pre_hook(lambda _, args: scored.append(args[0].shape[:-1].numel()))
    down = model.model.layers[0].mlp.down_proj
    down.forward = lambda x, forward=down.forward: projected.append(x.shape[:-1].numel()) or forward(x)
    tokens = [[7, 8], [40, 2, 63, 1], [9]]
    with torch.inference_mode():
        batches = []
        for each in (runner, reference):
            cached = [None if p is None else each.forward(each.ids(p))[1] for p in prefixes]
            batch = BatchCache(each)
            for seen in (forwards, scored, projected):
                seen.clear()
            batches.append((batch, batch.prefill(list(zip(cached, tokens)))))
            if each is runner:
                assert forwards == []  # the lean step ran, not the model's forward
                assert scored == [3] and projected == [7]  # the 7 tokens through the linears, not the 12 places
        (mine, got), (theirs, want) = batches
        assert got.shape == want.shape == (3, VOCAB)
        for row_got, row_want in zip(got, want):
            torch.testing.assert_close(logprobs(row_got), logprobs(row_want), atol=1e-4, rtol=0)
        same_real_columns(mine, theirs)
        # and the batch decodes on from there as the model's own forward would
        reference._lean_step = None
        for row_got, row_want in zip(mine.forward([[5], [6], [7]]), theirs.forward([[5], [6], [7]])):
            torch.testing.assert_close(logprobs(row_got), logprobs(row_want), atol=1e-4, rtol=0)


def test_a_padding_query_that_would_see_nothing_sees_itself_and_the_rest_see_what_they_did() -> None:
    """A prefill's left padding with nothing cached sees no key: sdpa gives NaN for it on older torch (which would
    reach the cache), so it sees its own; every other query keeps exactly the causal mask of its row's tokens."""
    mask = torch.tensor([[1, 1, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1]])  # 2 cached columns, then 4 new ones
    allowed = _allowed(mask, cached=2, n=2, width=4)[:, 0]
    assert bool(allowed.any(-1).all())
    causal = torch.ones(4, 6, dtype=torch.bool).tril(diagonal=2)
    assert torch.equal(allowed[0], causal & mask[0].bool())
    assert torch.equal(allowed[1, 2:], (causal & mask[1].bool())[2:])  # its tokens see what they saw
    assert allowed[1, :2].nonzero().tolist() == [[0, 2], [1, 3]]  # its padding, only itself


def test_a_long_cache_grows_in_place_and_a_shared_view_is_never_written_through(monkeypatch) -> None:
    from playground.models import llama_step

    monkeypatch.setattr(llama_step, "ROOM_FROM", len(PROMPT) + 2)  # the tiny prompt counts as long after two steps
    model = tiny_llama(vocab_size=VOCAB)
    runner, reference = runner_for(model), runner_for(copy.deepcopy(model))
    step = LlamaStep.for_model(model)
    with torch.inference_mode():
        _, ours = runner.forward(runner.ids(PROMPT))
        theirs = copy.deepcopy(ours)
        tokens = [7, 40, 2, 63, 1, 9, 30, 12]
        for position, token in enumerate(tokens, start=len(PROMPT)):
            got = step(token, position, ours)
            want, theirs = reference.forward(reference.ids([token]), theirs)
            torch.testing.assert_close(logprobs(got), logprobs(want), atol=1e-4, rtol=0)
        layer = ours.layers[0]
        assert not layer.keys.is_contiguous()  # a view of a buffer with room: no copy per step
        assert layer.keys.untyped_storage().nbytes() > layer.keys.numel() * layer.keys.element_size()
        for mine, model_s in zip(ours.layers, theirs.layers):
            torch.testing.assert_close(mine.keys, model_s.keys, atol=1e-5, rtol=0)
            torch.testing.assert_close(mine.values, model_s.values, atol=1e-5, rtol=0)

        # a copy holding the same views (a shallow copy of the cache): neither writes into what the other sees
        shared = copy.copy(ours)
        shared.layers = [copy.copy(layer) for layer in ours.layers]
        before = [(layer.keys.clone(), layer.values.clone()) for layer in shared.layers]
        length = ours.get_seq_length()
        step(5, length, ours)
        step(6, length, shared)  # another token at the same position, from the same cache
        step(8, length + 1, ours)
        for layer, (keys, values) in zip(shared.layers, before):
            assert torch.equal(layer.keys[:, :, :length], keys) and torch.equal(layer.values[:, :, :length], values)
        mine_alone = copy.deepcopy(theirs)
        reference.forward(reference.ids([6]), mine_alone)
        for layer, model_s in zip(shared.layers, mine_alone.layers):
            torch.testing.assert_close(layer.keys, model_s.keys, atol=1e-5, rtol=0)
        theirs = reference.forward(reference.ids([5, 8]), theirs)[1]
        for layer, model_s in zip(ours.layers, theirs.layers):
            torch.testing.assert_close(layer.keys, model_s.keys, atol=1e-5, rtol=0)


def test_outside_inference_mode_a_grown_cache_concatenates_again(monkeypatch) -> None:
    from playground.models import llama_step

    monkeypatch.setattr(llama_step, "ROOM_FROM", 1)
    model = tiny_llama(vocab_size=VOCAB)
    runner, step = runner_for(model), LlamaStep.for_model(model)
    with torch.inference_mode():
        _, cache = runner.forward(runner.ids(PROMPT))
        step(7, len(PROMPT), cache)
        assert not cache.layers[0].keys.is_contiguous()  # grown in place
    with torch.no_grad():  # a generator resumed on a thread that left inference mode behind
        assert step(40, len(PROMPT) + 1, cache) is not None
    assert cache.get_seq_length() == len(PROMPT) + 2 and cache.layers[0].keys.is_contiguous()


def test_a_draft_dropped_from_a_long_cache_is_written_over_in_place_and_a_view_held_before_it_is_untouched(
    monkeypatch,
) -> None:
    """A refused draft's positions go (llama_step.crop); the next step writes over them in the same buffer instead
    of copying the cache, and gives what a cache that never saw the draft gives. A view of the cache from before
    the draft, held meanwhile (as a prefix cache holds one), keeps its keys and values."""
    from playground.models import llama_step

    monkeypatch.setattr(llama_step, "ROOM_FROM", 1)
    model = tiny_llama(vocab_size=VOCAB)
    runner, reference = runner_for(model), runner_for(copy.deepcopy(model))
    step = LlamaStep.for_model(model)
    with torch.inference_mode():
        _, ours = runner.forward(runner.ids(PROMPT))
        step(7, len(PROMPT), ours)  # written into a buffer with room
        prompt_view = copy.copy(ours)  # what the prefix cache holds: the same views
        prompt_view.layers = [copy.copy(layer) for layer in ours.layers]
        kept = [(layer.keys.clone(), layer.values.clone()) for layer in prompt_view.layers]
        buffers = [
            (layer.keys.untyped_storage().data_ptr(), layer.values.untyped_storage().data_ptr())
            for layer in ours.layers
        ]
        length = ours.get_seq_length()
        step(40, length, ours)  # a lone row's draft and the tokens after it...
        step(2, length + 1, ours)
        for layer in ours.layers:  # ...refused
            llama_step.crop(layer, 0)  # (nothing to drop: nothing changes)
            llama_step.crop(layer, 2)
        got = step(63, length, ours)

        _, theirs = reference.forward(reference.ids(PROMPT))
        reference.forward(reference.ids([7]), theirs)
        want, theirs = reference.forward(reference.ids([63]), theirs)
    torch.testing.assert_close(logprobs(got), logprobs(want), atol=1e-4, rtol=0)
    after = [
        (layer.keys.untyped_storage().data_ptr(), layer.values.untyped_storage().data_ptr()) for layer in ours.layers
    ]
    assert after == buffers  # no new buffer
    for mine, model_s in zip(ours.layers, theirs.layers):
        torch.testing.assert_close(mine.keys, model_s.keys, atol=1e-5, rtol=0)
        torch.testing.assert_close(mine.values, model_s.values, atol=1e-5, rtol=0)
    for layer, (keys, values) in zip(prompt_view.layers, kept):
        assert torch.equal(layer.keys, keys) and torch.equal(layer.values, values)
