"""Remote answers -> our result types, so the panels, widget and API show remote results unchanged.

What remote servers cannot tell us stays empty rather than invented: OpenAI-style servers send no
token ids (we use a negative id derived from the token text, equal text -> equal id), and no server
reports the model's unconstrained distribution next to the constrained one (`raw_*` stay empty unless
the remote is itself a playground that sends them).
"""

from __future__ import annotations

import math
import zlib
from typing import Any, get_args

from playground.constraints import Constraint
from playground.providers.base import Inputs
from playground.types import (
    ChatMessage,
    ConstraintKind,
    FinishReason,
    GeneratedToken,
    GenerateParameters,
    GenerationResult,
    NextTokenCandidate,
    NextTokenDistribution,
    PrefillToken,
    Sequence,
    Timings,
    Token,
    Validation,
)


def text_id(text: str) -> int:
    """A stand-in id for a token the server named only by its text: negative, so never a real id."""
    return -1 - (zlib.crc32(text.encode("utf-8", "surrogatepass")) & 0x3FFFFFFF)


def messages_json(inputs: Inputs) -> list[dict[str, Any]]:
    """A plain prompt is sent to chat servers as one user message."""
    if isinstance(inputs, str):
        return [{"role": "user", "content": inputs}]
    return [_message_json(message) for message in inputs]


def _message_json(message: ChatMessage) -> dict[str, Any]:
    """A refusal part goes as text, as this server reads it: TGI's chat knows only text and image parts."""
    data = message.model_dump(exclude_none=True)
    if isinstance(message.content, list) and any(part["type"] == "refusal" for part in message.content):
        data["content"] = message.text()
    return data


def prompt_text(inputs: Inputs) -> str:
    """What the result shows as its prompt; remote chat templates are applied by the server, unseen."""
    if isinstance(inputs, str):
        return inputs
    return "\n".join(f"{m.role}: {m.text()}" for m in inputs if isinstance(m, ChatMessage))


def judge(constraint: Constraint, text: str, finish_reason: str) -> Validation:
    """Fail closed: a remote output that breaks its constraint was not enforced by the provider."""
    verdict = constraint.validate(text)
    if constraint.kind == "none" or verdict.valid is not False:
        return verdict
    cut = {"length": ", or cut short by max_new_tokens", "stop_sequence": ", or cut short by a stop sequence"}.get(
        finish_reason, ""
    )
    return Validation(valid=False, enforced=False, message=f"not enforced by the provider{cut}: {verdict.message}")


# --- OpenAI-style chat completions --------------------------------------------------------------


def openai_token(entry: dict[str, Any]) -> GeneratedToken:
    """One `logprobs.content[]` entry; its `top_logprobs` are the server's top alternatives. A remote playground's
    own values (`raw_logprob`, `mass_kept`, `forced`) are passed through, as on TGI's routes."""
    text = entry["token"]
    top = [
        Token(id=text_id(t["token"]), text=t["token"], logprob=_finite(t.get("logprob")))
        for t in entry.get("top_logprobs") or []
    ]
    ours = {key: _finite(entry[key]) for key in ("raw_logprob", "mass_kept") if isinstance(entry.get(key), int | float)}
    if isinstance(entry.get("forced"), bool):
        ours["forced"] = entry["forced"]
    return GeneratedToken(id=text_id(text), text=text, logprob=_finite(entry.get("logprob")), top_tokens=top, **ours)


def openai_tokens(logprobs: dict[str, Any] | None, top_n: int | None = None) -> list[GeneratedToken]:
    """A choice's tokens from its logprobs: chat's `content` entries, or the completions API's columns (`top_n`:
    the alternatives asked for; chat's come as many)."""
    if logprobs and "content" not in logprobs and "tokens" in logprobs:
        return completion_tokens(logprobs, top_n)
    return [openai_token(entry) for entry in (logprobs or {}).get("content") or []]


