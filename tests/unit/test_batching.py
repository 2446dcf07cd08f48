"""Continuous batching on a tiny random Llama (no download): the batch's KV cache and the scheduler.

Every row of a batch must see exactly what it would see alone, whatever its neighbours' lengths, widths,
arrivals, departures, failures and constraints; the figures of speed live in benchmarks/serve.py.
"""

from __future__ import annotations

import contextlib
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from transformers.cache_utils import DynamicCache, DynamicSlidingWindowLayer

from playground.constraints import Constraint
from playground.constraints.backends.bitmask import BitmaskProcessor
from playground.decoding import sampling
from playground.decoding.batch import BatchCache, can_batch
from playground.decoding.chooser import TokenChooser
from playground.decoding.rows import Decode, Row
from playground.decoding.runner import ModelRunner
from playground.decoding.scheduler import Job, Scheduler
from playground.decoding.stopping import StopCriteria
from playground.errors import ProcessorError
from playground.models import LoadedModel
from playground.types import GenerateParameters
from tests.support import TinyTokenizer, tiny_llama

ROOT = Path(__file__).resolve().parents[2]
VOCAB = 64
EOS = (0, 2)  # the tokenizer's and the generation config's


@pytest.fixture(scope="module")
def runner() -> ModelRunner:
    model = tiny_llama(vocab_size=VOCAB, max_position_embeddings=512)
    loaded = LoadedModel("tiny", model, TinyTokenizer(EOS), "cpu", "float32", 0.0)
    return ModelRunner(loaded)


def alone(runner: ModelRunner, ids: list[int]) -> torch.Tensor:
    """The last position's logits of `ids` run as a batch of one, from scratch."""
    with torch.inference_mode():
        return runner.forward(runner.ids(ids))[0][0, -1].float()


def prefilled(runner: ModelRunner, ids: list[int]):
    with torch.inference_mode():
        return runner.forward(runner.ids(ids))[1]


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def joined(runner: ModelRunner, prompts: list[list[int]], copies: list[int] | None = None) -> BatchCache:
    """A batch the way the scheduler builds it from requests prefilled one by one."""
    batch = BatchCache(runner)
    for prompt, n in zip(prompts, copies or [1] * len(prompts)):
        one = BatchCache(runner)
        one.adopt(prefilled(runner, prompt))
        one.keep([0] * n)
        batch.merge(one)
    return batch


# --- the batch's KV cache ------------------------------------------------------------------


def test_rows_of_different_lengths_decode_as_they_would_alone(runner):
    prompts = [[5, 6, 7, 8, 9], [10, 11, 12, 13, 14, 15, 16, 17, 18], [20, 21, 22]]
    batch = joined(runner, prompts, [1, 1, 2])
    rows = [list(prompts[0]), list(prompts[1]), list(prompts[2]), list(prompts[2])]
    assert batch.rows == 4
    rng = random.Random(0)
    with torch.inference_mode():
        for _ in range(4):
            new = [[rng.randrange(3, VOCAB)] for _ in rows]
            for row, tokens, logits in zip(rows, new, batch.forward(new)):
                row.extend(tokens)
                close(logits[-1], alone(runner, row))


def test_rows_feed_several_tokens_in_one_step_and_each_position_is_scored(runner):
    """Fast-forwarded tokens: one row runs three, its neighbour one; padding is masked, not attended."""
    rows = [[5, 6, 7], [9, 10, 11, 12, 13]]
    batch = joined(runner, rows)
    with torch.inference_mode():
        for new in ([[30, 31, 32], [40]], [[33], [41, 42]], [[34], [43]]):
            for row, tokens, logits in zip(rows, new, batch.forward(new)):
                assert logits.shape[0] == len(tokens)
                for k, token in enumerate(tokens):
                    row.append(token)
                    close(logits[k], alone(runner, row))


def test_a_row_that_leaves_takes_its_columns_and_the_rest_go_on(runner):
    rows = [[5, 6, 7], [8, 9, 10, 11, 12, 13, 14, 15], [16, 17, 18, 19]]
    batch = joined(runner, rows)
    with torch.inference_mode():
        batch.forward([[40], [41], [42]])
        for row, token in zip(rows, (40, 41, 42)):
            row.append(token)
        batch.keep([2, 0])  # the longest row leaves; the order of the others changes
        rows = [rows[2], rows[0]]
        assert batch.mask.shape[1] == max(len(r) for r in rows)  # its left padding went with it
        for new in ([[43], [44]], [[45], [46]]):
            for row, tokens, logits in zip(rows, new, batch.forward(new)):
                row.extend(tokens)
                close(logits[-1], alone(runner, row))
        batch.keep([])
    assert batch.rows == 0 and batch.kv is None


