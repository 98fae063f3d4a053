"""threadbound's benchmarks: ``python -m bench [--quick|--tiny] [--only NAME ...] [--save|--out PATH]``.

Each benchmark module exposes ``ROWS`` (the row names it produces) and
``async def run(scale: Scale) -> list[Row]``. ``python -m bench`` runs every
module in a fresh child process (so one benchmark's heap, threads and sockets
never distort the next one's RSS or timings), prints a table and writes
``bench/results.local.json`` (untracked), or ``bench/results.json`` with ``--save``.

A row compares ``ours`` with a ``baseline`` measured in the same run, on the same
machine, with the same client: ``ratio = ours / baseline`` and ``target`` says
which direction is good (``">= 0.7"``, ``"<= 1.5"``). Absolute targets have no
baseline (``"<= 150 KiB"``). ``met`` is computed, never edited. A timed row runs its two sides
alternately, round after round, and passes ``ratio`` itself: the median of the rounds' ratios, with
their ``spread`` (lowest, highest) beside it.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Mode = Literal["full", "quick", "tiny"]

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
}
_TARGET = re.compile(r"^\s*(>=|<=|>|<)\s*([0-9.]+)")


@dataclass(frozen=True)
class Scale:
    """How big each benchmark is; ``--quick`` takes about 5 minutes on 2 cores."""

    mode: Mode
    #: Deliveries per ingress burst, rounds (every side once per round, alternating), in flight.
    ingress_deliveries: int
    ingress_rounds: int = 3
    ingress_in_flight: int = 50
    #: The sustained phase of ingress_p99_ack: deliveries per second, for this many seconds.
    ingress_rate: float = 100.0
    ingress_sustain: float = 10.0
    #: Turns per concurrency level (split evenly over ``turn_rounds`` alternating rounds per side).
    turns: int = 200
    turn_rounds: int = 3
    turn_concurrency: tuple[int, ...] = (1, 50)
    #: Whether each side first has a turn in every channel of the turn rows (steady-state caches).
    turn_warm_channels: bool = True
    #: The thread read: messages, distinct authors, page size.
    thread_messages: int = 2000
    thread_authors: int = 25
    page: int = 15
    #: Conversations waiting on the slow model.
    conversations: int = 1000
    #: File size and how many fetches per side.
    file_bytes: int = 100 * 2**20
    file_rounds: int = 3
    #: Claims per round, rounds per side.
    claims: int = 2000
    claim_rounds: int = 3
    #: Turns of the scripted conversation (tokens_per_turn, cacheable_prefix, slack_calls_per_turn).
    conversation_turns: int = 30
    #: Mentions of the rate-limited burst, over two channels (burst_delivery).
    burst_mentions: int = 40
    #: Follow-ups due at one instant (follow_up_fire_lag).
    follow_ups: int = 1000
    #: Wall-clock cap of one load phase (seconds): every load test stops by itself.
    time_cap: float = 60.0


SCALES: dict[Mode, Scale] = {
    "full": Scale("full", ingress_deliveries=2000),
    "quick": Scale(
        "quick",
        ingress_deliveries=500,
        ingress_sustain=3.0,
        # Five alternating rounds a side (twenty turns each at c=1): a turn is ~15 ms, so a round's
        # median moves with the machine; five rounds' median ratio is steadier than three.
        turns=100,
        turn_rounds=5,
        conversations=1000,
        claims=500,
        follow_ups=300,
        time_cap=20.0,
    ),
    "tiny": Scale(
        "tiny",
        ingress_deliveries=20,
        ingress_rounds=1,
        ingress_in_flight=10,
        ingress_sustain=0.5,
        turns=4,
        turn_rounds=1,
        turn_warm_channels=False,  # a smoke test: 200 warm-up turns a side would be most of its time
        thread_messages=60,
        thread_authors=5,
        conversations=10,
        file_bytes=2 * 2**20,
        file_rounds=1,
        claims=20,
        claim_rounds=1,
        conversation_turns=4,
        burst_mentions=6,
        follow_ups=20,
        time_cap=10.0,
    ),
}


@dataclass
class Row:
    """One line of the results table (and of ``results.json``)."""

    name: str
    ours: float | None
    baseline: float | None
    unit: str
    #: ``"<op> <number>"`` on the ratio when there is a baseline (and not ``absolute``), else on
    #: ``ours``; words after the number are for the reader ("<= 2.0 and ours < 3 s").
    target: str
    ratio: float | None = None
    met: bool = False
    #: The target bounds ``ours`` itself even though a baseline is shown (e.g. "<= 2 calls").
    absolute: bool = False
    #: Not measured in this run (e.g. no Postgres configured): shown as skipped, never as met.
    skipped: bool = False
    #: Extra conditions that must hold too (e.g. the absolute p99 bound): name → held.
    also: dict[str, bool] = field(default_factory=dict)
    note: str = ""
    #: The lowest and highest per-round ratio, when ``ratio`` is their median.
    spread: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.ratio is None and self.ours is not None and self.baseline:
            self.ratio = self.ours / self.baseline
        self.met = self._evaluate()

    def _evaluate(self) -> bool:
        match = _TARGET.match(self.target)
        if match is None or self.ours is None:
            return False
        value = self.ours if self.absolute or self.baseline is None else self.ratio
        if value is None:
            return False
        return _OPS[match.group(1)](value, float(match.group(2))) and all(self.also.values())

    def as_json(self) -> dict[str, Any]:
        # ``absolute`` and ``also`` appear only when set: with them a reader can recompute ``met``.
        out = asdict(self)
        if not out["also"]:
            out.pop("also")
        if not out["absolute"]:
            out.pop("absolute")
        if not out["skipped"]:
            out.pop("skipped")
        if not out["note"]:
            out.pop("note")
        if out["spread"] is None:
            out.pop("spread")
        return out


def failed(name: str, unit: str, target: str, why: str) -> Row:
    """A row for a benchmark that could not produce a number: printed as not met, with the reason."""
    return Row(name, None, None, unit, target, note=f"error: {why}")


def ratios(ours: list[float], base: list[float]) -> tuple[float | None, tuple[float, float] | None]:
    """The median of the per-round ratios ``ours[i] / base[i]`` and their (lowest, highest)."""
    each = sorted(o / b for o, b in zip(ours, base, strict=True) if b)
    if not each:
        return None, None
    middle = len(each) // 2
    med = each[middle] if len(each) % 2 else (each[middle - 1] + each[middle]) / 2
    return round(med, 3), (round(each[0], 3), round(each[-1], 3))


__all__ = ["SCALES", "Mode", "Row", "Scale", "failed", "ratios"]
