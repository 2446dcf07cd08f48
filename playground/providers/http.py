"""One place where HTTP failures become ProviderError, so every remote provider fails the same way.

Status policy (also in the README): a remote that answered with an error (4xx/5xx, or an error event
inside a stream) gives 424, TGI's code for "the upstream failed"; a remote that could not be reached,
timed out, or answered something that is not the protocol (not JSON, missing fields) gives 502.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pydantic

from playground.errors import ProviderError
from playground.wire.errors import validation_message

UPSTREAM_FAILED = 424
BAD_GATEWAY = 502
_SNIPPET = 200


@dataclass
class Reply:
    """A decoded JSON answer and the headers it came with (TGI puts token counts there)."""

    data: Any
    headers: httpx.Headers


def snippet(text: str) -> str:
    """A short, printable excerpt of a remote body for an error message."""
    text = " ".join(text.split())
    return text if len(text) <= _SNIPPET else text[:_SNIPPET] + "..."


def remote_message(response: httpx.Response) -> str:
    """The error message inside a remote error body, whichever convention the server follows."""
    try:
        body = response.json()
    except ValueError:
        return snippet(response.text) or "(empty body)"
    return _message_in(body) or snippet(response.text)


def _message_in(body: Any) -> str | None:
    """TGI `{error: str}`, OpenAI `{error: {message}}`, vLLM `{message}`, FastAPI `{detail}`."""
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    if isinstance(error, str):
        return error
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    for key in ("message", "detail"):
        if body.get(key):
            value = body[key]
            return value if isinstance(value, str) else snippet(json.dumps(value))
    return None


class RemoteClient:
    """A pooled HTTP client for one provider; the API key lives only in its headers, never in messages."""

    def __init__(self, provider_id: str, base_url: str, *, api_key: str | None = None, timeout_s: float = 60.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._key = api_key
        self.provider_id = provider_id
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._client = httpx.Client(base_url=self.base_url + "/", headers=headers, timeout=timeout_s)

    def __repr__(self) -> str:
        return f"RemoteClient({self.provider_id!r}, {self.base_url!r})"

    def get(self, path: str) -> Reply:
        """GET a JSON document."""
        with self._failures(path):
            response = self._client.get(path.lstrip("/"))
        return self._decode(path, response)

    def post(self, path: str, payload: dict[str, Any]) -> Reply:
        """POST a JSON body and decode the JSON answer."""
        with self._failures(path):
            response = self._client.post(path.lstrip("/"), json=payload)
        return self._decode(path, response)

    def events(self, path: str, payload: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """POST and yield each server-sent event's JSON `data`, until `[DONE]` or the end."""
        with self._failures(path):
            with self._client.stream("POST", path.lstrip("/"), json=payload) as response:
                if response.status_code >= 400:
                    response.read()
                    raise self._upstream(path, response)
                media = response.headers.get("content-type", "").partition(";")[0].strip().lower()
                if media and media != "text/event-stream":  # (an HTML error page from a proxy, say)
                    response.read()
                    raise self.fail(
                        f"{self.url(path)} answered {response.status_code} with {media}, not an event stream: "
                        f"{snippet(response.text)!r}"
                    )
                yield from self._sse(path, response)

    def close(self) -> None:
        self._client.close()

    def fail(self, cause: str, status: int = BAD_GATEWAY, upstream: int | None = None) -> ProviderError:
        """A ProviderError for this provider (raise it); `upstream`: the HTTP status the remote answered. The API key
        never shows in it, whatever the cause quotes."""
        if self._key:
            cause = cause.replace(self._key, "[API key]")
        return ProviderError(self.provider_id, cause, status=status, upstream=upstream)

    @contextmanager
    def malformed(self, what: str) -> Iterator[None]:
        """Mapping a body that lacks what the protocol promises is a 502, not a traceback."""
        try:
            yield
        except (KeyError, IndexError, TypeError, ValueError, AttributeError, pydantic.ValidationError) as exc:
            if isinstance(exc, pydantic.ValidationError):
                detail = validation_message(exc.errors(), whole=what)
            elif isinstance(exc, KeyError):
                detail = f"no {exc.args[0]!r} field where the protocol has one"
            else:
                detail = repr(exc)
            raise self.fail(f"answered a malformed {what} ({snippet(detail)})") from None

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"

    @contextmanager
    def _failures(self, path: str) -> Iterator[None]:
        url = self.url(path)
        try:
            yield
        except httpx.TimeoutException:
            raise self.fail(f"no answer from {url} within {self.timeout_s:g} s (timeout)") from None
        except httpx.ConnectError as exc:
            raise self.fail(f"cannot connect to {url}: {_reason(exc)}") from None
        except httpx.RemoteProtocolError as exc:
            raise self.fail(f"{url} closed the connection mid-answer: {_reason(exc)}") from None
        except httpx.HTTPError as exc:
            raise self.fail(f"request to {url} failed: {_reason(exc)}") from None

    def _decode(self, path: str, response: httpx.Response) -> Reply:
        if response.status_code >= 400:
            raise self._upstream(path, response)
        try:
            return Reply(response.json(), response.headers)
        except ValueError:
            raise self.fail(
                f"{self.url(path)} answered {response.status_code} with a body that is not JSON: {snippet(response.text)!r}"
            ) from None

    def _upstream(self, path: str, response: httpx.Response) -> ProviderError:
        message = remote_message(response)
        cause = f"{self.url(path)} answered HTTP {response.status_code}: {message}"
        return self.fail(cause, UPSTREAM_FAILED, upstream=response.status_code)

    def _sse(self, path: str, response: httpx.Response) -> Iterator[dict[str, Any]]:
        data: list[str] = []
        for line in response.iter_lines():
            if line.startswith("data:"):
                data.append(line[5:].strip())
                continue
            if line or not data:
                continue  # comments, `event:` lines, keep-alive blank lines
            text, data = "\n".join(data), []
            if text == "[DONE]":
                return
            yield self._event(path, text)
        if data and "\n".join(data) != "[DONE]":
            yield self._event(path, "\n".join(data))

    def _event(self, path: str, text: str) -> dict[str, Any]:
        try:
            event = json.loads(text)
        except ValueError:
            raise self.fail(f"{self.url(path)} streamed an event that is not JSON: {snippet(text)!r}") from None
        if not isinstance(event, dict):
            raise self.fail(f"{self.url(path)} streamed an event that is not a JSON object: {snippet(text)!r}")
        failed = "error" in event or event.get("object") == "error"  # TGI/OpenAI, and older vLLM
        if failed and not event.get("choices") and not event.get("token"):
            message = _message_in(event) or snippet(text)
            raise self.fail(f"{self.url(path)} reported an error mid-stream: {message}", UPSTREAM_FAILED)
        return event


def _reason(exc: Exception) -> str:
    """httpx wraps OS errors; their text ('[Errno 111] Connection refused') is the useful part."""
    text = str(exc).strip()
    return text or type(exc).__name__
