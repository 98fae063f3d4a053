"""Shared plumbing: subprocess servers, the load generator, RSS sampling, statistics.

Every load test sends traffic only to 127.0.0.1, sends a fixed number of
requests and stops at a wall-clock cap, whichever comes first.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import statistics
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import aiohttp
import psutil

from tests.support import events
from tests.support.memory import PeakRss
from tests.support.process import LOOPBACK, REPO, ServerProcess
from threadbound_emulator import FakeSlack

T = TypeVar("T")

SIGNING_SECRET = "bench-signing-secret"
#: ``USER_MAX_RUNS`` for our side: far above any row's concurrency (one person sends every delivery).
USER_MAX_RUNS = 100_000


class SlackAt(Protocol):
    """Where the app finds Slack: a FakeSlack here, or one in ``bench.fakes`` (``HelperSlack``)."""

    @property
    def token(self) -> str: ...
    @property
    def api_url(self) -> str: ...
    @property
    def files_origin(self) -> str: ...


@dataclass(frozen=True)
class HelperSlack:
    """The FakeSlack of a ``bench.fakes`` helper process, by its URLs."""

    token: str
    api_url: str
    files_origin: str

    @classmethod
    def of(cls, info: dict[str, Any]) -> HelperSlack:
        return cls(str(info["token"]), str(info["api_url"]), str(info["files_origin"]))


# -- subprocess servers (``tests.support.process.ServerProcess``) ----------------------------------------


async def quiet(server: ServerProcess, cap: float, busy_below: float = 0.1, window: float = 0.3) -> None:
    """Wait until the server uses under ``busy_below`` of a core over ``window`` seconds
    (or ``cap`` seconds passed)."""
    deadline = time.monotonic() + cap
    while time.monotonic() < deadline:
        before = cpu_seconds(server)
        await asyncio.sleep(window)
        if cpu_seconds(server) - before < busy_below * window:
            return


def cpu_seconds(server: ServerProcess) -> float:
    """User + system CPU the server used so far."""
    times = psutil.Process(server.pid).cpu_times()
    return float(times.user + times.system)


def our_server(slack: SlackAt, model_base_url: str, data_dir: Path, log: Path, **env: str) -> ServerProcess:
    """The real ``python -m app serve``, configured through the environment only, like production.
    The working directory is ``data_dir`` so no ``.env``, ``agent.toml`` or ``skills/`` leaks in."""
    data_dir.mkdir(parents=True, exist_ok=True)
    values = {
        "SLACK_BOT_TOKEN": slack.token,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": slack.api_url,
        "SLACK_FILE_ORIGINS": slack.files_origin,
        "DATA_DIR": str(data_dir),
        "MODEL": "openai-chat:fake",
        "OPENAI_BASE_URL": model_base_url,
        "OPENAI_API_KEY": "bench",
        "SWEEP_INTERVAL": "3600",
        # The rows compare a whole post with the baseline's; first_text_latency turns streaming on.
        "STREAM": "off",
        # Every bench delivery comes from one person (U1); the rows compare with a peer that has no
        # per-person cap, so the cap must not queue the bench's conversations behind four slots.
        "USER_MAX_RUNS": str(USER_MAX_RUNS),
        **env,
    }
    return ServerProcess(values, cwd=data_dir, log_path=log, start_timeout=60, stop_timeout=30)


def bolt_server(
    slack: SlackAt, mode: str, log: Path, cwd: Path, *, model_base_url: str = "", **env: str
) -> ServerProcess:
    """The baseline: a Bolt ``AsyncApp`` on aiohttp (see ``bench.bolt_baseline``); ``env`` as for ours."""
    values = {
        "SLACK_BOT_TOKEN": slack.token,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": slack.api_url,
        "MODEL": "openai-chat:fake",
        "OPENAI_BASE_URL": model_base_url,
        "OPENAI_API_KEY": "bench",
        **env,
    }
    argv = [sys.executable, "-m", "bench.bolt_baseline", mode]
    return ServerProcess(
        values, cwd=cwd, log_path=log, argv=argv, name=f"bolt-{mode}", start_timeout=60, stop_timeout=30
    )


# -- the load generator ----------------------------------------------------------------------------


@dataclass
class LoadStats:
    """What one load phase observed at the client."""

    sent: int = 0
    ok: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    errors: int = 0
    #: Ack latency of every 2xx answer, seconds.
    latencies: list[float] = field(default_factory=list)
    elapsed: float = 0.0
    capped: bool = False

    @property
    def rate(self) -> float:
        return self.ok / self.elapsed if self.elapsed > 0 else 0.0

    def problems(self) -> str:
        bad = {s: n for s, n in self.statuses.items() if not 200 <= s < 300}
        parts = []
        if bad:
            parts.append(f"statuses {bad}")
        if self.errors:
            parts.append(f"{self.errors} connection errors")
        if self.capped:
            parts.append(f"time cap hit after {self.sent} sends")
        return "; ".join(parts)


async def deliver_all(
    url: str,
    envelopes: Sequence[dict[str, Any]],
    *,
    in_flight: int,
    time_cap: float,
    on_sent: Callable[[int, float], None] | None = None,
) -> LoadStats:
    """POST every envelope, signed at send time, with at most ``in_flight`` outstanding; stop
    sending at ``time_cap`` seconds. ``on_sent(index, t0)`` sees each send's start (perf_counter)."""
    stats = LoadStats()
    bodies = [json.dumps(e).encode() for e in envelopes]  # serialised up front: not the client's cost
    next_index = 0
    started = time.perf_counter()
    deadline = started + time_cap
    connector = aiohttp.TCPConnector(limit=in_flight, force_close=False)
    timeout = aiohttp.ClientTimeout(total=max(time_cap, 10.0))

    async def worker(http: aiohttp.ClientSession) -> None:
        nonlocal next_index
        while next_index < len(bodies):
            if time.perf_counter() > deadline:
                stats.capped = True
                return
            index = next_index
            next_index += 1
            body = bodies[index]
            headers = events.sign(body, SIGNING_SECRET)
            t0 = time.perf_counter()
            if on_sent is not None:
                on_sent(index, t0)
            stats.sent += 1
            try:
                async with http.post(url, data=body, headers=headers) as response:
                    await response.read()
                    status = response.status
            except (aiohttp.ClientError, OSError, TimeoutError):
                stats.errors += 1
                continue
            took = time.perf_counter() - t0
            stats.statuses[status] = stats.statuses.get(status, 0) + 1
            if 200 <= status < 300:
                stats.ok += 1
                stats.latencies.append(took)

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        await asyncio.gather(*(worker(http) for _ in range(in_flight)))
    stats.elapsed = time.perf_counter() - started
    return stats


