"""A constraint engine is one backend module: registered once, it shows in /info, the UI's engine picker
and /inspect, and requests can name it. The fourth engine here is a regex-only llguidance under a new name."""

from __future__ import annotations

from typing import ClassVar

import pytest
from fastapi.testclient import TestClient

from playground.constraints import backends
from playground.constraints.backends.llguidance import LLGuidance
from playground.providers.local import LocalProvider
from playground.providers.registry import Registry
from playground.server import create_app
from playground.ui import create_ui


class RegexOnly(LLGuidance):
    """Pickled by reference into the compile workers, which import this module to rebuild it."""

    name: ClassVar[str] = "regex_only"
    kinds: ClassVar[frozenset[str]] = frozenset({"regex"})
    notes: ClassVar[str] = "a test engine: llguidance, regex only"


@pytest.fixture
def fourth_engine():
    backends.register(RegexOnly())
    yield "regex_only"
    backends.unregister("regex_only")


@pytest.fixture
def client(engine, fourth_engine):
    return TestClient(create_app(Registry([LocalProvider([engine])]), ui=False))


def test_a_registered_backend_is_listed_in_info_and_offered_by_the_ui(client, fourth_engine):
    info = client.get("/info").json()
    listed = {e["name"]: e for e in info["constraint_engines"]}
    assert list(listed) == ["llguidance", "xgrammar", "outlines_core", "regex_only"]
    assert listed["regex_only"]["kinds"] == ["regex"]
    assert listed["xgrammar"]["ignored_keywords"]  # what an engine ignores travels with it
    ui = create_ui(Registry([]))
    (picker,) = [c for c in ui.config["components"] if c.get("props", {}).get("elem_id") == "param-engine"]
    assert [choice[0] for choice in picker["props"]["choices"]] == ["auto", *listed]


def test_inspect_reports_the_fourth_engine_and_a_request_can_use_it(client, fourth_engine):
    regex = {"type": "regex", "value": "(yes|no)"}
    reports = {r["engine"]: r for r in client.post("/inspect", json={"grammar": regex}).json()["engines"]}
    assert reports["regex_only"]["compiled"] is True, reports["regex_only"]
    schema = {"type": "json", "value": {"type": "integer"}}
    refused = {r["engine"]: r for r in client.post("/inspect", json={"grammar": schema}).json()["engines"]}
    assert refused["regex_only"]["error"] == "regex_only does not read json_schema constraints"
    body = {
        "inputs": "Yes or no?",
        "parameters": {"max_new_tokens": 3, "grammar": regex, "constraint_engine": fourth_engine, "details": True},
    }
    answer = client.post("/generate", json=body).json()
    assert answer["generated_text"] in ("yes", "no"), answer
    assert answer["constraint_engine"] == "regex_only"


def test_an_unknown_engine_is_refused_by_name(client):
    body = {"inputs": "x", "parameters": {"max_new_tokens": 1, "grammar": {"type": "regex", "value": "a"}}}
    body["parameters"]["constraint_engine"] = "nonesuch"
    response = client.post("/generate", json=body)
    assert response.status_code == 422
    assert (
        "unknown constraint engine 'nonesuch'; use auto, llguidance, xgrammar, outlines_core"
        in response.json()["error"]
    )