def openai_finish(reason: str | None, stop_reason: Any, stops: list[str], text: str) -> tuple[FinishReason, str | None]:
    """OpenAI says `stop` for both end-of-sequence and stop strings; vLLM's `stop_reason` tells them apart."""
    if reason == "length":
        return "length", None
    if isinstance(stop_reason, str):
        return "stop_sequence", stop_reason
    if isinstance(stop_reason, int) and not isinstance(stop_reason, bool):  # a stop_token_ids token
        return "eos_token", None
    ended = next((s for s in stops if text.endswith(s)), None)
    return ("stop_sequence", ended) if ended else ("eos_token", None)


def openai_sequence(
    choice: dict[str, Any],
    text: str,
    tokens: list[GeneratedToken],
    *,
    usage_tokens: int | None,
    params: GenerateParameters,
    constraint: Constraint,
) -> Sequence:
    """One chat choice (whole, or assembled from a stream) as a Sequence with its own verdict."""
    reason, stop = openai_finish(choice.get("finish_reason"), choice.get("stop_reason"), params.stop, text)
    trimmed = None
    if stop in params.stop and not text.endswith(stop):  # vLLM's text leaves the stop string out, its tokens keep it
        trimmed = judge(constraint, text, reason)  # the verdict on the text the chat routes show (without it)
        text += stop  # ours keeps it, as TGI's /generate does
    # the server's own count wins: its logprobs leave out the end-of-text token that its usage counts
    count = usage_tokens if usage_tokens is not None else len(tokens)
    stop_reason = choice.get("stop_reason")
    return Sequence(
        generated_text=text,
        finish_reason=reason,
        generated_tokens=count,
        tokens=tokens,
        seed=choice.get("seed", params.seed),  # a playground remote reports each choice's own seed
        stop_sequence=stop,
        # vLLM's stop_reason: the stop_token_ids token that ended it
        stop_token=stop_reason if reason == "eos_token" and stop_reason in (params.stop_token_ids or ()) else None,
        total_logprob=total_logprob(tokens),
        validation=judge(constraint, text, reason),
        trimmed_validation=trimmed,
    )


def message_text(choice: dict[str, Any]) -> str:
    """A chat choice's message content, or a completion choice's text."""
    content = choice["text"] if "message" not in choice and "text" in choice else choice["message"].get("content")
    if content is None:
        return ""
    if not isinstance(content, str):
        raise TypeError(f"message.content is {type(content).__name__}, not a string")
    return content


# --- TGI ------------------------------------------------------------------------------------------


def tgi_token(token: dict[str, Any], top: list[dict[str, Any]] | None) -> GeneratedToken:
    """TGI's Token plus its `top_tokens` entry; a playground remote's extra fields are kept."""
    fields = {key: value for key, value in token.items() if key != "top_tokens"}
    generated = GeneratedToken.model_validate(fields)
    if top:
        generated.top_tokens = [Token.model_validate(t) for t in top]
    elif token.get("top_tokens"):
        generated.top_tokens = [Token.model_validate(t) for t in token["top_tokens"]]
    return generated


def tgi_tokens(details: dict[str, Any]) -> list[GeneratedToken]:
    """The tokens of TGI's Details or BestOfSequence, each with its `top_tokens` entry."""
    tops = details.get("top_tokens") or []
    return [tgi_token(t, tops[i] if i < len(tops) else None) for i, t in enumerate(details.get("tokens") or [])]


def tgi_sequence(
    text: str,
    details: dict[str, Any],
    tokens: list[GeneratedToken],
    *,
    params: GenerateParameters,
    constraint: Constraint,
) -> Sequence:
    """TGI's Details, BestOfSequence or final StreamDetails as a Sequence."""
    reason = details["finish_reason"]
    stop = None
    if reason == "stop_sequence":
        stop = details.get("stop_sequence") or next((s for s in params.stop if text.endswith(s)), None)
    return Sequence(
        generated_text=text,
        finish_reason=reason,
        generated_tokens=int(details["generated_tokens"]),
        tokens=tokens,
        seed=details.get("seed"),
        stop_sequence=stop,
        total_logprob=total_logprob(tokens),
        validation=judge(constraint, text, reason),
    )


