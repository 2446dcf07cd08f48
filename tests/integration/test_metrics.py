"""GET /metrics, read by Prometheus' own parser: TGI's names, counted per model as generations finish or fail."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    response = httpx.get(f"{url}/metrics", timeout=60)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def model_id(url: str) -> str:
    return httpx.get(f"{url}/info", timeout=60).json()["model_id"]


def test_generations_and_failures_are_counted_in_tgi_names(server_url: str) -> None:
    model = (("model", model_id(server_url)),)
    before = scrape(server_url)
    body = {"inputs": "Count: ", "parameters": {"max_new_tokens": 3, "grammar": {"type": "regex", "value": "[0-9]{5}"}}}
    answer = httpx.post(f"{server_url}/generate", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    bad = {"inputs": "x", "parameters": {"max_new_tokens": 2, "grammar": {"type": "regex", "value": "(ab"}}}
    assert httpx.post(f"{server_url}/generate", json=bad, timeout=120).status_code == 422
    after = scrape(server_url)

    def grew(name: str, labels: tuple = model) -> float:
        return after[(name, labels)] - before.get((name, labels), 0.0)

    # other tests share the server: at least ours
    assert grew("tgi_request_count_total") >= 2 and grew("tgi_request_success_total") >= 1
    assert grew("tgi_request_failure_total", (("err", "constraint"), *model)) >= 1
    assert grew("tgi_request_generated_tokens_count") >= 1 and grew("tgi_request_generated_tokens_sum") >= 3
    assert grew("playground_generated_tokens_total") >= 3 and grew("tgi_request_input_length_sum") >= 2
    assert grew("playground_finish_reason_total", (*model, ("reason", "length"))) >= 1
    assert (
        after[("tgi_request_duration_bucket", (("le", "+Inf"), *model))] == after[("tgi_request_duration_count", model)]
    )
    assert after[("tgi_batch_current_max_size", model)] >= 1
    assert ("playground_requests_waiting", ()) in after and ("playground_requests_refused_total", ()) in after
