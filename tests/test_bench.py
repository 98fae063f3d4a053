"""Smoke test of the benchmarks: ``python -m bench --tiny`` runs every benchmark end to end and
writes a well-formed results file. Timings are not asserted: they belong to ``python -m bench``."""

from __future__ import annotations

import importlib
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import MODULES

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(240)
def test_tiny_run_writes_every_row(tmp_path: Path) -> None:
    """Every benchmark row is present with a number, a target and a boolean verdict."""
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--tiny", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=230,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())

    assert isinstance(report["machine"]["cpus"], int)
    assert report["machine"]["python"].count(".") == 2
    assert report["date"]
    expected = [name for module in MODULES for name in importlib.import_module(f"bench.{module}").ROWS]
    results = report["results"]
    assert [r["name"] for r in results] == expected
    for row in results:
        assert {"name", "ours", "baseline", "ratio", "unit", "target", "met"} <= row.keys(), row
        assert isinstance(row["met"], bool)
        assert row["unit"] and row["target"]
        if row.get("skipped"):  # Postgres without a database URL
            continue
        assert isinstance(row["ours"], int | float) and math.isfinite(row["ours"]), row
        if row["baseline"] is not None:
            assert row["ratio"] == pytest.approx(row["ours"] / row["baseline"])
    assert "NOT MET" in proc.stdout or "yes" in proc.stdout  # the table was printed
