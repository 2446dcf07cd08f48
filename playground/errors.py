"""The small set of typed errors every surface maps once, at its edge."""

from __future__ import annotations


def first_line(exc: BaseException) -> str:
    """An exception's message in one line, for messages built from third-party errors."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def json_problem(exc: ValueError) -> str:
    """A json.JSONDecodeError in one phrase with where it is (its message can end in "at", before the position)."""
    msg, line, column = (getattr(exc, name, None) for name in ("msg", "lineno", "colno"))
    return f"{msg} (line {line}, column {column})" if msg is not None else first_line(exc)


class PlaygroundError(Exception):
    """Base: a failure a user can cause or fix. `status` is the HTTP status the API answers with."""

    status: int = 422
    error_type: str = "validation"
    openai_code: str | None = None  # OpenAI's own `code` for it, where it has one (else error_type)
    openai_type: str | None = None  # OpenAI's `type`, where the status alone does not say it (else by status)
    generating: bool = False  # raised after tokens came (TGI's `generation`, not `validation`): set by the server

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class ParameterError(PlaygroundError):
    """A generation parameter is out of range or inconsistent with another."""


class PromptTooLongError(ParameterError):
    """The prompt does not fit the model's context. Its code is OpenAI's, and its messages open with vLLM's words
    ("This model's maximum context length is ...") and say "prompt is too long": what clients (LiteLLM, LangChain)
    match to fall back to a model with a longer context."""

    error_type = "context_length_exceeded"


def context_phrase(max_total_tokens: int) -> str:
    """OpenAI's and vLLM's opening words for a request past the context, which clients (LiteLLM) match on."""
    return f"This model's maximum context length is {max_total_tokens} tokens"


class ConstraintError(PlaygroundError):
    """A constraint could not be parsed, checked or compiled."""

    error_type = "constraint"


class InvalidConstraintError(ConstraintError):
    """Invalid JSON, a schema that is not valid JSON Schema, a bad regex or a bad grammar."""


class UnsatisfiableConstraintError(InvalidConstraintError):
    """No output satisfies the constraint (a `false` schema, minimum > maximum): no engine may be tried after."""


class UnsupportedConstraintError(ConstraintError):
    """Valid, but no engine can enforce it (an unsupported schema keyword, say)."""


class UnenforcedKeywordError(UnsupportedConstraintError):
    """Mid-answer: the text breaks a schema keyword the engine does not enforce, and its mask allows only the end.

    The request fails rather than end with invalid text; the UI shows the partial answer with its verdict.
    """


class CompileTimeoutError(ConstraintError):
    """Compiling the constraint took longer than the configured limit."""


class CompileMemoryError(ConstraintError):
    """Compiling the constraint needed more memory than the configured limit."""


class WorkBudgetError(PlaygroundError):
    """A request spent more than its share: constraint work in the batch's step, or wall-clock time."""

    error_type = "budget"


class ProcessorError(PlaygroundError):
    """An unknown logits processor, bad processor params, or a processor that failed at run time."""

    error_type = "processor"


class ModelError(PlaygroundError):
    """A model that cannot be found, loaded or served."""

    status = 404
    error_type = "model"


class UnknownModelError(ModelError):
    """A model no provider serves: OpenAI's `model_not_found` (clients take it as final; a model still loading,
    or one that failed to load, is a plain ModelError)."""

    openai_code = "model_not_found"


class ProviderError(PlaygroundError):
    """A remote provider failed: unreachable, timed out, answered an error or garbage."""

    status = 502
    error_type = "provider"

    def __init__(self, provider_id: str, cause: str, *, status: int = 502, upstream: int | None = None) -> None:
        """`upstream`: the HTTP status the remote answered, where it answered one; its 4xx refused the request (the
        client's to fix), anything else is the remote's failure (OpenAI's `server_error`, though the status is 424)."""
        super().__init__(f"provider {provider_id!r} failed: {cause}")
        self.provider_id = provider_id
        self.status, self.upstream = status, upstream
        self.openai_type = "invalid_request_error" if upstream is not None and upstream < 500 else "server_error"


class ModelLoadingError(PlaygroundError):
    """The operator's model is still loading (a cold start downloads or converts it): try again shortly."""

    status = 503
    error_type = "loading"
