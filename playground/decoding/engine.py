"""The local engine every surface uses: prompts, checks, constraints, generation, next-token view."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Collection, Iterator
from typing import Any

import torch

from playground.constraints import Constraint
from playground.constraints.backends.bitmask import BitmaskProcessor
from playground.constraints.compile_pool import CompileLimits
from playground.constraints.compiler import CompiledConstraint, ConstraintCompiler, compiling_with
from playground.decoding import chat_template, continuation, reasoning, row_budget, sampling, walk
from playground.decoding.chooser import TokenChooser
from playground.decoding.fields import field_confidence
from playground.decoding.prefix_cache import PrefixCache, ScopedCache
from playground.decoding.rows import Decode, Row
from playground.decoding.runner import ModelRunner
from playground.decoding.scheduler import Job, Scheduler
from playground.decoding.stats import EngineStats
from playground.decoding.stopping import StopCriteria, checked_stop_ids, stop_cut
from playground.errors import (
    InvalidConstraintError,
    ParameterError,
    PlaygroundError,
    PromptTooLongError,
    context_phrase,
)
from playground.models import LoadedModel
from playground.models.adapters import Adapters
from playground.options import LOCAL
from playground.types import (
    ChatMessage,
    FailedCandidate,
    GenerateParameters,
    GenerationResult,
    NextTokenCandidate,
    NextTokenDistribution,
    Sequence,
    Timings,
    TokenEvent,
    TokenPrompt,
    Validation,
)
from playground.types.base import FIT_CONTEXT
from playground.types.sizes import MAX_BEST_OF, MAX_PROMPT_CHARS, MAX_TOP_N_TOKENS, nth_seed
from playground.wire import checks

Inputs = str | list[ChatMessage]
PREFILL_CHUNK = 256  # the next-token view's prefill holds the model this many tokens at a time


class Engine:
    """Generation on one loaded model."""

    def __init__(
        self,
        loaded: LoadedModel,
        *,
        compile_timeout_s: float = LOCAL.compile_timeout,
        compile_memory_mb: int = LOCAL.compile_memory,
        compile_workers: int = LOCAL.compile_workers,
        default_max_new_tokens: int = LOCAL.max_new_tokens,
        max_best_of: int = MAX_BEST_OF,
        max_top_n_tokens: int = MAX_TOP_N_TOKENS,
        adapters: Collection[str] | None = LOCAL.adapters,
        prefix_cache_tokens: int = LOCAL.prefix_cache_tokens,
        max_batch_rows: int = LOCAL.max_batch_size,
        reasoning_delimiters: str = LOCAL.reasoning,
    ) -> None:
        self.loaded = loaded
        self.runner = ModelRunner(loaded)
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.model_id = loaded.model_id
        self.device = self.runner.device
        self.vocab_size = self.runner.vocab_size
        limits = CompileLimits(timeout_s=compile_timeout_s, memory_mb=compile_memory_mb, workers=compile_workers)
        self.compiler = ConstraintCompiler(self.tokenizer, limits=limits)
        self.default_max_new_tokens = default_max_new_tokens
        self.max_best_of = max_best_of
        self.max_top_n_tokens = max_top_n_tokens
        self.max_total_tokens = loaded.context_length
        self.max_input_tokens = self.max_total_tokens - 1
        # One forward at a time on the model: the scheduler's batch steps and the next-token view take turns.
        self._busy = threading.Lock()
        self.adapters = Adapters(self.model, adapters)
        self.reasoning = reasoning.model_format(self.tokenizer, reasoning_delimiters)
        self.prefix_cache = PrefixCache(prefix_cache_tokens)
        self.scheduler = Scheduler(self.runner, self._busy, max_batch_rows)
        self.stats = EngineStats()  # what it generated, for /metrics
        self.tool_format = chat_template.tool_format(self.tokenizer)
        threading.Thread(target=self.compiler.warm, daemon=True, name="warm-constraints").start()

    @property
    def context_phrase(self) -> str:
        """OpenAI's and vLLM's opening words for a request past the context, which clients (LiteLLM) match on."""
        return context_phrase(self.max_total_tokens)

    # --- prompts ---------------------------------------------------------------------------

    def render_prompt(self, inputs: Inputs, params: GenerateParameters | None = None) -> str:
        """Messages through the model's chat template (with the request's template options); a plain prompt as is."""
        if isinstance(inputs, str):
            return inputs
        params = params or GenerateParameters()
        messages = [chat_template.message(m) for m in inputs]
        header = params.add_generation_prompt
        if self.has_template:
            return chat_template.render(self.tokenizer, messages, header, params.chat_template_kwargs, params.tools)
        return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + ("assistant: " if header else "")

    @property
    def has_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def template_warnings(self, inputs: Inputs, params: GenerateParameters) -> list[str]:
        """What a chat request should know about how its messages became the prompt (tools without a template's
        own format are written into a system message: wire/tools.py)."""
        if isinstance(inputs, str) or self.has_template:
            return []
        unread = " (chat_template_kwargs were not read)" if params.chat_template_kwargs else ""
        return [f"the model has no chat template: the messages were joined as 'role: content' lines{unread}"]

    def generate_prompt(self, inputs: Inputs, params: GenerateParameters) -> tuple[str, int]:
        """The text prompt that /generate decodes as this chat turn does: the templated prompt, with the start of a
        thinking model's reasoning where the turn writes it first (a chat turn forces it as its first tokens, and
        its reasoning budget counts them); and how many tokens that start is."""
        prompt = self.render_prompt(inputs, params)
        plan, prompt, _ = self.reasoning_plan(inputs, params, prompt, [])
        if plan is None or not plan.opening:
            return prompt, 0
        return prompt + self.tokenizer.decode(plan.opening, skip_special_tokens=False), len(plan.opening)

    def encode_prompt(
        self, inputs: Inputs, truncate: int | None = None, params: GenerateParameters | None = None
    ) -> tuple[str, list[int]]:
        prompt = self.render_prompt(inputs, params)
        if len(prompt) > MAX_PROMPT_CHARS:  # counts what the request's own checks could not see (templates, tools)
            raise PromptTooLongError(
                f"the prompt as the model reads it has {len(prompt)} characters; at most {MAX_PROMPT_CHARS}",
                field="inputs",
            )
        if isinstance(inputs, TokenPrompt):
            ids = list(inputs.ids)
        else:
            ids = self._encode(prompt, add_special_tokens=isinstance(inputs, str))
        kept = self.kept_tokens(truncate, params)
        ids = ids[-kept:] if kept else ids
        if not ids:
            raise ParameterError("the prompt is empty", field="inputs")
        if len(ids) > self.max_input_tokens:
            raise PromptTooLongError(
                f"{self.context_phrase}. However, the prompt is too long: it has {len(ids)} tokens, and this model "
                f"takes at most {self.max_input_tokens}. Please reduce the length of the prompt.",
                field="inputs",
            )
        return prompt, ids

    def reasoning_plan(
        self, inputs: Inputs, params: GenerateParameters, prompt: str, prompt_ids: list[int]
    ) -> tuple[reasoning.ReasoningPlan | None, str, list[int]]:
        """How the rows reason (None: not a thinking turn), and the prompt (think_first may open a block in it)."""
        if self.reasoning is None and not params.think_first and params.max_reasoning_tokens is None:
            return None, prompt, prompt_ids
        generation_prompt = None
        if not isinstance(inputs, str) and params.add_generation_prompt:
            without = self.render_prompt(inputs, params.model_copy(update={"add_generation_prompt": False}))
            generation_prompt = prompt[len(without) :] if prompt.startswith(without) else ""
        plan, opened = reasoning.plan(self.reasoning, self.tokenizer, params, prompt, generation_prompt)
        added = self._encode(opened[len(prompt) :], add_special_tokens=False) if len(opened) > len(prompt) else []
        return plan, opened, prompt_ids + added

    def token_prompt(self, ids: list[int], field: str = "prompt") -> TokenPrompt:
        """A prompt of token ids, with its text; an id past the vocabulary is refused, naming `field`."""
        vocab = min(self.runner.vocab_size, len(self.tokenizer))  # (an embedding padded past the tokenizer's ids)
        bad = next((i for i, token in enumerate(ids) if token >= vocab), None)
        if bad is not None:
            raise ParameterError(
                f"{field}[{bad}]: token id {ids[bad]} is not in the model's vocabulary (ids 0 to {vocab - 1})",
                field=field,
            )
        return TokenPrompt(self.tokenizer.decode(ids, skip_special_tokens=False), ids)

    def kept_tokens(self, truncate: int | None, params: GenerateParameters | None = None) -> int | None:
        """How many of the prompt's last tokens a truncation keeps (None: all). TGI and vLLM refuse one past
        the model's input, rather than read it as no truncation."""
        if truncate == FIT_CONTEXT:  # vLLM's -1: what the context leaves beside the answer's max_new_tokens
            answer = params.max_new_tokens if params is not None and params.max_new_tokens is not None else 1
            return max(1, min(self.max_input_tokens, self.max_total_tokens - answer))
        if truncate is not None and truncate > self.max_input_tokens:
            raise ParameterError(
                f"truncate: {truncate} is more than the {self.max_input_tokens} tokens this model takes as input "
                "(max_input_tokens): keep at most that many, or -1 for as many as the context holds",
                field="truncate",
            )
        return truncate

    def _encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        _check_unicode(text)
        return self.tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"]

    def answer_ids(self, text: str) -> list[int]:
        """Text a constraint is checked against, as decoding under it writes it: a special token's spelling in it
        (`<|im_end|>`) is text, as the constraint engines read it. (A prefix the answer continues keeps its
        special tokens: a thinking model writes `<think>` as one.)"""
        _check_unicode(text)
        return self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]

    def token_text(self, token_id: int) -> str:
        """A token's text in isolation, for alternatives lists."""
        return self.runner.token_text(token_id)

    def tokenize(self, text: str, *, special: bool = True, params: GenerateParameters | None = None) -> list[dict]:
        """TGI's /tokenize: ids with their character offsets; `special`: with the tokenizer's own special tokens
        (a chat template writes its own, so a templated prompt is tokenized without). As TGI's, it keeps the
        last tokens that `params.truncate` keeps: those the model would read."""
        _check_unicode(text)
        enc = self.tokenizer(text, return_offsets_mapping=True, add_special_tokens=special)
        pairs = list(zip(enc["input_ids"], enc["offset_mapping"]))
        kept = self.kept_tokens(params.truncate, params) if params is not None else None
        pairs = pairs[-kept:] if kept else pairs
        if len(pairs) > self.max_input_tokens:  # ~150 bytes of answer a token: keep it bounded
            raise PromptTooLongError(
                f"the text has {len(pairs)} tokens; /tokenize answers at most {self.max_input_tokens} "
                "(the model's max_input_tokens)",
                field="inputs",
            )
        return [{"id": i, "text": text[a:b], "start": a, "stop": b} for i, (a, b) in pairs]

    # --- checks ----------------------------------------------------------------------------

    def _check(self, params: GenerateParameters, input_length: int) -> tuple[int, int]:
        best_of = params.best_of or 1
        checks.check_best_of(params, self.max_best_of)
        checks.check_top_n(params, self.max_top_n_tokens)
        room = self.max_total_tokens - input_length
        if params.max_new_tokens is None and room < 1:
            raise PromptTooLongError(
                f"{self.context_phrase}. However, the prompt is too long: it has {input_length} tokens and leaves "
                "no room to generate. Please reduce the length of the prompt.",
                field="inputs",
            )
        # unset, the default shrinks to what the context leaves (as TGI and vLLM do); a value sent must fit
        max_new = min(self.default_max_new_tokens, room) if params.max_new_tokens is None else params.max_new_tokens
        if max_new > room:
            raise PromptTooLongError(
                f"{self.context_phrase}. However, you requested {input_length + max_new} tokens ({input_length} in "
                f"the prompt, {max_new} in max_new_tokens): prompt tokens + max_new_tokens must be <= "
                f"{self.max_total_tokens}, and the prompt is too long for that many. Please reduce the length of the "
                "prompt or max_new_tokens.",
                field="max_new_tokens",
            )
        return best_of, max_new

    def compile(self, params: GenerateParameters) -> tuple[Constraint, CompiledConstraint | None]:
        constraint = Constraint.from_grammar(params.grammar)
        return constraint, self.compiler.compile(constraint, params.constraint_engine)

    def _row_processors(self, compiled: CompiledConstraint | None, params: GenerateParameters) -> list[Any]:
        from playground.processors import build_processors

        processors = []
        if params.logits_processors:
            with compiling_with(self.compiler):  # constraint processors by name get this engine's limits
                processors = build_processors(params.logits_processors, self.tokenizer)
        if compiled is not None:
            processors.append(compiled.new_processor())
        return processors

    # --- generation ------------------------------------------------------------------------

    def generate(self, inputs: Inputs, params: GenerateParameters, *, here: bool = False) -> GenerationResult:
        """Run to completion; the same result the stream ends with."""
        result = None
        for event in self.stream(inputs, params, here=here):
            result = event
        assert isinstance(result, GenerationResult)
        return result

    def stream(
        self, inputs: Inputs, params: GenerateParameters, *, here: bool = False
    ) -> Iterator[TokenEvent | GenerationResult]:
        """Token events as they are decoded, then the GenerationResult; counted in `stats` (/metrics).

        `here`: decode on the calling thread, alone, instead of in the shared batch (a ZeroGPU lease)."""
        self.stats.start()
        finished = False
        decoding = self._stream(inputs, params, here)
        try:
            for item in decoding:
                if isinstance(item, GenerationResult):
                    self.stats.finish(item)
                    finished = True
                yield item
        except PlaygroundError as exc:
            self.stats.fail(exc.error_type)
            raise
        except GeneratorExit:  # the reader stopped (a client that left, Stop)
            if not finished:
                self.stats.fail("cancelled")
            raise
        except Exception:
            self.stats.fail("internal")
            raise
        finally:
            decoding.close()  # a reader that stops leaves the batch now, not when the generator is collected

    def _stream(
        self, inputs: Inputs, params: GenerateParameters, here: bool
    ) -> Iterator[TokenEvent | GenerationResult]:
        start = time.perf_counter()
        prompt, prompt_ids = self.encode_prompt(inputs, params.truncate, params)
        plan, prompt, prompt_ids = self.reasoning_plan(inputs, params, prompt, prompt_ids)
        prefix_ids = continuation.prefix_ids(self, params.continue_from, len(prompt_ids))
        best_of, max_new = self._check(params, len(prompt_ids) + len(prefix_ids))
        stop_ids = checked_stop_ids(params.stop_token_ids, self.vocab_size)
        compile_start = time.perf_counter()
        constraint, compiled = self.compile(params)
        compile_s = time.perf_counter() - compile_start
        continuation.check_prefix(self, constraint, compiled, prefix_ids)
        base_seed = params.seed if params.seed is not None else (random.randrange(2**63) if params.sampling else None)
        rows = [
            self._new_row(base_seed, i, compiled, constraint, params, len(prompt_ids), plan) for i in range(best_of)
        ]
        continuation.start_rows(self, rows, prompt_ids, prefix_ids)
        stopping = StopCriteria(params.stop, max_new, self.runner.eos_ids, stop_ids, params.include_stop_str_in_output)
        self.adapters.prepare(params.adapter_id)  # a slow lookup waits here, not in the decode loop
        decode = Decode(
            self.runner,
            rows,
            prompt_ids + prefix_ids,
            stopping,
            prefill_details=params.decoder_input_details,
            prefix_cache=self._prefix_cache(params),
            drafts=self.runner.drops_positions,
        )
        job = Job(
            decode,
            exclusive=bool(params.adapter_id),
            use_model=lambda: self.adapters.use(params.adapter_id),
        )
        if here:
            events = self.scheduler.decode_here(job)
        else:
            self.scheduler.submit(job)
            events = job.events()
        prefill = []  # the prompt's tokens with their logprobs, when decoder_input_details asks
        read = list(decode.prompt_ids) if params.return_token_ids else None  # what the model read, when asked
        first_token_at = None
        try:
            for event in events:
                if isinstance(event, list):
                    prefill = event
                    continue
                if first_token_at is None:
                    first_token_at = time.perf_counter()
                    # the prompt's details and ids go out with the first token, for a stream's echo and first chunk
                    if prefill or read is not None:
                        update = {
                            "prefill": prefill or None,
                            "prefill_top_tokens": decode.prefill_top,
                            "prompt_ids": read,
                        }
                        event = event.model_copy(update=update)
                yield event
        finally:
            job.cancelled.set()  # a reader that stops early (a closed stream, Stop) leaves the batch
            events.close()
        total = time.perf_counter() - start
        failed = [(i, row) for i, row in enumerate(rows) if row.failure is not None]
        rows = [row for row in rows if row.failure is None]  # (Decode raised when no candidate was left)
        sequences = [self._sequence(row, constraint, stopping.keep) for row in rows]
        best = max(range(len(sequences)), key=lambda i: sequences[i].total_logprob)
        generated = sum(s.generated_tokens for s in sequences)
        decode_time = total - ((first_token_at or start) - start)
        yield GenerationResult(
            model_id=self.model_id,
            prompt=prompt,
            # what the model read before its first new token, a continued prefix included (vLLM's prompt_tokens for
            # continue_final_message; the prefix cache's cached_tokens count over it too)
            input_length=len(decode.prompt_ids),
            cached_tokens=decode.cached_tokens,
            prefill=prefill,
            prompt_ids=read,
            prefill_top_tokens=decode.prefill_top,
            best=sequences[best],
            best_of_sequences=[s for i, s in enumerate(sequences) if i != best],
            failed_candidates=[
                FailedCandidate(index=i, seed=row.seed, generated_tokens=len(row.tokens), error=row.failure.message)
                for i, row in failed
            ],
            constraint_kind=constraint.kind,
            constraint_engine=compiled.engine if compiled else None,
            warnings=[
                *(compiled.warnings if compiled else ()),
                *self.template_warnings(inputs, params),
                *_matcher_errors(rows),
                *(
                    f"the best_of candidate of seed {row.seed} (index {i}) is left out: {row.failure.message}"
                    for i, row in failed
                ),
            ],
            timings=Timings(
                compile_s=compile_s,
                compile_cached=bool(compiled and compiled.cached),
                prefill_s=decode.prefill_s,
                time_to_first_token_s=(first_token_at or time.perf_counter()) - start,
                total_s=total,
                tokens_per_s=(generated - len(rows)) / decode_time
                if generated > len(rows) and decode_time > 0
                else 0.0,
                drafted=sum(row.drafted for row in rows),
                drafts_kept=sum(row.accepted for row in rows),
            ),
        )

    def _new_row(
        self,
        base_seed: int | None,
        index: int,
        compiled: CompiledConstraint | None,
        constraint: Constraint,
        params: GenerateParameters,
        prompt_length: int,
        plan: reasoning.ReasoningPlan | None = None,
    ) -> Row:
        generator = None
        seed = None
        if params.sampling:
            seed = nth_seed(base_seed, index)
            generator = torch.Generator(device=self.device).manual_seed(seed)
        chooser = self.chooser(params, compiled, constraint, prompt_length, generator)
        chooser.gate = plan.gate() if plan is not None else None
        return Row(seed=seed, chooser=chooser)

    def chooser(
        self,
        params: GenerateParameters,
        compiled: CompiledConstraint | None,
        constraint: Constraint,
        prompt_length: int,
        generator: torch.Generator | None = None,
    ) -> TokenChooser:
        """A fresh per-row token pipeline: the request's processors and a new copy of its constraint."""
        processors = self._row_processors(compiled, params)
        # Probing ahead needs the constraint alone: custom processors may change any logit, and allowed_token_ids and
        # bad_words may take a token the constraint forces
        fast_forward = (
            params.fast_forward
            and compiled is not None
            and not (params.logits_processors or params.allowed_token_ids or params.bad_words)
        )
        chooser = TokenChooser(
            self.runner, params, processors, constraint, prompt_length, generator, fast_forward=fast_forward
        )
        chooser.compile_notes = list(compiled.warnings) if compiled is not None else []
        return chooser

    def _sequence(self, row: Row, constraint: Constraint, keep_stop: bool) -> Sequence:
        answer, answer_tokens, span = row.text, row.tokens, None
        if row.chooser.gate is not None:  # the constraint and the verdict judge the answer, after the reasoning
            answer, answer_tokens, span = row.chooser.gate.split(row.text, row.tokens, len(row.prefix))
        return Sequence(
            generated_text=row.text[len(row.prefix) :],
            finish_reason=row.finish_reason or "length",
            generated_tokens=len(row.tokens),
            tokens=row.tokens,
            seed=row.seed,
            stop_sequence=row.stop_sequence,
            stop_token=row.stop_token,
            total_logprob=sum(t.logprob for t in row.tokens if t.logprob is not None),
            validation=_verdict(constraint, answer, row.finish_reason),
            trimmed_validation=_trimmed_verdict(constraint, answer, row, keep_stop),
            continued_from=row.prefix or None,
            fields=field_confidence(answer, answer_tokens, len(row.prefix))
            if constraint.kind == "json_schema"
            else None,
            reasoning=span,
        )

    def accepts(self, text: str, params: GenerateParameters) -> tuple[bool, str]:
        """Would decoding under params' constraint produce `text`? Its tokens, then EOS, through the one mask walk."""
        constraint, compiled = self.compile(params)
        token_ids = self.answer_ids(text)
        if compiled is None:
            return True, "no constraint"
        refusal = walk.first_refusal(self, constraint, compiled, token_ids)
        if refusal is not None:
            k = refusal.position
            where = "end of text" if k == len(token_ids) else f"token {k} ({self.token_text(token_ids[k])!r})"
            return False, f"{compiled.engine} masks the {where}" + (" (the JSON end gate)" if refusal.gated else "")
        verdict = constraint.validate(text)
        if verdict.valid is False:
            return False, f"the final check refuses EOS: {verdict.message}"
        return True, f"accepted by {compiled.engine}"

    # --- next-token view -------------------------------------------------------------------

    def next_token_distribution(
        self,
        inputs: Inputs,
        params: GenerateParameters | None = None,
        *,
        prefix: str = "",
        top_k: int = 20,
    ) -> NextTokenDistribution:
        """The next token's distribution, raw and after processors and the constraint, without sampling."""
        params = params or GenerateParameters()
        prompt, prompt_ids = self.encode_prompt(inputs, params.truncate, params)
        plan, _, prompt_ids = self.reasoning_plan(inputs, params, prompt, prompt_ids)
        prefix_ids = self._encode(prefix, add_special_tokens=False) if prefix else []
        constraint, compiled = self.compile(params)
        ids = prompt_ids + list(prefix_ids)
        if len(ids) > self.max_input_tokens:
            raise PromptTooLongError(f"prompt and prefix have {len(ids)} tokens; at most {self.max_input_tokens}")
        self.adapters.prepare(params.adapter_id)
        chooser = self.chooser(params, compiled, constraint, len(prompt_ids))
        chooser.gate = plan.gate() if plan is not None else None
        # a thinking model's prefix may hold reasoning: the constraint walks the answer's part alone
        start = chooser.gate.replay(prefix_ids) if chooser.gate is not None else 0
        # the prefix's walk through the constraint needs no model: nobody waits for it, and it has a budget
        with torch.inference_mode(), row_budget.walking("the prefix"):
            k = chooser.consume(prompt_ids + prefix_ids[:start], prefix_ids[start:])
        if k is not None:
            # the constraint or a processor refused it; the constraint's reason is added where it is the one
            message = f"prefix: token {start + k} ({self.token_text(prefix_ids[start + k])!r}) is refused"
            if compiled is None:
                raise InvalidConstraintError(message, field="prefix")
            walked = prefix_ids[start : start + k + 1]  # up to the refused token: a later one's reason is not its
            raise continuation.PrefixRefused(message, constraint, compiled, walked, field="prefix")
        with torch.inference_mode():
            logits = self._prefill(ids, params)  # takes the model a chunk at a time
            text = chooser.decode(prefix_ids)
            # the distribution decoding draws from at this point, before the sampling warpers
            step = chooser.step(self.runner.ids(ids), logits, text, warp=False)
        return self._distribution(step, ids, prompt_ids, top_k)

    def _prefix_cache(self, params: GenerateParameters) -> ScopedCache | None:
        """The KV caches a request may share: its own client's, and not under an adapter (other keys and values)."""
        return None if params.adapter_id else self.prefix_cache.scoped()

    def _prefill(self, ids: list[int], params: GenerateParameters) -> torch.Tensor:
        """The last position's logits for `ids`, running only what the prefix cache does not hold.

        In chunks of PREFILL_CHUNK tokens, each holding the model alone, with a pause as long as the chunk
        after each: a long prompt and prefix (4,096 characters can be 4,000 tokens, seconds of forward)
        lets the batch step between its chunks."""
        cache = self._prefix_cache(params)
        start, kv = cache.lookup(ids) if cache else (0, None)
        while start < len(ids):
            end = min(len(ids), start + PREFILL_CHUNK)
            began = time.monotonic()
            with self._busy, self.adapters.use(params.adapter_id):
                logits, kv = self.runner.forward(self.runner.ids(ids[start:end]), kv)
            start = end
            if start < len(ids):  # the batch's turn, as long as the chunk took (a lock is no queue: step aside)
                time.sleep(min(time.monotonic() - began, 1.0))
        if cache:
            cache.store(ids, kv)
        return logits[0, -1].float()

    def _distribution(
        self, step: sampling.StepScores, ids: list[int], prompt_ids: list[int], top_k: int
    ) -> NextTokenDistribution:
        allowed = torch.isfinite(step.final_scores)
        raw_top = torch.topk(step.raw_logprobs, top_k).indices.tolist()
        constrained_top = torch.topk(step.logprobs, min(top_k, int(allowed.sum()))).indices.tolist()
        candidates = []
        for token_id in dict.fromkeys(raw_top + constrained_top):
            ok = bool(allowed[token_id])
            candidates.append(
                NextTokenCandidate(
                    id=token_id,
                    text=self.token_text(token_id),
                    raw_logprob=float(step.raw_logprobs[token_id]),
                    logprob=float(step.logprobs[token_id]) if ok else None,
                    allowed=ok,
                )
            )
        return NextTokenDistribution(
            prefix=self.tokenizer.decode(ids[len(prompt_ids) :]),
            candidates=candidates,
            mass_kept=step.mass_kept,
            allowed_count=int(allowed.sum()),
            vocab_size=self.vocab_size,
        )