async def deliver_at_rate(
    url: str, envelopes: Sequence[dict[str, Any]], *, rate: float, time_cap: float
) -> LoadStats:
    """POST the envelopes open-loop, one every ``1 / rate`` seconds whatever the answers take (a
    slow answer does not slow the sender, as with Slack); each latency runs from the send's
    scheduled moment, so waiting in the client's queue counts too."""
    stats = LoadStats()
    bodies = [json.dumps(e).encode() for e in envelopes]
    connector = aiohttp.TCPConnector(limit=1000)
    timeout = aiohttp.ClientTimeout(total=max(time_cap, 10.0))

    async def one(http: aiohttp.ClientSession, body: bytes, due: float) -> None:
        try:
            async with http.post(url, data=body, headers=events.sign(body, SIGNING_SECRET)) as response:
                await response.read()
                status = response.status
        except (aiohttp.ClientError, OSError, TimeoutError):
            stats.errors += 1
            return
        stats.statuses[status] = stats.statuses.get(status, 0) + 1
        if 200 <= status < 300:
            stats.ok += 1
            stats.latencies.append(time.perf_counter() - due)

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        started = time.perf_counter()
        sends = []
        for index, body in enumerate(bodies):
            due = started + index / rate
            if due > started + time_cap:
                stats.capped = True
                break
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            stats.sent += 1
            sends.append(asyncio.create_task(one(http, body, due)))
        await asyncio.gather(*sends)
    stats.elapsed = time.perf_counter() - started
    return stats