def test_a_rows_own_cache_continues_like_the_row_alone(runner):
    """What the prefix cache keeps from a finished row: its columns only, without its neighbours' padding."""
    rows = [[5, 6, 7, 8, 9, 10], [11, 12]]
    batch = joined(runner, rows)
    with torch.inference_mode():
        batch.forward([[20], [21, 22, 23]])  # holes in row 0's columns
        rows[0].append(20)
        rows[1].extend([21, 22, 23])
        for index, row in enumerate(rows):
            kv = batch.row_cache(index)
            assert kv.get_seq_length() == len(row)
            logits, _ = runner.forward(runner.ids([50]), kv)
            close(logits[0, -1].float(), alone(runner, [*row, 50]))


@pytest.mark.parametrize("cached", [(0, 0, 0), (3, 0, 5), (2, 2, 1), (5, 0, 2)])
def test_prompts_prefilled_together_after_their_cached_prefixes_decode_as_alone(runner, cached):
    """Newcomers share one prefill forward, each after what the prefix cache held of it (or nothing); it is the
    lean step's, even for a row with nothing cached and padding before its tokens, and from nothing at all."""
    prompts = [[5, 6, 7, 8, 9, 10], [11, 12, 13], [14, 15, 16, 17, 18, 19, 20, 21]]
    batch = BatchCache(runner)
    forwards = []
    hook = runner.model.register_forward_pre_hook(lambda *_: forwards.append(1))  # after the runner chose its step
    with torch.inference_mode():
        plans = [(prefilled(runner, p[:n]) if n else None, p[n:]) for p, n in zip(prompts, cached)]
        forwards.clear()
        try:
            prefill = batch.prefill(plans)
        finally:
            hook.remove()
        assert forwards == []
        for prompt, logits in zip(prompts, prefill):
            close(logits, alone(runner, prompt))
        batch.keep([0, 1, 1, 2])  # the second request has best_of 2
        rows = [list(prompts[0]), list(prompts[1]), list(prompts[1]), list(prompts[2])]
        for new in ([[30], [31], [32], [33]], [[34], [35, 36], [37], [38]]):
            for row, tokens, logits in zip(rows, new, batch.forward(new)):
                row.extend(tokens)
                close(logits[-1], alone(runner, row))
        for index, row in enumerate(rows):
            assert batch.row_cache(index).get_seq_length() == len(row)


def test_only_plain_growing_caches_can_be_padded_into_a_batch(runner):
    assert can_batch(prefilled(runner, [5, 6, 7]))
    sliding = DynamicCache()
    sliding.layers = [DynamicSlidingWindowLayer(sliding_window=4)]
    assert not can_batch(sliding)
    assert not can_batch(None)


# --- the scheduler ------------------------------------------------------------------------


