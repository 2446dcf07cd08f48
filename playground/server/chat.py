"""Our results -> OpenAI chat completions (the request side is playground.wire.inbound)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from playground.decoding.stopping import stop_cut
from playground.server.convert import VERSION, debugger_extras
from playground.types import ChatCompletion, ChatCompletionRequest, GeneratedToken, GenerationResult, Sequence
from playground.types.pieces import piece_bytes, token_name
from playground.wire import chat_fields, inbound, tools
from playground.wire.errors import renamed
from playground.wire.tool_formats import ToolFormat

FINISH_REASONS = {"eos_token": "stop", "stop_sequence": "stop", "length": "length"}
FINGERPRINT = f"structured-playground-{VERSION}"


def trim_stop(text: str, seq: Sequence, keep: bool = False) -> str:
    """OpenAI leaves the matched stop sequence (and anything after it) out of the text; `keep` (vLLM's
    include_stop_str_in_output) leaves out only what follows it."""
    if seq.finish_reason == "stop_sequence" and seq.stop_sequence:
        cut = stop_cut(text, seq.stop_sequence, keep)
        if cut is not None:
            return text[:cut]
    return text


class StopHoldback:
    """Streams text while holding back a tail that could still become a stop sequence; `keep` (vLLM's
    include_stop_str_in_output): only what may follow a stop sequence matched, since the stop itself is sent.
    `held`: strings held back from their first character whatever `keep` says (a tool-call envelope's trigger)."""

    def __init__(self, stops: list[str], keep: bool = False, held: tuple[str, ...] = ()) -> None:
        self.stops = [s for s in stops if s]
        self.keep = keep
        self.held = [s for s in held if s]
        self.text = ""
        self.sent = 0

    def feed(self, piece: str) -> str:
        """Text that is safe to send now."""
        self.text += piece
        safe = len(self.text) - self._partial_tail()
        out = self.text[self.sent : safe] if safe > self.sent else ""
        self.sent = max(self.sent, safe)
        return out

    def finish(self, seq: Sequence) -> str:
        """The rest of the text, with the stop sequence cut off (or, `keep`, what followed it)."""
        final = trim_stop(self.text, seq, self.keep)
        out = final[self.sent :]
        self.sent = len(final)
        return out

    def _partial_tail(self) -> int:
        """Length of the longest tail that is a prefix of, or contains, a stop sequence (`keep`: that follows one)."""
        longest = 0
        for stop, kept in [*((s, self.keep) for s in self.stops), *((s, False) for s in self.held)]:
            cut = stop_cut(self.text, stop, kept)
            if cut is not None:
                longest = max(longest, len(self.text) - cut)
                continue
            if kept:  # a stop that may still come is sent as it comes
                continue
            for size in range(min(len(stop) - 1, len(self.text)), 0, -1):
                if stop.startswith(self.text[-size:]):
                    longest = max(longest, size)
                    break
        return longest


# --- responses -----------------------------------------------------------------------------------


def _top(token: Any, as_ids: bool) -> dict[str, Any]:
    """A token as OpenAI writes it: its own text (a part of a character as `bytes:\\xe4\\xbd`) and its bytes (the
    text's, named by id or not)."""
    own = getattr(token, "piece", None) or token.text
    return {"token": token_name(token.id, own, as_ids), "logprob": token.logprob, "bytes": list(piece_bytes(own))}


def logprob_entry(token: GeneratedToken, top_logprobs: int, as_ids: bool = False) -> dict[str, Any]:
    """OpenAI's ChatCompletionTokenLogprob, plus what the model wanted and the mass the constraint kept."""
    return {
        **_top(token, as_ids),
        "top_logprobs": [_top(t, as_ids) for t in token.top_tokens[:top_logprobs]],
        "raw_logprob": token.raw_logprob,
        "mass_kept": token.mass_kept,
        "forced": token.forced,
        # a thinking model's reasoning tokens are listed too, as vLLM lists them: marked, to be told from the answer's
        **({"segment": "reasoning"} if token.segment == "reasoning" else {}),
    }


def choice_logprobs(tokens: list[GeneratedToken], req: ChatCompletionRequest) -> dict[str, Any] | None:
    if not req.logprobs:
        return None
    as_ids = bool(req.return_tokens_as_token_ids)
    return {"content": [logprob_entry(t, req.top_logprobs or 0, as_ids) for t in tokens if not t.special]}


def length_field(req: ChatCompletionRequest) -> dict[str, str]:
    """TGI's name for the token budget (in verdicts and warnings) as this chat request sent it."""
    return {"max_new_tokens": "max_completion_tokens" if req.max_completion_tokens else "max_tokens"}


def choice_extras(
    result: GenerationResult, notes: list[str] | None = None, names: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Non-standard keys on each choice (SDKs keep unknown keys): the verdict, the seed, the warnings and vLLM's
    stop_reason (the stop sequence or the stop_token_ids token that ended the answer; null for the model's end of text
    or a length cut); `names`: the
    engine's field names in them (`max_new_tokens`) as the route's client sent them."""
    seq = result.best
    validation = (seq.trimmed_validation or seq.validation).model_dump()  # the verdict on the text returned
    if names and isinstance(validation.get("message"), str):
        validation["message"] = renamed(validation["message"], names)
    return {
        "warnings": [renamed(w, names) if names else w for w in [*(notes or []), *result.warnings]],
        "validation": validation,
        "seed": seq.seed,
        "stop_reason": seq.stop_sequence if seq.finish_reason == "stop_sequence" else seq.stop_token,  # vLLM's
        "constraint_kind": result.constraint_kind,
        "constraint_engine": result.constraint_engine,
        **debugger_extras(seq),
    }


def completion_response(
    model: str, results: list[GenerationResult], req: ChatCompletionRequest, fmt: ToolFormat | None = None
) -> dict[str, Any]:
    """OpenAI's ChatCompletion for n results (one per choice); `fmt`: the template's tool-call envelope."""
    choices = []
    notes = chat_fields.warnings(req)
    formatted = inbound.constraint_of(req) is not None  # a response format beside tools (see tools.answer)
    for index, result in enumerate(results):
        seq = result.best
        keep = bool(req.include_stop_str_in_output)
        text = trim_stop(seq.answer, seq, keep)
        message, finish, cut_off = tools.answer(req, text, seq.finish_reason, fmt, seq.continued_from or "", formatted)
        message.update(reasoning_fields(seq, keep))
        choices.append(
            {
                "index": index,
                "message": message,
                "logprobs": choice_logprobs(seq.tokens, req),
                "finish_reason": finish,
                **choice_extras(result, [*notes, *cut_off], length_field(req)),
                **({"token_ids": token_ids(seq.tokens)} if req.return_token_ids else {}),
            }
        )
    body = {**envelope(model, "chat.completion"), "choices": choices, "usage": usage(results)}
    if req.return_token_ids and results:
        body["prompt_token_ids"] = results[0].prompt_ids
    body["warnings"] = list(dict.fromkeys(w for choice in choices for w in choice["warnings"]))
    if req.prompt_logprobs is not None and results:
        body["prompt_logprobs"] = prompt_logprobs(results[0])
    return ChatCompletion.model_validate(body).model_dump(exclude_unset=True)


def token_ids(tokens: list[GeneratedToken]) -> list[int]:
    """vLLM's token_ids (return_token_ids): every token generated, an end-of-text one too, as vLLM lists them."""
    return [t.id for t in tokens]


def prompt_logprobs(result: GenerationResult) -> list[dict[str, Any] | None]:
    """vLLM's prompt_logprobs: per prompt token {id: {logprob, rank, decoded_token}}; None for the first."""
    out: list[dict[str, Any] | None] = []
    for token in result.prefill:
        if token.logprob is None:
            out.append(None)
            continue
        out.append({str(token.id): {"logprob": token.logprob, "rank": None, "decoded_token": token.text}})
    return out


def envelope(model: str, kind: str, completion_id: str | None = None) -> dict[str, Any]:
    return {
        "id": completion_id or f"chatcmpl-{uuid.uuid4().hex}",
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": FINGERPRINT,
    }


def reasoning_fields(seq: Sequence, keep: bool = False) -> dict[str, str]:
    """A thinking model's reasoning apart from the content, under both names vLLM has used; `keep`: as trim_stop."""
    if seq.reasoning is None or seq.reasoning.ended_by == "prompt":
        return {}
    text = seq.reasoning.text
    if seq.reasoning.answer_token is None:  # the turn ended inside the reasoning: a stop sequence there is cut off
        text = trim_stop(text, seq, keep)
    return {"reasoning": text, "reasoning_content": text}


def usage(results: list[GenerationResult]) -> dict[str, Any]:
    prompt = results[0].input_length if results else 0
    completion = sum(r.best.generated_tokens for r in results)
    body: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if results and results[0].cached_tokens is not None:  # OpenAI's and vLLM's: what the prefix cache held
        body["prompt_tokens_details"] = {"cached_tokens": results[0].cached_tokens}
    if any(r.best.reasoning is not None for r in results):
        reasoning = sum(r.best.reasoning.tokens for r in results if r.best.reasoning is not None)
        body["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return body
