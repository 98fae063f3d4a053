"""The benchmarks run end to end and report numbers that agree with each other.

``python -m bench --tiny --only MODULE`` runs each benchmark once at toy size. Timings are not
asserted (they belong to ``python -m bench``); what is asserted is that each row is
measured and self-consistent: ``ratio`` is ``ours / baseline``, ``met`` is what the
target says of the number it bounds, and the printed table shows that verdict.
"""

from __future__ import annotations

import importlib
import json
import math
import operator
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import Row
from bench.__main__ import MODULES, table

REPO = Path(__file__).resolve().parents[1]
DATABASE = os.environ.get("BENCH_DATABASE_URL") or os.environ.get("TEST_DATABASE_URL")
OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}


def _verdict(row: dict[str, Any]) -> bool:
    """``met`` recomputed from the row's own fields, independently of ``bench.Row``."""
    match = re.match(r"\s*(>=|<=|>|<)\s*([0-9.]+)", row["target"])
    assert match, row["target"]
    bounded = row["ours"] if row.get("absolute") or row["baseline"] is None else row["ratio"]
    return OPS[match.group(1)](bounded, float(match.group(2))) and all(row.get("also", {}).values())


def test_met_follows_the_target() -> None:
    """A row's verdict bounds the ratio, or ``ours`` for absolute targets, and needs every extra condition."""
    assert Row("r", 3.0, 2.0, "ms", "<= 1.5").met is True  # ratio 1.5
    assert Row("r", 3.1, 2.0, "ms", "<= 1.5").met is False
    assert Row("r", 1.0, 2.0, "x/s", ">= 0.7").met is False  # ratio 0.5
    assert Row("r", 2, 134, "calls", "<= 2 calls", absolute=True).met is True  # ours, not the ratio
    assert Row("r", 3, 134, "calls", "<= 2 calls", absolute=True).met is False
    assert Row("r", 1.0, 1.0, "ms", "<= 2.0", also={"p99 < 3 s": False}).met is False
    assert Row("r", None, 1.0, "ms", "<= 2.0").met is False
    row = Row("r", 3, 134, "calls", "<= 2 calls", absolute=True, also={"ok": True}).as_json()
    assert row["absolute"] is True and row["also"] == {"ok": True} and _verdict(row) is False


@pytest.mark.process
@pytest.mark.timeout(330)
@pytest.mark.parametrize("module", MODULES)
def test_a_tiny_run_measures_every_row_consistently(tmp_path: Path, module: str) -> None:
    """Every row of a tiny run of each benchmark module has a finite number, ratio == ours / baseline
    (or the median of the rounds' ratios, within their spread), met as its target says, and the
    printed table shows those verdicts. One run per module (``--only``), so the modules run on
    separate test workers instead of one after another; together they are every row of ``MODULES``."""
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--tiny", "--only", module, "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=320,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert isinstance(report["machine"]["cpus"], int) and report["date"]

    results = report["results"]
    assert [r["name"] for r in results] == list(importlib.import_module(f"bench.{module}").ROWS)
    measured = [r for r in results if not r.get("skipped")]  # Postgres rows skip without a database
    for row in measured:
        assert "error:" not in row.get("note", ""), row
        assert isinstance(row["ours"], int | float) and math.isfinite(row["ours"]) and row["ours"] >= 0, row
        if row["unit"].endswith("/s"):
            assert row["ours"] > 0, row  # a throughput of nothing means nothing was done
        if row.get("spread"):  # the median of the rounds' ratios, within their spread
            low, high = row["spread"]
            assert low <= row["ratio"] <= high, row
        elif row["baseline"]:
            assert row["ratio"] == pytest.approx(row["ours"] / row["baseline"]), row
        else:
            assert row["ratio"] is None, row
        assert row["met"] is _verdict(row), row
    for row in results:
        if row.get("skipped"):  # only a row that needs Postgres, and only when none is configured
            assert row["met"] is False and "Postgres" in row.get("note", "") and not DATABASE, row
    assert table(results) in proc.stdout


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


@pytest.mark.process
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


def test_child_processes_start_from_the_repository_root() -> None:
    """The bench's helper processes and servers run from the repository root (where ``bench`` and
    ``app`` are importable), not from ``tests/``."""
    from bench.common import REPO as BENCH_REPO

    assert BENCH_REPO == REPO and (BENCH_REPO / "bench" / "fakes.py").is_file()


def test_one_person_sending_every_delivery_is_not_capped_by_user_max_runs(tmp_path: Path) -> None:
    """Our server in the bench runs every delivery it is sent (all from U1) as the peer does: its
    USER_MAX_RUNS is far above any row's concurrency, not the default 4."""
    from types import SimpleNamespace

    from bench import SCALES
    from bench.common import our_server

    slack: Any = SimpleNamespace(token="xoxb-1", api_url="http://127.0.0.1:9/api/", files_origin="http://x")
    server = our_server(slack, "http://127.0.0.1:9/v1", tmp_path / "data", tmp_path / "log")
    most = max(max(*scale.turn_concurrency, scale.conversations) for scale in SCALES.values())
    assert int(server.env["USER_MAX_RUNS"]) >= most


def test_recovery_counts_the_answer_only_once_its_message_is_finished() -> None:
    """A stream cut off by the crash can already show the whole text (the fake model answers at
    once, and the first append carries all of it): recovery_seconds must wait for a finished
    message, not time the restart alone."""
    from bench.recovery import ANSWER, answered_once
    from threadbound_emulator import FakeSlack
    from threadbound_emulator.api.streams import start_stream, stop_stream

    slack = FakeSlack()
    slack.add_channel("C1", "general")
    slack.add_user("U1", "alice")
    root = slack.add_message("C1", "<@UBOT> what did we decide?", user="U1")
    started = start_stream(
        slack,
        {
            "channel": "C1",
            "thread_ts": root,
            "recipient_user_id": "U1",
            "recipient_team_id": "T1",
            "markdown_text": ANSWER,
        },
    )
    assert [m["text"].strip() for m in slack.bot_messages("C1")] == [ANSWER.strip()]
    assert not answered_once(slack)  # what the crash leaves: the text, unfinished
    stop_stream(slack, {"channel": "C1", "ts": started["ts"]})
    assert answered_once(slack)