def no_eos(ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """Random weights end anywhere; the tests want their full length."""
    scores[:, list(EOS)] = float("-inf")
    return scores


class FailsAt:
    """A processor that raises on its n-th call, as a broken custom processor would."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.n -= 1
        if self.n == 0:
            raise RuntimeError("broken on purpose")
        return scores


class ForcesAfter:
    """Allows only `forced` after `trigger` (a constraint's forced token), anything else otherwise."""

    def __init__(self, trigger: int, forced: list[int]) -> None:
        self.trigger, self.forced = trigger, forced

    def __call__(self, ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        tail = ids[0].tolist()
        for k, token in enumerate(self.forced):  # k forced tokens already follow the trigger
            if tail[len(tail) - 1 - k] == self.trigger and tail[len(tail) - k :] == self.forced[:k]:
                allowed = scores[0, token].clone()
                scores[:] = float("-inf")
                scores[0, token] = allowed
                return scores
        scores[0, self.trigger] += 5.0  # and it likes the trigger
        return scores


def decode_of(runner, prompt, *, tokens=8, processors=(), seed=None, best_of=1, fast_forward=False) -> Decode:
    params = GenerateParameters(max_new_tokens=tokens, do_sample=seed is not None, seed=seed)
    rows = []
    for i in range(best_of):
        generator = torch.Generator().manual_seed(seed + i) if seed is not None else None
        chooser = TokenChooser(
            runner,
            params,
            [no_eos, *processors],
            Constraint.none(),
            len(prompt),
            generator,
            fast_forward=fast_forward,
        )
        rows.append(Row(seed=None, chooser=chooser))
    return Decode(runner, rows, list(prompt), StopCriteria([], tokens, runner.eos_ids))


def tokens_of(job: Job) -> list[tuple[int, int, bool, float]]:
    """(row, token id, forced, logprob) of every token event, once the job is done."""
    return [(e.index, e.token.id, e.token.forced, e.token.logprob) for e in job.events() if not isinstance(e, list)]


def run_alone(runner, make) -> list[tuple[int, int, bool, float]]:
    scheduler = Scheduler(runner, threading.Lock(), max_rows=32)
    job = Job(make())
    scheduler.submit(job)
    return tokens_of(job)


def same(a, b) -> None:
    assert [t[:3] for t in a] == [t[:3] for t in b]
    assert max(abs(x[3] - y[3]) for x, y in zip(a, b)) < 1e-4


@pytest.fixture
def scheduler(runner) -> Scheduler:
    return Scheduler(runner, threading.Lock(), max_rows=32)


def submit_together(scheduler: Scheduler, jobs: list[Job]) -> None:
    """The first job starts; the others join it between its steps (the model lock holds it back meanwhile)."""
    with scheduler.model_lock:
        for job in jobs:
            scheduler.submit(job)


def test_requests_decoded_together_get_what_they_get_alone(runner, scheduler):
    makes = [
        lambda: decode_of(runner, [5, 6, 7], tokens=12),
        lambda: decode_of(runner, [8, 9, 10, 11, 12, 13, 14], tokens=9),
        lambda: decode_of(runner, [15], tokens=10, seed=7, best_of=2),
        lambda: decode_of(runner, [16, 17, 18], tokens=6, seed=3),
    ]
    expected = [run_alone(runner, make) for make in makes]
    jobs = [Job(make()) for make in makes]
    submit_together(scheduler, jobs)
    for job, want in zip(jobs, expected):
        same(tokens_of(job), want)
    assert scheduler.peak_rows == 5  # every request in one batch (best_of 2 is two rows)


def test_requests_arriving_while_a_starting_batch_prefills_join_before_its_first_step(runner, scheduler):
    """A burst of clients: the first prefills while the others arrive. None of them steps before all have joined,
    so none is a step ahead, to be stepped again with fewer rows after the others' last."""
    first = Job(decode_of(runner, [5, 6, 7], tokens=6))
    later = [Job(decode_of(runner, [8, 9], tokens=6)), Job(decode_of(runner, [10, 11, 12, 13], tokens=6, seed=3))]
    prefill = first.decode.prefill

    def others_arrive_meanwhile():
        for job in later:
            scheduler.submit(job)
        return prefill()

    first.decode.prefill = others_arrive_meanwhile
    rows_per_step = []
    step = scheduler._step
    scheduler._step = lambda: (rows_per_step.append(len(scheduler._slots)), step())[1]
    scheduler.submit(first)
    for job in (first, *later):
        assert len(tokens_of(job)) == 6
    assert rows_per_step and set(rows_per_step) == {3}


def test_requests_done_at_their_prefill_leave_while_a_burst_still_joins_and_none_is_left_out(runner):
    """A chain of arrivals, each during the previous one's prefill, longer than the burst loop's bound (max_rows
    more prefills): the ones done at their prefill leave between joins, and every admitted request is joined."""
    scheduler = Scheduler(runner, threading.Lock(), max_rows=2)
    jobs = [Job(decode_of(runner, [5 + k, 6, 7], tokens=1)) for k in range(4)] + [
        Job(decode_of(runner, [8, 9], tokens=4))
    ]
    for job, following in zip(jobs, jobs[1:]):
        prefill = job.decode.prefill

        def next_arrives_meanwhile(prefill=prefill, following=following):
            scheduler.submit(following)
            return prefill()

        job.decode.prefill = next_arrives_meanwhile
    active_at_join = []
    join = scheduler._join
    scheduler._join = lambda batch: (active_at_join.append(len(scheduler._active)), join(batch))[1]
    scheduler.submit(jobs[0])
    got: list[int] = []
    reader = threading.Thread(target=lambda: got.extend(len(tokens_of(job)) for job in jobs), daemon=True)
    reader.start()
    reader.join(60)
    assert got == [1, 1, 1, 1, 4]
    assert active_at_join[:3] == [0, 0, 0]  # each left (done) before the next joined


def test_a_request_that_leaves_early_frees_its_rows_and_the_others_go_on(runner, scheduler):
    def make_long() -> Decode:
        return decode_of(runner, [5, 6, 7], tokens=60)

    want = run_alone(runner, make_long)
    leaving, staying = Job(decode_of(runner, [8, 9], tokens=60)), Job(make_long())
    submit_together(scheduler, [leaving, staying])
    next(e for e in leaving.events() if not isinstance(e, list))
    leaving.cancelled.set()  # what Engine.stream does when its reader stops
    same(tokens_of(staying), want)
    assert scheduler.usage()["requests"] == 0 and scheduler._batch.kv is None


def test_a_request_whose_processor_fails_fails_alone(runner, scheduler):
    def make() -> Decode:
        return decode_of(runner, [5, 6, 7], tokens=10)

    want = run_alone(runner, make)
    broken, fine = Job(decode_of(runner, [8, 9], tokens=10, processors=[FailsAt(4)])), Job(make())
    submit_together(scheduler, [broken, fine])
    with pytest.raises(ProcessorError, match="broken on purpose"):
        tokens_of(broken)
    same(tokens_of(fine), want)


def test_a_best_of_candidate_whose_decoding_fails_leaves_and_the_others_finish(runner, scheduler):
    """One candidate's failure (its constraint's dead end under its seed) failed the whole request; now that row
    stops, the others decode as they would have, and the request fails only when no candidate is left."""

    def make(failing: tuple[int, ...]) -> Decode:
        decode = decode_of(runner, [5, 6, 7], tokens=10, seed=3, best_of=3)
        for i in failing:
            decode.rows[i].chooser.processors = [*decode.rows[i].chooser.processors, FailsAt(4)]
        return decode

    want = run_alone(runner, lambda: make(()))
    for failing in [(1,), (0, 2)]:
        job = Job(make(failing))
        scheduler.submit(job)
        got = tokens_of(job)
        same([t for t in got if t[0] not in failing], [t for t in want if t[0] not in failing])
        for i in failing:
            assert isinstance(job.decode.rows[i].failure, ProcessorError)
            assert len([t for t in got if t[0] == i]) == 3  # its tokens before the failing step
    everyone = Job(make((0, 1, 2)))
    scheduler.submit(everyone)
    with pytest.raises(ProcessorError, match="broken on purpose"):
        tokens_of(everyone)
    failing_first = Job(make(()))  # a failure at the first token, from the prompt's logits
    for row in failing_first.decode.rows[:2]:
        row.chooser.processors = [*row.chooser.processors, FailsAt(1)]
    scheduler.submit(failing_first)
    assert {t[0] for t in tokens_of(failing_first)} == {2}


def test_a_request_that_needs_the_model_alone_never_shares_it(runner, scheduler):
    """An adapter switches the shared weights: its request runs with nobody else, and the others wait their turn."""
    seen = []

    @contextlib.contextmanager
    def adapter_on():
        seen.append(len(scheduler._slots))
        yield

    first = Job(decode_of(runner, [5, 6], tokens=6))
    exclusive = Job(decode_of(runner, [7, 8], tokens=6), exclusive=True, use_model=adapter_on)
    last = Job(decode_of(runner, [9, 10], tokens=6))
    submit_together(scheduler, [first, exclusive, last])
    for job in (first, exclusive, last):
        assert len(tokens_of(job)) == 6
    # its prefill saw nobody in the batch (0 rows), each of its steps only its own row
    assert seen[0] == 0 and set(seen[1:]) == {1}


def test_a_fault_in_the_loop_fails_its_requests_and_the_next_one_starts_afresh(runner, scheduler):
    """A bug in the scheduler itself must not leave readers waiting for ever."""
    real_leave = scheduler._leave

    def broken_once() -> None:
        scheduler._leave = real_leave
        raise IndexError("a bug")

    scheduler._leave = broken_once
    job = Job(decode_of(runner, [5, 6], tokens=4))
    scheduler.submit(job)
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            tokens_of(job)
        except IndexError as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(60)
    assert not reader.is_alive(), "the reader is still waiting for its tokens"
    assert str(outcome[0]) == "a bug"
    again = Job(decode_of(runner, [5, 6], tokens=4))
    scheduler.submit(again)
    assert len(tokens_of(again)) == 4


def test_a_model_whose_cache_cannot_be_padded_decodes_one_request_at_a_time(runner, scheduler, monkeypatch):
    """Sliding windows or recurrent state: known after the first prefill, and until then nobody shares."""
    monkeypatch.setattr("playground.decoding.scheduler.can_batch", lambda kv: False)
    jobs = [Job(decode_of(runner, [5 + i, 6], tokens=5)) for i in range(3)]
    submit_together(scheduler, jobs)
    for job in jobs:
        assert len(tokens_of(job)) == 5
    assert scheduler.peak_rows == 1 and scheduler.batchable is False


def test_a_sliding_window_request_longer_than_its_window_finishes():
    """A window's layer keeps its last positions only: the finished row's cache is the whole one (it decoded
    alone), not the batch's columns of it (an IndexError past the window: every Mistral or Gemma 2 answer). The
    prefix cache then declines it (a window cannot give back a shorter prefix)."""
    from transformers import MistralConfig, MistralForCausalLM

    from playground.decoding.prefix_cache import PrefixCache

    torch.manual_seed(0)
    config = MistralConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=4,
        max_position_embeddings=512,
    )
    loaded = LoadedModel("tiny-mistral", MistralForCausalLM(config).eval(), TinyTokenizer(EOS), "cpu", "float32", 0.0)
    mistral = ModelRunner(loaded)
    cache = PrefixCache(10_000)
    decode = decode_of(mistral, [5, 6, 7], tokens=12)
    decode.prefix_cache = cache.scoped()
    job = Job(decode)
    Scheduler(mistral, threading.Lock(), max_rows=32).submit(job)
    assert len(tokens_of(job)) == 12
    assert cache.usage()["entries"] == 0


def test_forced_tokens_alone_in_one_forward_and_batched_one_per_step_are_the_same(runner, scheduler):
    def make() -> Decode:
        return decode_of(runner, [5, 6, 7], tokens=14, processors=[ForcesAfter(30, [31, 32, 33])], fast_forward=True)

    want = run_alone(runner, make)
    assert any(forced for _, _, forced, _ in want)  # the constraint did force tokens
    jobs = [Job(make()), Job(decode_of(runner, [9, 10, 11], tokens=14))]
    submit_together(scheduler, jobs)
    same(tokens_of(jobs[0]), want)
    assert len(tokens_of(jobs[1])) == 14


class EveryTokenButEos(BitmaskProcessor):
    """An engine that allows every token but EOS, and notes which thread computes each of its masks."""

    def __init__(self) -> None:
        super().__init__(VOCAB)
        self.threads: list[str] = []

    def _start(self) -> None:
        pass

    def _consume(self, tokens: list[int]) -> None:
        pass

    def _fill(self, out) -> None:
        self.threads.append(threading.current_thread().name)
        out[:] = -1  # every bit
        for token in EOS:
            out[token // 32] &= ~(1 << (token % 32))


def test_fast_forward_in_a_batch_probes_with_the_mask_computed_alongside_the_forward(runner, scheduler):
    """Each row of a batch feeds one token a step, so fast-forward's probe after a sampled token waits for the
    next step, whose forward computes the mask on the masks thread; alone it probes at once (forced tokens go
    into the next forward together). The tokens are the same either way."""

    def make(engine: EveryTokenButEos) -> Decode:
        decode = decode_of(runner, [5, 6, 7], tokens=10, fast_forward=True)
        decode.rows[0].chooser.processors = [engine]
        return decode

    lone = EveryTokenButEos()
    want = run_alone(runner, lambda: make(lone))
    assert "masks" not in " ".join(lone.threads)
    batched = EveryTokenButEos()
    jobs = [Job(make(batched)), Job(decode_of(runner, [9, 10, 11], tokens=10))]
    submit_together(scheduler, jobs)
    same(tokens_of(jobs[0]), want)
    on_masks_thread = [name for name in batched.threads if name.startswith("masks")]
    assert len(on_masks_thread) >= len(batched.threads) - 2  # all but the first token's (at the prefill)


def test_a_process_that_exits_while_a_batch_decodes_exits_cleanly():
    """The scheduler's thread is stopped between two steps at exit; inside torch when the process ends it aborts it."""
    script = (
        "import sys; sys.path.insert(0, 'tests/unit'); import test_batching as t\n"
        "runner = t.runner.__wrapped__()\n"
        "from playground.decoding.scheduler import Job, Scheduler\n"
        "import threading\n"
        "scheduler = Scheduler(runner, threading.Lock(), max_rows=4)\n"
        "job = Job(t.decode_of(runner, [5, 6], tokens=100000))\n"
        "scheduler.submit(job)\n"
        "next(e for e in job.events() if not isinstance(e, list))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]


# --- drafts (playground/decoding/rows.py) -------------------------------------------------------


@pytest.mark.parametrize("length", [3, 300])  # 300: past ROOM_FROM, the layers' keys are views of larger buffers
def test_a_lone_rows_dropped_positions_decode_as_if_never_run(runner, length):
    row = [3 + i % 60 for i in range(length)]
    batch = joined(runner, [row])
    with torch.inference_mode():
        batch.forward([[30, 31, 32]])
        batch.drop_last(0, 2)  # 31 and 32 were drafts the row did not choose
        logits = batch.forward([[40]])[0]
    close(logits[-1], alone(runner, row + [30, 40]))
    with pytest.raises(ValueError, match="lone row"):
        joined(runner, [row, row]).drop_last(1, 1)


def test_only_a_cache_of_full_attention_layers_drops_positions():
    from transformers import LlamaConfig, MistralConfig

    from playground.decoding.runner import _plain_cache

    assert _plain_cache(LlamaConfig(num_hidden_layers=2))
    assert not _plain_cache(MistralConfig(num_hidden_layers=2, sliding_window=8))


class Alternates(BitmaskProcessor):
    """A choice of three tokens, then one forced token, and again: every choice is made under the same mask."""

    rewinds = True

    def __init__(self) -> None:
        super().__init__(VOCAB)

    def _start(self) -> None:
        self.n = 0

    def _consume(self, tokens: list[int]) -> None:
        self.n += len(tokens)

    def _restore(self, snapshot, count: int) -> None:
        self.n -= count

    def _fill(self, out) -> None:
        out[:] = 0
        for token in (10, 11, 12) if self.n % 2 == 0 else (20,):
            out[token // 32] |= 1 << (token % 32)


class JoinsAtDraft(Alternates):
    """Alternates that calls `join` as it saves its state for its third draft: a neighbour joins while drafts wait."""

    def __init__(self, join) -> None:
        super().__init__()
        self.join, self.saves = join, 0

    def save(self, keep: int) -> None:
        super().save(keep)
        self.saves += 1
        if self.saves == 3:
            self.join()


def drafting(runner, drafts: bool, seed: int | None = None, engine: Alternates | None = None) -> Decode:
    decode = decode_of(runner, [5, 6, 7], tokens=40, fast_forward=True, seed=seed)
    chooser = decode.rows[0].chooser
    chooser.processors = [engine or Alternates()]
    chooser.warpers = sampling.warpers(GenerateParameters(do_sample=True, temperature=0.1))  # a random model's
    # logits are near one another: sharpened, a sampled choice is likely enough to be drafted, and still varies
    if drafts:
        chooser.start_drafts()
    return decode


@pytest.mark.parametrize("seed", [None, 1])
def test_drafts_kept_or_refused_leave_the_tokens_as_without_drafts(runner, scheduler, seed):
    """Alone, then with a neighbour that joins while drafts wait (they are verified one per step there)."""
    want = run_alone(runner, lambda: drafting(runner, False, seed))
    neighbour = Job(decode_of(runner, [9, 10, 11], tokens=30))
    engine = JoinsAtDraft(lambda: scheduler.submit(neighbour))
    job = Job(drafting(runner, True, seed, engine))
    scheduler.submit(job)
    same(tokens_of(job), want)
    row = job.decode.rows[0]
    assert engine.saves >= 3 and row.accepted > 0
    assert seed is None or row.drafted > row.accepted  # sampled: some drafts refused
    assert len(tokens_of(neighbour)) == 30
