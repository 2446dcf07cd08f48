"""create_ui builds without a model, carries the contract's elem_ids, and wires the form in field order."""

from __future__ import annotations

import gradio as gr
import pytest

from playground.constraints.examples import EXAMPLES
from playground.providers.registry import Registry
from playground.ui import create_ui, layout
from playground.ui.state import FIELDS, Form, UISettings
from playground.wire.controls import SAMPLING

CONTRACT = {
    "model-picker",
    "constraint-kind",
    "constraint-text",
    "system-prompt",
    "chat-input",
    "chatbot",
    "token-panel",
    "bestof-panel",
    "finish-reason",
    "next-token-panel",
    "validation-status",
}


def elem_ids(demo: gr.Blocks) -> dict[str, gr.components.Component]:
    return {block.elem_id: block for block in demo.blocks.values() if getattr(block, "elem_id", None)}


def test_every_contract_elem_id_is_present_once() -> None:
    demo = create_ui(Registry([]))
    ids = [block.elem_id for block in demo.blocks.values() if getattr(block, "elem_id", None)]
    assert CONTRACT <= set(ids)
    assert len(ids) == len(set(ids)), "elem_ids must be unique"


def test_form_components_follow_the_form_fields() -> None:
    with gr.Blocks():
        comps = layout.render_all(Registry([]), UISettings())
    expected = {
        "model": "model-picker",
        "kind": "constraint-kind",
        "constraint_text": "constraint-text",
        "processor": "processor-name",
        "processor_params": "processor-params",
        "system_prompt": "system-prompt",
        "stop": "param-stop",
        "seed": "param-seed",
        "best_of": "param-best-of",
        "constraint_engine": "param-engine",
    }
    inputs = dict(zip(FIELDS, comps.form_inputs(), strict=True))
    assert {name: inputs[name].elem_id for name in expected} == expected
    assert all(inputs[name].elem_id.startswith("param-") for name in FIELDS[FIELDS.index("max_new_tokens") :])


def test_parameter_ranges_follow_tgi() -> None:
    with gr.Blocks():
        comps = layout.render_all(Registry([]), UISettings())
    assert (comps.params.best_of.minimum, comps.params.best_of.maximum) == (1, 4)
    assert (comps.params.top_n_tokens.minimum, comps.params.top_n_tokens.maximum) == (0, 20)
    assert comps.params.sampling["top_p"].maximum == 1.0 and comps.params.sampling["typical_p"].maximum == 1.0
    assert (
        comps.params.sampling["frequency_penalty"].minimum > -2.0
        and comps.params.sampling["frequency_penalty"].maximum == 2.0
    )
    assert comps.params.constraint_engine.choices == [
        (e, e) for e in ("auto", "llguidance", "xgrammar", "outlines_core")
    ]


def test_every_sampling_control_is_a_slider_and_a_form_field_at_its_neutral_value() -> None:
    with gr.Blocks():
        comps = layout.render_all(Registry([]), UISettings())
    form = Form()
    for control in SAMPLING:
        slider = comps.params.sampling[control.name]
        assert slider.elem_id == "param-" + control.name.replace("_", "-") and slider.label == control.label
        assert slider.value == control.neutral == getattr(form, control.name)
    assert comps.params.sampling["min_p"].label == "min_p (0 = off)" and (
        comps.params.sampling["min_p"].minimum,
        comps.params.sampling["min_p"].maximum,
    ) == (0, 1)


def test_a_text_change_is_kept_under_the_kind_the_editor_was_filled_for() -> None:
    """The radio flips before the editor gets the new kind's text, so a change of the old text can reach the
    server with the new kind: every event that fills the editor names its kind in the same update, typing names no
    example of another kind, and the text a switch leaves is kept under the kind it was written for (it once
    became the regex draft, and cleared the regex example's title)."""
    demo = create_ui(Registry([]))
    fns = {fn.name: fn for fn in demo.fns.values()}
    on_text = fns["on_text"]
    text = elem_ids(demo)["constraint-text"]
    text_kind = on_text.inputs[1]
    assert isinstance(text_kind, gr.Textbox)  # the browser's value, sent with the text (a State is the server's)
    filling = [fn for fn in demo.fns.values() if any(out is text for out in fn.outputs)]
    assert {fn.name for fn in filling} >= {"on_kind", "on_example", "on_import", "on_load", "kind_view"}
    assert all(any(out is text_kind for out in fn.outputs) for fn in filling)

    own = '{"type": "string"}'
    assert on_text.fn("regex", "json_schema", own) == gr.skip()  # the old kind's text names no regex example
    ipv4 = next(e.text for e in EXAMPLES["regex"] if e.title == "IPv4 address")
    assert on_text.fn("regex", "regex", ipv4)["value"] == "IPv4 address"
    # the text a kind switch leaves is kept under the kind it was written for, and restored on the way back
    on_kind = fns["on_kind"].fn
    *_, saved = on_kind("regex", "", {}, own, "json_schema")
    assert saved == {"json_schema": own}
    _, editor, *_, saved = on_kind("json_schema", "", saved, ipv4, "regex")
    assert editor["value"] == own and saved == {"json_schema": own, "regex": ipv4}


def test_a_negative_truncate_reaches_the_handler_and_is_named() -> None:
    """truncate's box had minimum=0: Gradio refused -1 before the handler, with "Error" over every output and a
    toast naming no setting. The box takes any number; the form's check names it under the chat."""
    from playground.errors import ParameterError
    from playground.wire import inbound

    demo = create_ui(Registry([]))
    assert elem_ids(demo)["param-truncate"].minimum is None
    with pytest.raises(ParameterError, match=r"truncate: must be 0 \(off\) or more, got -1"):
        inbound.from_controls({"truncate": -1, "max_new_tokens": 5})


def test_the_model_picker_offers_typing_only_what_the_operator_allows() -> None:
    """Without --allow-model-loading it still said "or type a hub id / local path and press Enter"."""
    labels = [
        layout.model_label(UISettings(allow_model_loading=loading, allow_local_paths=paths))
        for loading, paths in ((True, True), (True, False), (False, True))
    ]
    assert labels == [
        "Model (pick one, or type a hub id / local path and press Enter)",
        "Model (pick one, or type a hub id and press Enter)",
        "Model (pick one of the served models)",
    ]
    with gr.Blocks():
        comps = layout.render_all(Registry([]), UISettings(allow_model_loading=False))
    assert comps.model.label == "Model (pick one of the served models)"
