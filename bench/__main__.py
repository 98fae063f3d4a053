"""python -m bench [--quick | --tiny] [--only MODULE ...] [--save | --out PATH]

Runs every benchmark (each module in its own child process), prints the table and writes the
results to bench/results.local.json, which git ignores; --save writes bench/results.json, the
committed numbers the README quotes, and --out any other file. Exit status: 0 when every benchmark
produced its rows, met or not (an unmet target is a finding, printed as such); 1 when one crashed
or timed out.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import importlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import SCALES, Mode, Row, failed

MODULES = (
    "ingress",
    "turns",
    "conversation",
    "thread_read",
    "task_memory",
    "file_fetch",
    "store_claims",
    "first_text",
    "burst",
    "follow_ups",
    "recovery",
    "takeover",
)
#: Where a run writes unless asked: untracked, so trying the benchmarks never dirties the checkout.
DEFAULT_OUT = Path(__file__).resolve().parent / "results.local.json"
#: The committed results the README quotes; written only with --save.
SAVED_OUT = Path(__file__).resolve().parent / "results.json"
_EXAMPLES = """examples:
  python -m bench --quick                    every benchmark at small sizes (about 5 minutes on 2 cores)
  python -m bench --quick --only ingress     one module
  python -m bench --save                     full sizes; update bench/results.json for the README
  python -m bench --tiny --out /tmp/r.json   a smoke run into a file of your choice
"""
#: Wall-clock cap of one module's child process, by mode (seconds).
MODULE_CAP: dict[Mode, float] = {"full": 1200.0, "quick": 150.0, "tiny": 90.0}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="\n".join(__doc__.splitlines()[2:]).strip(),
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="smaller counts; about 5 minutes on 2 cores")
    size.add_argument("--tiny", action="store_true", help="a handful of iterations (smoke test)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        metavar="PATH",
        help="results file (default bench/results.local.json)",
    )
    where.add_argument(
        "--save",
        action="store_const",
        dest="out",
        const=SAVED_OUT,
        help="write bench/results.json (committed)",
    )
    parser.add_argument(
        "--only", nargs="+", choices=MODULES, metavar="MODULE", help=f"any of: {', '.join(MODULES)}"
    )
    parser.add_argument("--child", choices=MODULES, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    mode: Mode = "tiny" if args.tiny else "quick" if args.quick else "full"
    if args.child:
        measured = asyncio.run(_run_module(args.child, mode))
        args.out.write_text(json.dumps([r.as_json() for r in measured]))
        return 0
    started = time.monotonic()
    results: list[dict[str, Any]] = []
    crashed = False
    for name in args.only or MODULES:
        print(f"… {name}", file=sys.stderr, flush=True)
        rows, ok = _run_child(name, mode)
        results += rows
        crashed |= not ok
    report = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "mode": mode,
        "seconds": round(time.monotonic() - started, 1),
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(table(results))
    print(f"\n{mode} run: {report['seconds']} s; results in {args.out}")
    return 1 if crashed else 0


async def _run_module(name: str, mode: Mode) -> list[Row]:
    module = importlib.import_module(f"bench.{name}")
    rows: list[Row] = await module.run(SCALES[mode])
    return rows


def _run_child(name: str, mode: Mode) -> tuple[list[dict[str, Any]], bool]:
    """Run one module in a fresh interpreter; a crash or timeout becomes unmet rows with the reason."""
    module = importlib.import_module(f"bench.{name}")
    row_names: tuple[str, ...] = module.ROWS
    cap: float = getattr(module, "CAP", {}).get(mode, MODULE_CAP[mode])
    with tempfile.TemporaryDirectory(prefix="bench-child-") as tmp:
        out = Path(tmp) / "rows.json"
        log = Path(tmp) / "child.log"
        argv = [sys.executable, "-m", "bench", "--child", name, "--out", str(out)]
        if mode != "full":
            argv.append(f"--{mode}")
        try:
            with log.open("wb") as sink:
                proc = subprocess.run(argv, stdout=sink, stderr=sink, timeout=cap, check=False)
            why = f"exit status {proc.returncode}"
        except subprocess.TimeoutExpired:
            why = f"timed out after {cap:.0f} s"
        if out.exists():
            rows: list[dict[str, Any]] = json.loads(out.read_text())
            return rows, True
        tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
        print(f"{name}: {why}\n{log.read_text(errors='replace')[-4000:]}", file=sys.stderr)
        return [failed(n, "", "", f"{why}: {tail}"[:300]).as_json() for n in row_names], False


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def _ratio(row: dict[str, Any]) -> str:
    spread = row.get("spread")
    if spread is None:
        return _fmt(row["ratio"])
    return f"{_fmt(row['ratio'])} [{_fmt(spread[0])}–{_fmt(spread[1])}]"


def table(results: Sequence[dict[str, Any]]) -> str:
    header = ("name", "ours", "baseline", "ratio", "unit", "target", "met")
    lines = [
        (
            r["name"],
            _fmt(r["ours"]),
            _fmt(r["baseline"]),
            _ratio(r),
            r["unit"],
            r["target"],
            "yes" if r["met"] else "skipped" if r.get("skipped") else "NOT MET",
        )
        for r in results
    ]
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in lines]
    notes = [f"  {r['name']}: {r['note']}" for r in results if r.get("note")]
    if notes:
        out += ["", "notes:", *notes]
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
