"""Test an instance: a candidate answer walked through the masks token by token, then the EOS gate.

Tokenized as the model would write it; the first token the engine's mask refuses is reported with
its reason, and the final verdict (jsonschema, regex, choice, Lark) is set beside it, so a mask that
disagrees with the verdict shows at once.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from playground.constraints import Constraint
from playground.constraints.compiler import CompiledConstraint
from playground.debug import reasons
from playground.debug.state import LocalEngine, State, llguidance_matcher
from playground.decoding import row_budget
from playground.decoding.continuation import PrefixRefused
from playground.decoding.walk import first_refusal
from playground.errors import InvalidConstraintError, ParameterError
from playground.types import EngineName, GrammarType, Strict, Validation

MAX_CHECK_CHARS = 20_000
MAX_CHECK_TOKENS = 2_000


class CheckRequest(Strict):
    """Body of POST /check."""

    grammar: GrammarType
    text: str = Field(max_length=MAX_CHECK_CHARS)
    constraint_engine: EngineName = "auto"
    model: str | None = None


class RefusedToken(BaseModel):
    """The first token of the text that the mask (or the EOS gate) refuses."""

    position: int = Field(description="Token index in the tokenized text; the token count for the end of text.")
    token: int = Field(description="Token id (the EOS id for the end of text).")
    text: str = Field(description="The token's text.")
    offset: int = Field(description="Character offset of the token in the text.")
    reason: str


class CheckResult(BaseModel):
    """Mask walk and final verdict for one candidate text."""

    accepted: bool = Field(description="Every token and the end of text pass the masks and the EOS gate.")
    first_refused: RefusedToken | None = None
    validation: Validation
    agree: bool = Field(description="The masks and the final verdict say the same thing.")
    constraint_engine: str | None = None
    tokens: list[str] = Field(default_factory=list, description="The text as the model's tokens.")


def check_text(engine: LocalEngine, grammar: GrammarType, text: str, constraint_engine: str = "auto") -> CheckResult:
    """Walk `text` through the constraint's masks, then EOS, and set the final verdict beside it (CPU-bounded)."""
    with row_budget.walking("the text"):
        return _check_text(engine, grammar, text, constraint_engine)


def _check_text(engine: LocalEngine, grammar: GrammarType, text: str, constraint_engine: str) -> CheckResult:
    if len(text) > MAX_CHECK_CHARS:
        raise ParameterError(f"text: at most {MAX_CHECK_CHARS} characters, got {len(text)}", field="text")
    constraint = Constraint.from_grammar(grammar)
    compiled = engine.compiler.compile(constraint, constraint_engine)
    # a special token's spelling is text here, as the constraint engines read it (LocalEngine.answer_ids)
    enc = engine.tokenizer(text, add_special_tokens=False, split_special_tokens=True, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], [a for a, _ in enc["offset_mapping"]]
    if len(ids) > MAX_CHECK_TOKENS:
        raise ParameterError(f"text: at most {MAX_CHECK_TOKENS} tokens, got {len(ids)}", field="text")
    validation = constraint.validate(text)
    pieces = [engine.token_text(i) for i in ids]
    if compiled is None:
        return CheckResult(accepted=True, validation=validation, agree=True, tokens=pieces)
    refused = first_refused(engine, constraint, compiled, ids, offsets=offsets, end=len(text))
    accepted = refused is None
    return CheckResult(
        accepted=accepted,
        first_refused=refused,
        validation=validation,
        agree=validation.valid is None or validation.valid == accepted,
        constraint_engine=compiled.engine,
        tokens=pieces,
    )


def first_refused(
    engine: LocalEngine,
    constraint: Constraint,
    compiled: CompiledConstraint,
    ids: list[int],
    *,
    with_eos: bool = True,
    offsets: list[int] | None = None,
    end: int | None = None,
) -> RefusedToken | None:
    """The first refused token (or end of text), with its reason; None when all pass."""
    if offsets is None:
        pieces = [engine.token_text(i) for i in ids]
        offsets = [sum(len(p) for p in pieces[:k]) for k in range(len(ids))]
        end = sum(len(p) for p in pieces)
    refusal = first_refusal(engine, constraint, compiled, ids, with_eos=with_eos)
    if refusal is None:
        return None
    k = refusal.position
    prefix = engine.tokenizer.decode(ids[:k], skip_special_tokens=True)
    state = State(prefix, refusal.allowed, False, compiled.engine, llguidance_matcher(engine, constraint, ids[:k]))
    return RefusedToken(
        position=k,
        token=refusal.token,
        text=engine.token_text(refusal.token),
        offset=offsets[k] if k < len(ids) else (end or 0),
        reason=reasons.explain(engine, constraint, state, refusal.token),
    )


def worded(engine: LocalEngine, refused: PrefixRefused) -> InvalidConstraintError:
    """continue_from's refusal with the reason in words, as the surfaces show it."""
    word = first_refused(engine, refused.constraint, refused.compiled, refused.ids, with_eos=False)
    reason = f": {word.reason}" if word is not None else ""
    return InvalidConstraintError(f"{refused.message}{reason}", field=refused.field)
