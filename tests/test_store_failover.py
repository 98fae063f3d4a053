"""What a database failover leaves behind, taken apart: the store's next calls on a pool of dead
sessions, the writes made again once, and a driver that failed driven again. The whole turn across a
failover at every point is ``tests/test_failover_matrix.py``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import asyncpg
import psutil
import pytest

from app.runs import scheduler as scheduler_module
from app.runs.outcome import RunOutcome
from app.runs.scheduler import Scheduler
from channel.contract import AdapterBase
from storage.base import LeaseMoved, StoreError, retry_if_session_ended
from storage.postgres import PostgresStore, _never_sent, _reads_only
from storage.sqlite import SQLiteStore
from tests.support.postgres import fresh_schema
from tests.support.waiting import eventually


def _ended(message: str = "terminating connection", *, lease: bool = False) -> StoreError:
    error = LeaseMoved(message) if lease else StoreError(message)
    error.session_ended = True
    return error


async def test_retry_if_session_ended_makes_a_write_again_only_when_its_session_ended() -> None:
    calls: list[int] = []

    def failing(*errors: StoreError) -> Any:
        left = list(errors)

        async def write() -> str:
            calls.append(1)
            if left:
                raise left.pop(0)
            return "done"

        return write

    assert await retry_if_session_ended(failing(_ended())) == "done" and len(calls) == 2
    calls.clear()
    with pytest.raises(StoreError):  # a second ended session is final
        await retry_if_session_ended(failing(_ended(), _ended()))
    assert len(calls) == 2
    calls.clear()
    with pytest.raises(StoreError):  # a timeout, a constraint: not made again
        await retry_if_session_ended(failing(StoreError("busy")))
    assert len(calls) == 1
    calls.clear()
    with pytest.raises(LeaseMoved):  # the lease moved: never
        await retry_if_session_ended(failing(_ended(lease=True)))
    assert len(calls) == 1


def test_only_reads_and_statements_never_sent_are_made_again_after_an_ended_session() -> None:
    assert _reads_only("SELECT task_id FROM tasks WHERE task_id = $1")
    assert _reads_only("  with x as (select 1) select * from x")
    assert not _reads_only("INSERT INTO handles VALUES ($1)")
    assert not _reads_only("WITH moved AS (UPDATE leases SET owner = $1 RETURNING *) SELECT * FROM moved")
    assert not _reads_only("SELECT pg_advisory_lock($1, $2)")
    assert not _reads_only("SELECT * FROM leases WHERE task_id = $1 FOR UPDATE")
    sent_and_lost = asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed in the middle")
    assert not _never_sent(sent_and_lost)  # it may have run: a write is not made again
    assert _never_sent(asyncpg.exceptions.InternalClientError("cannot switch to state 12"))
    broken = asyncpg.exceptions.ConnectionDoesNotExistError("closed")
    broken.__cause__ = BrokenPipeError(32, "Broken pipe")  # the write to its socket failed
    assert _never_sent(broken)


def _terminate_blocking(url: str, ports: list[int]) -> None:
    """End the sessions at ``ports`` from another process, this one's event loop blocked meanwhile."""
    script = (
        "import asyncio, asyncpg, sys\n"
        "async def main():\n"
        "    conn = await asyncpg.connect(sys.argv[1])\n"
        "    ports = [int(p) for p in sys.argv[2:]]\n"
        "    q = 'SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity'\n"
        "    q += ' WHERE client_port = ANY($1)'\n"
        "    print(await conn.fetchval(q, ports))\n"
        "    await conn.close()\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, url, *map(str, ports)], capture_output=True, text=True, check=True
    )
    assert int(done.stdout) == len(ports), done
    time.sleep(0.2)  # their goodbyes reach this process's sockets, unread


def _own_ports(url: str) -> list[int]:
    port = int(url.rsplit(":", 1)[-1].split("/", 1)[0]) if ":" in url.split("@")[-1] else 5432
    return [
        c.laddr.port
        for c in psutil.Process(os.getpid()).net_connections(kind="tcp")
        if c.raddr and c.raddr.port == port
    ]


