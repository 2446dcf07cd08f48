"""/evaluate through the API with plain httpx (server-sent events): 50 prompts, a summary, one per client, cancel."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx

COLORS = {"type": "choice", "value": ["red", "green", "blue"]}
PARAMS = {"max_new_tokens": 3, "grammar": COLORS}


def events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    for line in response.iter_lines():
        if line.startswith("data: "):
            yield json.loads(line[6:])


def test_fifty_prompts_stream_a_row_each_then_the_summary(server_url: str) -> None:
    prompts = [f"Name a color ({i}):" for i in range(50)]
    expected = ["red" if i % 2 else None for i in range(50)]
    body = {"prompts": prompts, "expected": expected, "parameters": PARAMS}
    with httpx.stream("POST", f"{server_url}/evaluate", json=body, timeout=600) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        received = list(events(response))
    rows, last = [e["row"] for e in received[:-1]], received[-1]
    assert len(rows) == 50 and sorted(r["index"] for r in rows) == list(range(50))
    assert all(r["text"] in ("red", "green", "blue") and r["valid"] is True for r in rows)
    assert all(r["tokens"] and r["prompt"] == prompts[r["index"]] for r in rows)
    summary = last["summary"]
    assert summary["valid_rate"] == 1.0 and summary["rows"] == 50 and summary["errors"] == 0
    assert sum(summary["finish_reasons"].values()) == 50
    assert 0 < summary["mass_kept_min"] <= summary["mass_kept_mean"] <= 1
    assert summary["override_count"] == sum(r["overridden"] for r in rows)
    judged = [r for r in rows if r["expected"] is not None]
    assert summary["agreement"] == sum(r["text"] == "red" for r in judged) / len(judged)
    refused = [r["first_refusal"] for r in rows if r["first_refusal"]]
    assert summary["refusal_reasons"] == {} if not refused else sum(summary["refusal_reasons"].values()) == len(refused)
    assert all(" " in f["reason"] for f in refused)  # the debugger's words, never empty
    assert [r["index"] for r in last["rows"]] == list(range(50)) and "tokens" not in last["rows"][0]


def test_one_evaluation_per_client_and_leaving_stops_it(server_url: str) -> None:
    body = {"prompts": [f"Color {i}:" for i in range(40)], "parameters": PARAMS}
    with httpx.stream("POST", f"{server_url}/evaluate", json=body, timeout=600) as first:
        assert first.status_code == 200
        reading = events(first)  # held: dropping the reader closes the response
        assert "row" in next(reading)  # a row finished: the evaluation runs
        second = httpx.post(f"{server_url}/evaluate", json=body, timeout=60)
        assert second.status_code == 429 and "one evaluation per client" in second.json()["error"]
        reading.close()
    # the first client left after one row: its remaining rows stop and the next evaluation is welcome
    small = {"prompts": ["Color:"], "parameters": PARAMS}
    for _ in range(50):
        again = httpx.post(f"{server_url}/evaluate", json=small, timeout=60)
        if again.status_code == 200:
            break
        time.sleep(0.2)  # the server notices the hang-up at its next read
    assert again.status_code == 200 and '"summary"' in again.text, again.text
    # the server releases a stream's slot just after its last byte: the client may ask before that
    for _ in range(50):
        running = httpx.get(f"{server_url}/health").json()["running"]
        if running == 0:
            break
        time.sleep(0.1)
    assert running == 0


def test_bad_bodies_are_422(server_url: str) -> None:
    for body, words in [
        ({"parameters": PARAMS}, "exactly one of"),
        ({"prompts": ["a", "b"], "expected": ["x"], "parameters": PARAMS}, "one answer (or null) per prompt"),
        ({"prompts": ["a"] * 257, "parameters": PARAMS}, "prompts"),
        ({"prompts": ["a"], "parameters": {**PARAMS, "best_of": 2, "do_sample": True}}, "best_of"),
    ]:
        response = httpx.post(f"{server_url}/evaluate", json=body, timeout=60)
        assert response.status_code == 422 and words in response.json()["error"], response.text
