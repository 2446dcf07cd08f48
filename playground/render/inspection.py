"""The inspect panel: what every constraint engine makes of one constraint, all text escaped."""

from __future__ import annotations

from playground.constraints.inspection import EngineReport, InspectResponse, summary
from playground.render.core import code_spans, esc


def inspect_html(report: InspectResponse) -> str:
    """A summary line, then one row per engine with its form in a collapsed block; all text escaped."""
    rows = "".join(_row(engine) for engine in report.engines)
    line = code_spans(esc(summary(report)))
    kind = "ok" if all(e.compiled and not e.warnings for e in report.engines) else "warn"
    return (
        f'<div class="pg-bestof pg-inspect"><div class="pg-box pg-{kind} pg-inspect-summary">{line}</div>'
        f"<table><tr><th>engine</th><th>compiles</th><th>ms</th><th>what it says</th></tr>{rows}</table></div>"
    )


def _row(engine: EngineReport) -> str:
    notes = [engine.error] if engine.error else list(engine.warnings)
    said = "<br>".join(code_spans(esc(note)) for note in notes) or "—"
    form = ""
    if engine.compiled_form is not None:
        form = f"<details><summary>compiled form</summary><pre>{esc(engine.compiled_form)}</pre></details>"
    ms = f"{engine.compile_ms:.1f}" if engine.compile_ms is not None else "—"
    return (
        f'<tr class="pg-inspect-{esc(engine.engine)}"><td>{esc(engine.engine)}</td>'
        f'<td>{"✓" if engine.compiled else "✗"}</td><td class="num">{ms}</td><td>{said}{form}</td></tr>'
    )