@pytest.mark.process
async def test_a_pool_of_ended_sessions_answers_the_next_read_and_the_write_made_again() -> None:
    """Every session of the store's pool ended while idle (a restart): the next read is answered
    (made again on a new session), and so is a claim made again by ``retry_if_session_ended``; the
    pool's other dead connections are replaced rather than failing call after call."""
    async with fresh_schema("tb_store_failover") as pg:
        store = PostgresStore(pg.url, min_size=3, max_size=3)
        await store.migrate()
        try:
            await asyncio.gather(*(store.find_task("C1", str(n)) for n in range(6)))
            ports = _own_ports(pg.base)
            assert len(ports) >= 3, ports
            # Ended while this process's loop is busy (as a stalled or loaded process would be): the
            # backends' goodbyes wait unread in the idle connections until their next use.
            _terminate_blocking(pg.base, ports)
            assert await store.find_task("C1", "1.0") is None
            outcome = await retry_if_session_ended(
                lambda: store.claim_message(
                    event_id="Ev1",
                    channel="C1",
                    ts="1.0",
                    thread_ts="1.0",
                    create=True,
                    payload=json.dumps({"text": "hi"}),
                    now=time.time(),
                )
            )
            assert outcome.status == "claimed"
            for n in range(3):  # every later call on a new session
                assert await store.find_task("C1", f"9.{n}") is None
        finally:
            await store.close()


async def _claim(store: SQLiteStore, ts: str, *, create: bool = False) -> Any:
    """A message ``ts`` in the thread of ``1.0`` in C1, claimed."""
    return await store.claim_message(
        event_id=f"Ev{ts}", channel="C1", ts=ts, thread_ts="1.0", create=create, payload="{}", now=time.time()
    )


async def test_a_driver_that_failed_is_driven_again_after_a_growing_back_off(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A run whose store call failed (a failover) is driven again a moment later, not left until the
    sweep; failing again, it waits twice as long, and nothing drives it meanwhile (a sweep or a
    delivery's wake-up): a store that stays down is not asked in a loop, and the message waits."""
    monkeypatch.setattr(scheduler_module, "DRIVER_RETRY_S", 0.1)
    store = SQLiteStore(tmp_path / "db.sqlite")
    await store.migrate()
    try:
        claimed = await _claim(store, "1.0", create=True)
        assert claimed.task_id is not None
        task_id = claimed.task_id
        failures = [StoreError("failover"), StoreError("failover"), StoreError("failover")]
        runs: list[float] = []

        class Executor:
            adapter = AdapterBase()

            async def run_inbox(
                self, task_id: str, items: Any, effects: Any, inbox: Any, **_: Any
            ) -> RunOutcome:
                runs.append(time.monotonic())
                if len(runs) <= allowed_failures:
                    raise failures.pop(0)
                await store.save_run(task_id, transcript=b"", consumed=[i.item_id for i in items])
                return RunOutcome(task_id, "ok", True)

            async def waiting(self, task_id: str) -> bool:
                return False

        allowed_failures = 1
        scheduler = Scheduler(store=store, executor=cast(Any, Executor()), owner="A")
        scheduler.notify(task_id)
        await eventually(lambda: len(runs) == 2, within=5)
        await eventually(lambda: task_id not in scheduler._drivers, within=5)
        assert await store.pending_inbox(task_id) == []
        # Failing twice in a row: driven again after 0.1 s, then after 0.2 s; a wake-up while it
        # rests starts nothing.
        again = await _claim(store, "2.0")
        assert again.status == "claimed"
        runs.clear()
        allowed_failures = 2
        scheduler.notify(task_id)
        await eventually(lambda: len(runs) == 2, within=5)
        scheduler.notify(task_id)
        await asyncio.sleep(0.05)
        assert len(runs) == 2 and len(await store.pending_inbox(task_id)) == 1
        await eventually(lambda: len(runs) == 3, within=5)
        assert runs[1] - runs[0] >= 0.1 and runs[2] - runs[1] >= 0.2, runs
        await eventually(lambda: task_id not in scheduler._drivers, within=5)
        assert await store.pending_inbox(task_id) == []
        assert not scheduler._failures and not scheduler._resting
        await scheduler.shutdown(1.0)
    finally:
        await store.close()
