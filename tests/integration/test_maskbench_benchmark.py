"""`python -m benchmarks.maskbench` on three dev-sample schemas: its JSON line, counted as decoding would."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support import REPO_ROOT, child_env

DATA = REPO_ROOT / "tests" / "data" / "maskbench-dev"
KEYS = [
    "schemas",
    "compiled",
    "compile_errors",
    "timeouts",
    "valid_total",
    "valid_accepted",
    "invalid_total",
    "invalid_accepted",
    "fully_passing",
    "compile_ms_p50",
    "compile_ms_p90",
    "mask_us_p50",
    "mask_us_p99",
]
FILES = [
    "BFCL_simple_1.json",  # llguidance compiles it; one valid instance
    "Github_medium---o4838.json",  # llguidance reads its oneOf as anyOf: the EOS gate refuses 6 invalid ones
    # llguidance reads its `dependencies` leniently (auto); its mask keeps the schema's key order: the valid one refused
    "Glaiveai2K---calculate_area_3c2d01ed.json",
]


def test_the_last_line_counts_instances_as_decoding_would(tmp_path: Path) -> None:
    for name in FILES:
        shutil.copy(DATA / name, tmp_path / name)
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.maskbench", "--data", str(tmp_path), "--engine", "auto"],
        cwd=REPO_ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert list(figures) == KEYS
    counts = {k: figures[k] for k in KEYS[:9]}
    assert counts == {
        "schemas": 3,
        "compiled": 3,
        "compile_errors": 0,
        "timeouts": 0,
        "valid_total": 4,
        "valid_accepted": 3,
        "invalid_total": 6,
        "invalid_accepted": 0,
        "fully_passing": 2,
    }
    assert all(figures[k] > 0 for k in KEYS[9:])
    assert "Glaiveai2K---calculate_area_3c2d01ed.json: #0 valid refused (llguidance's mask refuses token" in done.stderr


def test_an_empty_folder_is_refused_with_a_message(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.maskbench", "--data", str(tmp_path)],
        cwd=REPO_ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert f"no *.json files under {tmp_path}" in done.stderr
