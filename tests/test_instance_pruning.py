"""Instances that stopped or died holding nothing are forgotten: their rows and SQLite lock files."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import pytest

from storage.sqlite import SQLiteStore
from tests.conftest import StoreFactory
from tests.support.waiting import polls

T0 = 1_700_000_000.0

# A process that registers as instance "A" and is killed, holding no lease.
_DIES_IDLE = f"""
import asyncio, os, signal, sys
from storage import open_store

async def main(url):
    store = open_store(url)
    await store.register_instance("A", now={T0!r})
    os.kill(os.getpid(), signal.SIGKILL)

asyncio.run(main(sys.argv[1]))
"""


@pytest.mark.process
async def test_dead_and_stopped_instances_without_leases_are_pruned(store_factory: StoreFactory) -> None:
    """A killed instance and a cleanly stopped one, both holding no lease, are forgotten (rows and lock
    files); a live instance and a dead one still holding a lease are kept."""
    live = await store_factory()
    await live.register_instance("B", now=T0)
    stopped = await store_factory()
    await stopped.register_instance("C", now=T0)
    await stopped.close()
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", _DIES_IDLE, store_factory.url)
    assert await process.wait() == -signal.SIGKILL
    pruned = 0
    async for _ in polls():  # Postgres ends the killed session once it sees the connection close
        pruned += await live.prune_instances(now=T0 + 1)
        if pruned >= 2:
            break
    assert pruned == 2
    assert await live.prune_instances(now=T0 + 1) == 0  # the rows are gone
    if isinstance(live, SQLiteStore):
        locks = Path(f"{live.path}.instances")
        names = await asyncio.to_thread(lambda: sorted(p.name for p in locks.iterdir()))
        assert names == ["B.lock"]
    # The live one is untouched: still registered, so its leases count as alive.
    other = await store_factory()
    task = await other.create_task(channel="C1", thread_ts="1.1", now=T0)
    assert await live.acquire_lease(task.task_id, owner="B", ttl=600, now=T0)
    assert await other.dead_owners(now=T0 + 2) == []
