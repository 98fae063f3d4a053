"""Shared plumbing: subprocess servers, the load generator, RSS sampling, statistics.

Every load test sends traffic only to 127.0.0.1, sends a fixed number of
requests and stops at a wall-clock cap, whichever comes first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp
import psutil

from emulator import FakeSlack
from testing import events
from testing.harness import free_port

SIGNING_SECRET = "bench-signing-secret"
LOOPBACK = "127.0.0.1"
REPO = Path(__file__).resolve().parents[1]


# -- subprocess servers --------------------------------------------------------------------------


class ServerProcess:
    """A server in a child process on a free loopback port: started, waited for on ``/healthz``,
    stopped with SIGTERM (then SIGKILL after ``stop_timeout``). Output goes to ``log`` (a file,
    never a pipe: a full pipe would stall the server mid-benchmark)."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        env: dict[str, str],
        log: Path,
        *,
        cwd: Path,
        start_timeout: float = 60.0,
        stop_timeout: float = 30.0,
    ) -> None:
        self.name = name
        self.port = free_port()
        self.argv = list(argv)
        self.env = {**os.environ, **env, "PORT": str(self.port), "HOST": LOOPBACK}
        # Children run in temp directories: make this checkout importable there (bench.bolt_baseline).
        self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        self.log = log
        self.cwd = cwd
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def __aenter__(self) -> ServerProcess:
        with self.log.open("ab") as out:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv,
                env=self.env,
                cwd=self.cwd,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=out,
            )
        deadline = time.monotonic() + self.start_timeout
        async with aiohttp.ClientSession() as http:
            while True:
                if self.proc.returncode is not None:
                    raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {self.tail()}")
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with http.get(f"{self.url}/healthz") as response:
                        if response.status == 200:
                            return self
                if time.monotonic() > deadline:
                    await self.stop()
                    raise RuntimeError(f"{self.name} did not answer /healthz: {self.tail()}")
                await asyncio.sleep(0.05)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), self.stop_timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    async def quiet(self, cap: float, busy_below: float = 0.1, window: float = 0.3) -> None:
        """Wait until the server uses under ``busy_below`` of a core over ``window`` seconds
        (or ``cap`` seconds passed)."""
        deadline = time.monotonic() + cap
        while time.monotonic() < deadline:
            before = self.cpu_seconds()
            await asyncio.sleep(window)
            if self.cpu_seconds() - before < busy_below * window:
                return

    def cpu_seconds(self) -> float:
        """User + system CPU the server used so far."""
        times = psutil.Process(self.pid).cpu_times()
        return float(times.user + times.system)


def our_server(slack: FakeSlack, model_base_url: str, data_dir: Path, log: Path, **env: str) -> ServerProcess:
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
        **env,
    }
    return ServerProcess("threadbound", [sys.executable, "-m", "app", "serve"], values, log, cwd=data_dir)


def bolt_server(
    slack: FakeSlack, mode: str, log: Path, cwd: Path, *, model_base_url: str = "", **env: str
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
    return ServerProcess(f"bolt-{mode}", argv, values, log, cwd=cwd)


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


async def warm_up(url: str, envelopes: Sequence[dict[str, Any]]) -> None:
    """A few deliveries before measuring: imports, caches and connections are paid outside the numbers."""
    await deliver_all(url, envelopes, in_flight=min(4, len(envelopes)), time_cap=30.0)


# -- memory -----------------------------------------------------------------------------------------


def rss(pid: int | None = None) -> int:
    return int(psutil.Process(pid).memory_info().rss)


class PeakRss:
    """Samples a process's RSS every ``interval`` seconds on a thread (reading /proc costs the event
    loop nothing), keeping the peak. Use as a context manager around the measured work."""

    def __init__(self, pid: int | None = None, interval: float = 0.002) -> None:
        self._proc = psutil.Process(pid)
        self.interval = interval
        self.start = 0
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="peak-rss", daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(psutil.Error):
                self.peak = max(self.peak, int(self._proc.memory_info().rss))
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRss:
        self.start = self.peak = int(self._proc.memory_info().rss)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        with contextlib.suppress(psutil.Error):
            self.peak = max(self.peak, int(self._proc.memory_info().rss))

    @property
    def growth(self) -> int:
        return self.peak - self.start


# -- statistics ---------------------------------------------------------------------------------------


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
    "SIGNING_SECRET",
    "LoadStats",
    "PeakRss",
    "ServerProcess",
    "bolt_server",
    "deliver_all",
    "median",
    "our_server",
    "percentile",
    "rss",
    "warm_up",
]


def bench_workspace(slack: FakeSlack, channels: int) -> list[str]:
    """Channels ``C0000``… named ``bench-N`` and the one person who mentions the bot; the channel ids."""
    ids = [f"C{c:04d}" for c in range(channels)]
    for c, channel in enumerate(ids):
        slack.add_channel(channel, f"bench-{c}")
    slack.add_user("U1", "alice", display_name="Alice")
    return ids