def prefill_tokens(details: dict[str, Any]) -> list[PrefillToken]:
    return [PrefillToken.model_validate(t) for t in details.get("prefill") or []]


# --- an answer body as it came back (the TokenView's input) ---------------------------------------


def answer_result(body: dict[str, Any] | list[Any]) -> GenerationResult:
    """An answer's JSON as our result: a GenerationResult's own dump, TGI's `/generate` (with `details`), or an
    OpenAI-style chat completion or completion (with `logprobs`), from us, TGI, vLLM or OpenAI. Its constraint is
    not known here: the verdict is the one the body carries (ours do), else none."""
    if isinstance(body, list) and len(body) == 1:  # TGI's `/` route answers a list of one
        body = body[0]
    if not isinstance(body, dict):
        raise ValueError(f"an answer is a JSON object, not {type(body).__name__}")
    if "best" in body:
        return GenerationResult.model_validate(body)
    if "generated_text" in body:
        return _tgi_answer(body)
    if isinstance(body.get("choices"), list) and body["choices"]:
        return _openai_answer(body)
    keys = ", ".join(sorted(map(str, body))[:8]) or "none"
    raise ValueError(
        "not an answer this view reads (a GenerationResult, a /generate answer with details, a chat completion "
        f"or a completion); its keys: {keys}"
    )


def _tgi_answer(body: dict[str, Any]) -> GenerationResult:
    details = body.get("details")
    if not isinstance(details, dict):
        raise ValueError("a /generate answer without `details` has no tokens to show: ask with details=true")
    none = Constraint.none()
    sequences = [
        _with_verdict(tgi_sequence(text, d, tgi_tokens(d), params=GenerateParameters(), constraint=none), d)
        for text, d in [(body["generated_text"], details)]
        + [(s["generated_text"], s) for s in details.get("best_of_sequences") or []]
    ]
    prefill = prefill_tokens(details)
    return _answer(body, sequences, input_length=len(prefill), prefill=prefill, server_ranked=True)


def _openai_answer(body: dict[str, Any]) -> GenerationResult:
    choices = sorted(body["choices"], key=lambda c: int(c.get("index", 0)))
    usage = body.get("usage") or {}
    single = usage.get("completion_tokens") if len(choices) == 1 else None
    none, params = Constraint.none(), GenerateParameters()
    sequences = []
    for choice in choices:
        if "message" in choice:
            text, tokens = message_text(choice), openai_tokens(choice.get("logprobs"))
        else:
            text, tokens = str(choice.get("text") or ""), completion_tokens(choice.get("logprobs"))
        sequence = openai_sequence(choice, text, tokens, usage_tokens=single, params=params, constraint=none)
        sequences.append(_with_verdict(sequence, choice))
    return _answer(body, sequences, input_length=int(usage.get("prompt_tokens") or 0))


def completion_tokens(logprobs: dict[str, Any] | None, top_n: int | None = None) -> list[GeneratedToken]:
    """The completions API's columns (`tokens`, `token_logprobs`, `top_logprobs` as {text: logprob}); the
    alternatives likeliest first, `top_n` of them where given (vLLM's also hold the chosen token: k + 1)."""
    logprobs = logprobs or {}
    texts, values = logprobs.get("tokens") or [], logprobs.get("token_logprobs") or []
    tops = logprobs.get("top_logprobs") or []
    out = []
    for i, text in enumerate(texts):
        found = (tops[i] if i < len(tops) else None) or {}
        ranked = sorted(found.items(), key=lambda item: -(_finite(item[1]) or -math.inf))[:top_n]
        top = [Token(id=text_id(t), text=t, logprob=_finite(v)) for t, v in ranked]
        value = _finite(values[i] if i < len(values) else None)
        out.append(GeneratedToken(id=text_id(text), text=text, logprob=value, top_tokens=top))
    return out