def _verdict(constraint: Constraint, answer: str, finish_reason: str | None) -> Validation:
    """The constraint's verdict on the answer; one that max_new_tokens cut says so (inside a character, its last bytes
    never came, so the text ends in U+FFFD), as the mask allowed every token before."""
    verdict = constraint.validate(answer)
    if verdict.valid is False and finish_reason in (None, "length"):
        if answer.endswith("\ufffd"):
            note = " (max_new_tokens ended it inside a character: U+FFFD stands for the bytes that came)"
        else:
            note = " (max_new_tokens ended it before the constraint was complete)"
        return verdict.model_copy(update={"message": verdict.message + note})
    return verdict


def _trimmed_verdict(constraint: Constraint, answer: str, row: Row, keep_stop: bool) -> Validation | None:
    """The verdict on the answer as OpenAI's routes return it, the stop sequence and what follows it left out
    (server.chat.trim_stop, on the new text: a continued prefix stays whole; `keep_stop`, vLLM's
    include_stop_str_in_output: only what follows it), where that cut it; None where it did not."""
    if row.finish_reason != "stop_sequence" or not row.stop_sequence or constraint.kind == "none":
        return None
    new = max(0, len(row.prefix) - (len(row.text) - len(answer)))  # where the new text begins in the answer
    cut = stop_cut(answer[new:], row.stop_sequence, keep_stop)
    if cut is None or new + cut >= len(answer):
        return None
    return _verdict(constraint, answer[: new + cut], row.finish_reason)


def _check_unicode(text: str) -> None:
    """Lone surrogates (possible in JSON's \\uD800) cannot be tokenized; say so instead of crashing."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ParameterError(
            f"the text contains invalid Unicode at position {exc.start}: {exc.reason}", field="inputs"
        ) from None


def _matcher_errors(rows: list[Row]) -> list[str]:
    """An engine stops a matcher that hits a limit (llguidance: say, a grammar row too long) and only warns; report it."""
    errors = []
    for row in rows:
        errors.extend(getattr(row.chooser, "warnings", ()))
        for processor in row.chooser.processors:
            reason = processor.stopped() if isinstance(processor, BitmaskProcessor) else None
            if reason:
                errors.append(f"{processor.engine} stopped the constraint: {reason}")
    return list(dict.fromkeys(errors))
