"""Score every allowed answer: the exact probability of each alternative a constraint allows (POST /score).

Each alternative is teacher-forced after the prompt (and the answer prefix) in one batched forward that
shares the prompt's KV cache (decoding/teacher.py). `raw_logprob` is the model's own log-probability of
the alternative's text: the product over its canonical tokenization's tokens, summed with every other
tokenization the constraint's mask allows (when there are at most MAX_TOKENIZATIONS; `method` says which).
A value at a JSON position is also summed over the whitespace JSON allows before it and the model writes
inside the value's first token (` "dog"` as well as `"dog"` after `"kind":`): the same answer, spelled apart.
The end of text is not counted (as lm-eval's loglikelihood and sglang's choice scoring do): a choice
constraint allows nothing but the end after a complete choice. `logprob` is the constrained distribution
over the alternatives: the raw probabilities renormalised to sum to one.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, Field

from playground.constraints import Constraint
from playground.debug.alternatives import Alternatives, alternatives
from playground.debug.check import worded
from playground.decoding import continuation, row_budget
from playground.decoding.continuation import PrefixRefused
from playground.decoding.engine import Engine, Inputs
from playground.decoding.teacher import continuation_logprobs
from playground.decoding.walk import first_refusal
from playground.errors import InvalidConstraintError, ParameterError, PromptTooLongError
from playground.types import GenerateParameters

MAX_TOKENIZATIONS = 8  # per alternative; with more, only the canonical one is scored (the method says so)
CANONICAL = "canonical"  # the only tokenization the mask allows
ALL_TOKENIZATIONS = "all_tokenizations"  # every tokenization the mask allows, summed
CANONICAL_ONLY = "canonical_only"  # more than MAX_TOKENIZATIONS: the canonical one alone


class ScoredToken(BaseModel):
    """One token of an alternative's canonical tokenization and the model's own logprob of it."""

    id: int
    text: str
    raw_logprob: float


class Alternative(BaseModel):
    """One allowed answer, its raw and constrained probability."""

    text: str
    raw_logprob: float = Field(description="The model's log-probability of the whole alternative (end not counted).")
    logprob: float = Field(description="Under the constraint: renormalised over the alternatives.")
    probability: float = Field(description="exp(logprob): the alternative's share among the allowed answers.")
    canonical_raw_logprob: float = Field(description="The canonical tokenization's log-probability alone.")
    tokenizations: int = Field(description="Tokenizations summed into raw_logprob.")
    method: str = Field(
        description="canonical (the only tokenization allowed), all_tokenizations (every one the mask allows, "
        "summed) or canonical_only (more than 8: the canonical one alone; at a JSON value, with and without the "
        "space before it)."
    )
    tokens: list[ScoredToken]


class ScoreResult(BaseModel):
    """The alternatives ranked by logprob, with where they came from."""

    alternatives: list[Alternative]
    source: str = Field(description="choice, enum at a JSON path, the regex's or the grammar's language.")
    complete: bool = Field(description="True: each alternative is a whole answer; False: a value at a JSON position.")
    continued_from: str | None = None
    constraint_engine: str | None = None
    model_id: str
    forwards: int = Field(description="Batched forward passes over the alternatives (1 unless they are many).")
    warnings: list[str] = Field(default_factory=list)


def score(engine: Engine, inputs: Inputs, params: GenerateParameters) -> ScoreResult:
    """Every alternative the constraint allows after the prompt and prefix, ranked (see the module docstring)."""
    if params.logits_processors:
        raise ParameterError(
            "logits_processors: scoring reads the model's own distribution; processors do not apply",
            field="logits_processors",
        )
    try:
        return _score(engine, inputs, params)
    except PrefixRefused as refused:
        raise worded(engine, refused) from None


def _score(engine: Engine, inputs: Inputs, params: GenerateParameters) -> ScoreResult:
    _, prompt_ids = engine.encode_prompt(inputs, params.truncate, params)
    prefix = params.continue_from or ""
    prefix_ids = continuation.prefix_ids(engine, prefix, len(prompt_ids))
    constraint, compiled = engine.compile(params)
    if compiled is None:
        raise InvalidConstraintError(
            "scoring needs a constraint (parameters.grammar): a choice, a JSON enum, a small regex or grammar",
            field="grammar",
        )
    with row_budget.walking("the alternatives"):
        continuation.check_prefix(engine, constraint, compiled, prefix_ids)
        found = alternatives(engine, constraint, prefix, prefix_ids)
        paths, warnings = _allowed_paths(engine, constraint, compiled, prefix_ids, found)
    context = prompt_ids + prefix_ids
    longest = max(len(p) for ps, _ in paths.values() for p in ps)
    if len(context) + longest > engine.max_input_tokens:
        raise PromptTooLongError(
            f"prompt, prefix and the longest alternative have {len(context) + longest} tokens; "
            f"at most {engine.max_input_tokens}",
            field="inputs",
        )
    rows = [p for ps, _ in paths.values() for p in ps]
    engine.adapters.prepare(params.adapter_id)
    cache = engine._prefix_cache(params)
    scores, forwards = continuation_logprobs(
        engine.runner, functools.partial(_holding, engine, params.adapter_id), context, rows, cache
    )
    ranked = _ranked(engine, paths, iter(scores))
    return ScoreResult(
        alternatives=ranked,
        source=found.source,
        complete=found.complete,
        continued_from=prefix or None,
        constraint_engine=compiled.engine,
        model_id=engine.model_id,
        forwards=forwards,
        warnings=list(compiled.warnings) + warnings + _prefix_warnings([a.text for a in ranked]),
    )


def _prefix_warnings(texts: list[str]) -> list[str]:
    """An alternative that starts another: with the end of text not counted, its probability holds every answer that
    goes on past it (`y` holds `yes`), which constrained decoding, choosing between ending and going on, does not."""
    notes = []
    for short in texts:
        longer = [text for text in texts if len(text) > len(short) and text.startswith(short)]
        if longer:
            notes.append(
                f"{short!r} is the start of {longer[0]!r}{' and others' if len(longer) > 1 else ''}: its "
                "probability counts every answer that goes on past it (the end of text is not counted), so the "
                "two do not compare as decoding chooses between them"
            )
    return notes


@contextlib.contextmanager
def _holding(engine: Engine, adapter_id: str | None) -> Iterator[None]:
    """The model to ourselves (the batch's steps take turns with us), with the request's adapter on."""
    with engine._busy, engine.adapters.use(adapter_id):
        yield


def _allowed_paths(
    engine: Engine, constraint: Constraint, compiled: Any, prefix_ids: list[int], found: Alternatives
) -> tuple[dict[str, tuple[list[list[int]], str]], list[str]]:
    """Each alternative's tokenizations that the mask allows (canonical first) and the method; refused ones dropped."""
    paths: dict[str, tuple[list[list[int]], str]] = {}
    warnings = []
    for text in found.texts:
        spelled, canonical, capped = [], [], False
        for lead in found.leads:
            ids_list, lead_capped = tokenizations(engine, lead + text)
            spelled += ids_list
            canonical.append(ids_list[0])
            capped |= lead_capped
        if capped:  # too many spellings: each lead's canonical one alone, as the method says
            spelled = canonical
        allowed = [
            ids
            for ids in spelled
            if first_refusal(engine, constraint, compiled, prefix_ids + ids, with_eos=found.complete) is None
        ]
        if not allowed or allowed[0] not in canonical:
            warnings.append(f"{text!r}: the {compiled.engine} mask refuses it as the model would write it; not scored")
            continue
        paths[text] = (allowed, CANONICAL_ONLY if capped else ALL_TOKENIZATIONS if len(allowed) > 1 else CANONICAL)
    if not paths:
        raise InvalidConstraintError(
            f"the {compiled.engine} mask refuses every alternative as the model would write it", field="grammar"
        )
    return paths, warnings


def tokenizations(engine: Engine, text: str) -> tuple[list[list[int]], bool]:
    """The canonical tokenization first, then every other way the vocabulary spells `text` (at character
    boundaries); the canonical one alone, and True, when there are more than MAX_TOKENIZATIONS in all."""
    canonical = engine.answer_ids(text)
    if not canonical:
        raise ParameterError(f"the alternative {text!r} has no tokens", field="grammar")
    by_text = _token_ids(engine.tokenizer)
    found: list[list[int]] = [canonical]
    stack: list[tuple[int, list[int]]] = [(0, [])]
    while stack:
        at, ids = stack.pop()
        if at == len(text):
            if ids != canonical:
                found.append(ids)
                if len(found) > MAX_TOKENIZATIONS:
                    return [canonical], True
            continue
        for end in range(len(text), at, -1):
            for token in by_text.get(text[at:end], ()):
                stack.append((end, [*ids, token]))
    return found, False


@functools.lru_cache(maxsize=8)
def _token_ids(tokenizer: Any) -> dict[str, tuple[int, ...]]:
    """Token ids by their text, for every ordinary token that decodes to whole characters."""
    special = set(tokenizer.all_special_ids)
    ids = [i for i in range(len(tokenizer)) if i not in special]
    out: dict[str, list[int]] = {}
    for i, text in zip(ids, tokenizer.batch_decode([[i] for i in ids])):
        if text and "\ufffd" not in text:
            out.setdefault(text, []).append(i)
    return {k: tuple(v) for k, v in out.items()}


def _ranked(
    engine: Engine, paths: dict[str, tuple[list[list[int]], str]], scores: Iterator[list[float]]
) -> list[Alternative]:
    """Alternatives with raw (summed over tokenizations) and renormalised logprobs, most likely first."""
    raw: dict[str, tuple[float, float, list[ScoredToken]]] = {}
    for text, (ids_list, _) in paths.items():
        steps = [next(scores) for _ in ids_list]
        totals = [sum(s) for s in steps]
        tokens = [ScoredToken(id=t, text=engine.token_text(t), raw_logprob=lp) for t, lp in zip(ids_list[0], steps[0])]
        raw[text] = (_logsumexp(totals), totals[0], tokens)
    norm = _logsumexp([r for r, _, _ in raw.values()])
    out = [
        Alternative(
            text=text,
            raw_logprob=total,
            logprob=total - norm,
            probability=math.exp(total - norm),
            canonical_raw_logprob=canonical,
            tokenizations=len(paths[text][0]),
            method=paths[text][1],
            tokens=tokens,
        )
        for text, (total, canonical, tokens) in raw.items()
    ]
    return sorted(out, key=lambda a: a.logprob, reverse=True)


def _logsumexp(values: list[float]) -> float:
    top = max(values)
    if top == -math.inf:
        return -math.inf
    return top + math.log(sum(math.exp(v - top) for v in values))