def _with_verdict(sequence: Sequence, source: dict[str, Any]) -> Sequence:
    """Keep the verdict a playground server sent beside the sequence; without one nothing was checked."""
    if isinstance(source.get("validation"), dict):
        sequence.validation = Validation.model_validate(source["validation"])
    return sequence


def _answer(body: dict[str, Any], sequences: list[Sequence], **fields: Any) -> GenerationResult:
    model = str(body.get("model_id") or body.get("model") or "")
    answer = result(
        model=model,
        provider_id=str(body.get("provider_id") or "answer"),
        provider_type="answer",
        inputs="",
        sequences=sequences,
        constraint=Constraint.none(),
        total_s=0.0,
        **fields,
    )
    if body.get("constraint_kind") in get_args(ConstraintKind):  # a playground server names its constraint
        answer.constraint_kind = body["constraint_kind"]
        answer.constraint_engine = body.get("constraint_engine")
    return answer


# --- shared ---------------------------------------------------------------------------------------


def total_logprob(tokens: list[GeneratedToken]) -> float:
    return float(sum(t.logprob for t in tokens if t.logprob is not None))


def pick_best(sequences: list[Sequence]) -> tuple[Sequence, list[Sequence]]:
    """TGI's best_of rule: the highest total logprob wins; the others are listed as candidates."""
    if not sequences:
        raise ValueError("no choices in the answer")
    ranked = max(range(len(sequences)), key=lambda i: sequences[i].total_logprob if sequences[i].tokens else -math.inf)
    best = sequences[ranked]
    return best, [s for i, s in enumerate(sequences) if i != ranked]


def result(
    *,
    model: str,
    provider_id: str,
    provider_type: str,
    inputs: Inputs,
    input_length: int,
    sequences: list[Sequence],
    constraint: Constraint,
    total_s: float,
    first_token_s: float = 0.0,
    prefill: list[PrefillToken] | None = None,
    server_ranked: bool = False,
) -> GenerationResult:
    """Assemble the result every surface renders; TGI has already put its best sequence first."""
    if not sequences:
        raise ValueError("no sequences in the answer")
    best, others = (sequences[0], sequences[1:]) if server_ranked else pick_best(sequences)
    return GenerationResult(
        model_id=model,
        provider_id=provider_id,
        prompt=prompt_text(inputs),
        input_length=input_length,
        prefill=prefill or [],
        best=best,
        best_of_sequences=others,
        constraint_kind=constraint.kind,
        constraint_engine=None if constraint.kind == "none" else provider_type,
        timings=Timings(
            total_s=total_s,
            time_to_first_token_s=first_token_s or total_s,
            tokens_per_s=best.generated_tokens / total_s if total_s > 0 else 0.0,
        ),
    )


def distribution(prefix: str, alternatives: list[Token]) -> NextTokenDistribution:
    """The unconstrained next-token view from a 1-token request's top alternatives.

    Without a constraint every token is allowed, so raw and constrained agree; remote servers report neither
    their vocabulary's size nor how many tokens are allowed: both are None (unknown).
    """
    ranked = sorted((t for t in alternatives if t.logprob is not None), key=lambda t: -(t.logprob or 0.0))
    candidates = [
        NextTokenCandidate(id=t.id, text=t.text, raw_logprob=t.logprob, logprob=t.logprob, allowed=True) for t in ranked
    ]
    return NextTokenDistribution(
        prefix=prefix, candidates=candidates, mass_kept=1.0, allowed_count=None, vocab_size=None
    )


def _finite(value: Any) -> float | None:
    """Servers may send -inf or NaN for impossible tokens; keep finite numbers only."""
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None
