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


@pytest.mark.timeout(360)
def test_tiny_run_writes_every_row(tmp_path: Path) -> None:
    """Every benchmark row is present with a number, a target and a boolean verdict."""
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--tiny", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=350,
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


def _request(messages: list[str], *, marks: bool) -> dict[str, object]:
    """An Anthropic request with a 5,000-character system prompt and ``messages`` as user turns."""
    mark = {"cache_control": {"type": "ephemeral"}} if marks else {}
    body: dict[str, object] = {
        "system": [{"type": "text", "text": "s" * 5000, **mark}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": m}]} for m in messages],
    }
    if marks:
        body["messages"][-1]["content"][-1].update(mark)  # type: ignore[index]
    return body


def test_fake_anthropic_bills_cache_reads_only_at_breakpoints() -> None:
    """The benchmark's fake Anthropic reads a prefix written at a breakpoint of an earlier request,
    bills reads at 0.1x and writes at 1.25x, and never caches a request without breakpoints."""
    from bench.fake_anthropic import PromptCache

    cache = PromptCache()
    first = cache.bill(_request(["a" * 400], marks=True))
    assert (first.cache_read, first.cache_write) == (0, first.total)
    second = cache.bill(_request(["a" * 400, "b" * 400], marks=True))
    assert second.cache_read == first.total and second.cache_write == second.total - first.total
    assert second.billed == pytest.approx(0.1 * first.total + 1.25 * (second.total - first.total))
    plain = PromptCache()
    for n in (1, 2):
        bill = plain.bill(_request(["a" * 400] * n, marks=False))
        assert (bill.cache_read, bill.cache_write, bill.billed) == (0, 0, bill.total)


def test_common_prefix_share_counts_the_repeated_start() -> None:
    """A request that repeats all of the previous one and adds as much again shares half its bytes."""
    from bench.fake_anthropic import common_prefix_share

    assert common_prefix_share(["ab", "cd"], ["ab", "cd", "efgh"]) == 0.5
    assert common_prefix_share(["ab", "cx"], ["ab", "cd"]) == 0.75
    assert common_prefix_share(["zz"], ["ab"]) == 0.0


def test_help_is_plain_text_with_examples() -> None:
    """`python -m bench --help` shows plain text (no reST markup) with a description and examples."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--help"], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "``" not in proc.stdout
    assert "Runs every benchmark" in proc.stdout and "\nexamples:\n  python -m bench" in proc.stdout


def test_results_go_to_an_untracked_file_unless_saved() -> None:
    """By default results go to the gitignored bench/results.local.json; only --save writes results.json."""
    from bench.__main__ import DEFAULT_OUT, SAVED_OUT, _parser

    assert _parser().parse_args(["--quick"]).out == DEFAULT_OUT == REPO / "bench" / "results.local.json"
    assert "bench/results.local.json" in (REPO / ".gitignore").read_text().splitlines()
    assert _parser().parse_args(["--save"]).out == SAVED_OUT == REPO / "bench" / "results.json"
    with pytest.raises(SystemExit):
        _parser().parse_args(["--save", "--out", "elsewhere.json"])
