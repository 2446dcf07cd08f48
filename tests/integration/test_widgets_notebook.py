"""examples/playground.ipynb executed headless with nbclient: every cell runs, the outputs are real."""

from __future__ import annotations

import ast
import os
import sys

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient

from tests.support import REPO_ROOT, TEST_ENV

NOTEBOOK = REPO_ROOT / "examples" / "playground.ipynb"


def _outputs(cell: dict) -> tuple[str, list[dict]]:
    """A cell's printed text and its rich display data."""
    text = "".join(out.get("text", "") for out in cell.outputs if out.output_type == "stream")
    data = [out.data for out in cell.outputs if out.output_type in ("display_data", "execute_result")]
    return text, data


def test_example_notebook_executes_without_errors() -> None:
    # ipykernel's own spec says `python`, which jupyter_client runs as sys.executable: this venv.
    assert KernelSpecManager().get_kernel_spec("python3").argv[0] in ("python", sys.executable)
    for key, value in TEST_ENV.items():
        os.environ.setdefault(key, value)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    )
    client.execute()
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert all(out.output_type != "error" for cell in code for out in cell.outputs)

    _, playground_data = _outputs(code[1])
    assert "application/vnd.jupyter.widget-view+json" in playground_data[0]

    text, _ = _outputs(code[2])
    answer, verdict = text.strip().rsplit("\n", 1)
    assert answer.lstrip().startswith("{") and verdict.startswith("eos_token valid=True")

    token_view = _outputs(code[5])[1][0]
    assert "application/vnd.jupyter.widget-view+json" in token_view
    # the static HTML is the UI's own token panel (playground/render), without scripts
    assert 'data-index="0"' in token_view["text/html"] and "<script" not in token_view["text/html"]

    text, data = _outputs(code[6])
    candidates = ast.literal_eval(text.strip().splitlines()[-1])
    assert len(candidates) == 2 and set(candidates) <= {"negative", "neutral", "positive"}
    assert data[0]["text/html"].count('<tr class="cand') == 2  # one row per candidate

    caught, shown = _outputs(code[7])[0].strip().splitlines()
    assert caught.startswith("InvalidConstraintError not a valid JSON Schema")
    assert shown.startswith("not a valid JSON Schema")

    _, ui_data = _outputs(code[8])
    html = "".join(item.get("text/html", "") for item in ui_data)
    assert "<iframe" in html and "127.0.0.1" in html
