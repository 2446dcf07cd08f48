"""create_ui builds without a model, carries the contract's elem_ids, and wires the form in field order."""

from __future__ import annotations

import gradio as gr

from playground.providers.registry import Registry
from playground.ui import create_ui, layout
from playground.ui.state import FIELDS, Form
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
        comps = layout.render_all(Registry([]))
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
        comps = layout.render_all(Registry([]))
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
        comps = layout.render_all(Registry([]))
    form = Form()
    for control in SAMPLING:
        slider = comps.params.sampling[control.name]
        assert slider.elem_id == "param-" + control.name.replace("_", "-") and slider.label == control.label
        assert slider.value == control.neutral == getattr(form, control.name)
    assert comps.params.sampling["min_p"].label == "min_p (0 = off)" and (
        comps.params.sampling["min_p"].minimum,
        comps.params.sampling["min_p"].maximum,
    ) == (0, 1)
