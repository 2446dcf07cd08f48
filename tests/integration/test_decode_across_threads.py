"""A decode generator resumed on a different thread each step (as Gradio and the API's streams do)."""

from __future__ import annotations

import threading

from playground.types import ChatMessage, GenerateParameters, GenerationResult


def _on_new_threads(engine, text: str) -> GenerationResult:
    """Drive engine.stream with every next() on a fresh thread; the last item is the result."""
    gen = engine.stream([ChatMessage(role="user", content=text)], GenerateParameters(max_new_tokens=6))
    items: list = []
    while True:
        box: list = []

        def step(box: list = box) -> None:
            try:
                box.append(next(gen))
            except StopIteration:
                box.append(StopIteration)
            except Exception as exc:  # noqa: BLE001 - handed back to the test thread
                box.append(exc)

        thread = threading.Thread(target=step)
        thread.start()
        thread.join()
        if box[0] is StopIteration:
            return items[-1]
        if isinstance(box[0], Exception):
            raise box[0]
        items.append(box[0])


def test_the_same_prompt_twice_reuses_the_prefix_cache(engine) -> None:
    hits = engine.prefix_cache.hits
    first = _on_new_threads(engine, "Name a colour, threads.")
    second = _on_new_threads(engine, "Name a colour, threads.")
    assert first.generated_text == second.generated_text
    assert engine.prefix_cache.hits > hits