async def warm_up(url: str, envelopes: Sequence[dict[str, Any]]) -> None:
    """A few deliveries before measuring: imports, caches and connections are paid outside the numbers."""
    await deliver_all(url, envelopes, in_flight=min(4, len(envelopes)), time_cap=30.0)


# -- memory -----------------------------------------------------------------------------------------


def rss(pid: int | None = None) -> int:
    return int(psutil.Process(pid).memory_info().rss)


def report_growth(first: tracemalloc.Snapshot, last: tracemalloc.Snapshot, n: int, top: int = 20) -> None:
    """The biggest growths between two tracemalloc snapshots, by traceback and by the innermost line of
    ours on it, divided by ``n`` (conversations, runs), to stderr."""
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__)]
    stats = last.filter_traces(ignore).compare_to(first.filter_traces(ignore), "traceback")
    grown = sorted((s for s in stats if s.size_diff > 0), key=lambda s: s.size_diff, reverse=True)
    total = sum(s.size_diff for s in stats)
    print(f"tracemalloc: {total / n:.0f} B each net over {n}", file=sys.stderr)
    for stat in grown[:top]:
        print(f"{stat.size_diff / n:8.0f} B {stat.count_diff / n:6.2f} blocks each", file=sys.stderr)
        for line in stat.traceback.format(limit=8, most_recent_first=True):
            print(f"    {line}", file=sys.stderr)
    # The same growth by the innermost line of ours (app/, channel/, storage/) on each traceback.
    ours_at = tuple(f"{REPO}/{package}/" for package in ("app", "channel", "storage"))
    ours: dict[str, int] = {}
    for stat in stats:
        frame = next((f for f in reversed(stat.traceback) if f.filename.startswith(ours_at)), None)
        where = f"{frame.filename.removeprefix(f'{REPO}/')}:{frame.lineno}" if frame else "(no frame of ours)"
        ours[where] = ours.get(where, 0) + stat.size_diff
    print("by the innermost line of ours:", file=sys.stderr)
    for where, size in sorted(ours.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{size / n:8.0f} B  {where}", file=sys.stderr)


# -- statistics ---------------------------------------------------------------------------------------


async def rss_growth(work: Callable[[], Awaitable[T]], trace: int, n: int) -> tuple[int, int, T]:
    """RSS before and after ``work()``, each after a full collection, and what it returned; with
    ``trace`` (frames), tracemalloc's growth over it per conversation is printed too."""
    gc.collect()
    first = None
    if trace:
        tracemalloc.start(trace)
        first = tracemalloc.take_snapshot()
    before = rss()
    result = await work()
    gc.collect()
    after = rss()
    if first is not None:
        report_growth(first, tracemalloc.take_snapshot(), n)
        tracemalloc.stop()
    return before, after, result


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100), nearest-rank: an observed value, never interpolated."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


__all__ = [
    "LOOPBACK",
    "REPO",
    "SIGNING_SECRET",
    "HelperSlack",
    "LoadStats",
    "PeakRss",
    "ServerProcess",
    "SlackAt",
    "bench_workspace",
    "bolt_server",
    "cpu_seconds",
    "deliver_all",
    "deliver_at_rate",
    "median",
    "our_server",
    "percentile",
    "quiet",
    "report_growth",
    "rss",
    "rss_growth",
    "warm_up",
]


def bench_workspace(slack: FakeSlack, channels: int) -> list[str]:
    """Channels ``C0000``… named ``bench-N`` and the one person who mentions the bot; the channel ids."""
    ids = [f"C{c:04d}" for c in range(channels)]
    for c, channel in enumerate(ids):
        slack.add_channel(channel, f"bench-{c}")
    slack.add_user("U1", "alice", display_name="Alice")
    return ids
