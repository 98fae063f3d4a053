"""file_fetch_throughput and file_fetch_rss: ``channel_fetch_file`` of a 100 MiB file.

Setup. FakeSlack runs in a helper child process (``bench.fakes``) as the loopback file host, so
serving does not share the downloader's event loop. Ours is the real tool call:
``ChannelSession.call("channel_fetch_file", {"file": handle})`` with the tool enabled on the task,
a ``SlackAdapter`` pointed at the helper and a SQLite store; the handle carries no URL, so the
session asks ``files.info`` first, as for a Slack Connect file. Ours streams through its fences
(origin, size, content-type checks), hashes with SHA-256 and writes through aiofiles to a temp
file that is then renamed into place. The baseline is what the contract asks for, written plainly: an
aiohttp streamed GET whose chunks (same size) are hashed with SHA-256 and written to disk with
``open().write`` on the event loop (no origin, size or content-type checks).

Measurement. Rounds alternate baseline / ours; throughput is the file size over the median
wall time. Peak RSS is sampled on a thread every 2 ms during each fetch; the row is the largest
growth over ours' rounds (the baseline's is shown for comparison).
"""

from __future__ import annotations

import gc
import hashlib
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from channel.contract import Origin
from channel.selection import select_tools
from channel.session import ChannelSession
from channel.skills import SkillLibrary
from channel.slack.adapter import SlackAdapter, SlackIdentity
from channel.slack.downloads import CHUNK_BYTES
from storage import open_store

from . import Row, Scale, ratios
from .common import PeakRss, median
from .fakes import helper

ROWS = ("file_fetch_throughput", "file_fetch_rss")
FILE_ID = "F0BENCH001"
MIB = 2**20


async def run(scale: Scale) -> list[Row]:
    spec = {"files": [[FILE_ID, "big.bin", "application/octet-stream", scale.file_bytes]]}
    ours_t: list[float] = []
    base_t: list[float] = []
    ours_rss: list[int] = []
    base_rss: list[int] = []
    with tempfile.TemporaryDirectory(prefix="bench-files-") as tmp:
        root = Path(tmp)
        async with helper(spec) as fakes:
            fetch = await _OurFetch.open(fakes, root)
            try:
                url = f"{fakes['files_origin']}/files/{FILE_ID}/download/big.bin"
                for n in range(scale.file_rounds):
                    took, grew = await _measure(_plain_download(url, fakes["token"], root / f"plain-{n}.bin"))
                    base_t.append(took)
                    base_rss.append(grew)
                    took, grew = await _measure(fetch.once(scale.file_bytes))
                    ours_t.append(took)
                    ours_rss.append(grew)
                    _remove_downloads(root)
            finally:
                await fetch.close()
    size_mib = scale.file_bytes / MIB
    note = f"{size_mib:.0f} MiB, {scale.file_rounds} round(s) per side"
    # Throughput is size / time: the ratio of rates is the inverse ratio of times, round by round.
    ratio, spread = ratios(base_t, ours_t)
    return [
        Row(
            "file_fetch_throughput",
            round(size_mib / median(ours_t), 1),
            round(size_mib / median(base_t), 1),
            "MiB/s",
            ">= 0.8",
            ratio=ratio,
            spread=spread,
            note=note,
        ),
        Row(
            "file_fetch_rss",
            round(max(ours_rss) / MIB, 2),
            round(max(base_rss) / MIB, 2),
            "MiB",
            "<= 32 MiB",
            absolute=True,
            note=note + "; peak RSS growth during the fetch (baseline shown for comparison)",
        ),
    ]


def _remove_downloads(root: Path) -> None:
    for leftover in root.rglob("*.bin"):
        leftover.unlink()


async def _measure(work: Any) -> tuple[float, int]:
    gc.collect()
    with PeakRss() as peak:
        started = time.perf_counter()
        await work
        took = time.perf_counter() - started
    return took, peak.growth


async def _plain_download(url: str, token: str, dest: Path) -> str:
    headers = {"Authorization": f"Bearer {token}"}
    digest = hashlib.sha256()
    async with aiohttp.ClientSession() as http, http.get(url, headers=headers) as response:
        response.raise_for_status()
        with dest.open("wb") as out:
            async for chunk in response.content.iter_chunked(CHUNK_BYTES):
                digest.update(chunk)
                out.write(chunk)
    return digest.hexdigest()


class _OurFetch:
    """A session on a task whose ``channel_fetch_file`` is enabled, holding a handle to the file."""

    def __init__(self, session: ChannelSession, adapter: SlackAdapter, store: Any, handle: str) -> None:
        self.session = session
        self.adapter = adapter
        self.store = store
        self.handle = handle

    @classmethod
    async def open(cls, fakes: dict[str, Any], root: Path) -> _OurFetch:
        store = open_store(f"sqlite:///{root}/store.db")
        await store.migrate()
        identity = SlackIdentity(
            user_id="UBOT", bot_id="BBOT", team_id="T1", team_url="https://fake.slack.com/", scopes=()
        )
        adapter = SlackAdapter(
            token=fakes["token"],
            api_url=fakes["api_url"],
            identity=identity,
            file_origins=[fakes["files_origin"]],
        )
        created = await store.create_task(channel="C1", thread_ts="1700000000.000100", now=time.time())
        await store.set_enabled_tools(created.task_id, ["channel_fetch_file"])
        task = await store.get_task(created.task_id)
        assert task is not None
        features = frozenset({"read", "fetch_file"})
        session = ChannelSession(
            adapter=adapter,
            store=store,
            task=task,
            origin=Origin("C1", task.thread_ts),
            tools=select_tools(features, None, SkillLibrary([])),
            task_dir=root / "task",
        )
        # As a row of channel_read would mint it; no URL kept, so the tool asks files.info first.
        handle = await session.handles.mint("file", FILE_ID)
        return cls(session, adapter, store, handle)

    async def once(self, size: int) -> None:
        result = await self.session.call("channel_fetch_file", {"file": self.handle})
        if "error" in result or result.get("size") != size:
            raise RuntimeError(f"channel_fetch_file failed: {result}")

    async def close(self) -> None:
        await self.adapter.close()
        await self.store.close()
