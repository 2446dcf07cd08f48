"""The UI's exports (session files, evaluation rows) stay bounded: age, count and bytes, in Gradio's own cache."""

from __future__ import annotations

import os
import time
from pathlib import Path

import gradio as gr

from playground.debug.evaluation import EvalRow
from playground.ui import controls, evaluate
from playground.ui.downloads import Downloads
from playground.ui.state import ChatState, Form


def exports(cache: Path) -> list[Path]:
    return [export for root in cache.iterdir() for export in root.iterdir()]


def test_session_exports_past_the_count_delete_the_oldest(tmp_path) -> None:
    downloads = Downloads(tmp_path, max_files=2, shares=1)
    paths = [controls.export_file(Form(model="m", seed=i), ChatState(), downloads) for i in range(5)]
    assert sorted(exports(tmp_path)) == sorted(Path(p).parent for p in paths[-2:])
    assert [Path(p).name for p in paths] == ["playground-session.json"] * 5
    assert controls.import_file(paths[-1])[0].seed == 4 and not Path(paths[0]).exists()


def test_exports_past_the_bytes_or_the_age_are_deleted(tmp_path) -> None:
    downloads = Downloads(tmp_path, max_bytes=3 << 20, shares=1)
    big = [downloads.write({"a.json": "x" * (1 << 20)})[0] for _ in range(5)]
    assert sum(Path(p).stat().st_size for p in big if Path(p).exists()) <= 3 << 20 and Path(big[-1]).exists()
    old = Path(big[-1]).parent
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    fresh = downloads.write({"b.json": "{}"})[0]
    assert not old.exists() and Path(fresh).read_text() == "{}"


def test_evaluation_exports_share_the_bounds(tmp_path) -> None:
    downloads = Downloads(tmp_path, max_files=1, shares=1)
    rows = [EvalRow(index=0, prompt="p", text="t").model_dump()]
    first = evaluate.export_files(rows, downloads)
    second = evaluate.export_files(rows, downloads)
    assert [Path(p).name for p in second] == ["evaluation.jsonl", "evaluation.csv"]
    assert not Path(first[0]).exists() and exports(tmp_path) == [Path(second[0]).parent]
    assert evaluate.export_files([], downloads) is None


def test_one_client_s_flood_pushes_out_its_own_exports_not_others(tmp_path) -> None:
    """Every client's exports shared one bound: one client writing in a loop deleted everyone else's before they were
    downloaded. Each client now holds at most its share (1/4 here) of the files and of the bytes."""
    downloads = Downloads(tmp_path, max_files=8, max_bytes=8 << 20, shares=4)
    others = [downloads.write({"s.json": "{}"}, client=f"10.0.0.{n}")[0] for n in range(3)]
    flood = [downloads.write({"s.json": "{}"}, client="10.0.0.9")[0] for _ in range(50)]
    assert all(Path(p).exists() for p in others) and sum(Path(p).exists() for p in flood) == 2
    big = [downloads.write({"a.json": "x" * (1 << 20)}, client="10.0.0.9")[0] for _ in range(5)]
    assert all(Path(p).exists() for p in others) and [Path(p).exists() for p in big] == [False] * 3 + [True] * 2
    several = [downloads.write({"s.json": "{}"}, client=f"10.1.0.{n}")[0] for n in range(5)]  # the whole bound still
    assert len(exports(tmp_path)) == 8 and all(Path(p).exists() for p in several)


def test_gradio_serves_an_export_from_its_cache_without_a_copy(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))
    block = gr.File()
    path = Downloads(block.GRADIO_CACHE).write({"s.json": "{}"})[0]
    assert block.move_resource_to_block_cache(path) == path and path in block.temp_files


def test_a_killed_process_s_expired_folder_is_removed_by_the_next(tmp_path) -> None:
    gone, alive = tmp_path / "playground-downloads-gone", tmp_path / "playground-downloads-alive"
    (gone / "export-1").mkdir(parents=True)
    (gone / "export-1" / "s.json").write_text("{}")
    alive.mkdir()
    os.utime(gone, (time.time() - 3600, time.time() - 3600))
    Downloads(tmp_path).write({"s.json": "{}"})
    assert not gone.exists() and alive.exists() and len(list(tmp_path.iterdir())) == 2
