"""SQLite jobs run on the caller's thread while the process has nothing else to do (``Store.inline_when``):
where each statement runs, that the loop never waits there for another process's lock, and who
says the process has nothing else to do (the scheduler, the HTTP edge)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.intake.http import HttpEdge
from app.runs.ack_gate import AckGate
from app.runs.scheduler import Scheduler
from storage.sqlite import SQLiteStore

T0 = 1_700_000_000.0


class Traced:
    """The store's connection, every statement it runs noted with the thread that ran it."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __call__(self, statement: str) -> None:
        self.lines.append((threading.current_thread().name, statement))

    def threads_of(self, word: str) -> set[str]:
        return {thread for thread, statement in self.lines if word in statement}


@pytest.fixture
async def traced(tmp_path: Path) -> AsyncIterator[tuple[SQLiteStore, Traced, list[bool]]]:
    """A migrated store whose ``inline_when`` says what the returned flag says (nothing else to do: True)."""
    store = SQLiteStore(tmp_path / "store.db")
    alone = [True]
    store.inline_when(lambda: alone[0])
    await store.migrate()
    trace = Traced()
    await store.database._run(lambda db: db.set_trace_callback(trace))
    try:
        yield store, trace, alone
    finally:
        await store.close()


async def claim(store: SQLiteStore, n: int) -> str:
    outcome = await store.claim_message(
        event_id=f"Ev{n}", channel="C1", ts=f"{n}.0", thread_ts=f"{n}.0", create=True, payload="{}", now=T0
    )
    assert outcome.status == "claimed" and outcome.task_id is not None
    return outcome.task_id


async def test_jobs_run_on_the_callers_thread_only_while_the_process_is_alone(
    traced: tuple[SQLiteStore, Traced, list[bool]],
) -> None:
    store, trace, alone = traced
    main = threading.current_thread().name
    task_id = await claim(store, 1)  # a batch (the claim procedure)
    assert await store.pending_inbox(task_id)  # a read
    assert trace.threads_of("INSERT") == {main} and trace.threads_of("SELECT") == {main}

    trace.lines.clear()
    alone[0] = False  # another run works, or a delivery waits for its 200: the thread does it
    task_id = await claim(store, 2)
    assert await store.pending_inbox(task_id)
    assert main not in trace.threads_of("INSERT") | trace.threads_of("SELECT")
    assert trace.threads_of("INSERT")  # it ran, on the database thread


async def test_the_loop_never_waits_for_another_process_lock(
    traced: tuple[SQLiteStore, Traced, list[bool]],
) -> None:
    """Another connection holds the write lock: the claim's BEGIN fails at once on the loop's
    thread and the database thread waits for the lock instead; the loop goes on meanwhile."""
    store, trace, _ = traced
    main = threading.current_thread().name
    other = sqlite3.connect(store.path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        pending = asyncio.create_task(claim(store, 1))
        for _ in range(20):  # many loop laps: were the loop's thread waiting, none would pass
            await asyncio.sleep(0.005)
        assert not pending.done()  # waiting for the lock, on the database thread
        assert trace.threads_of("INSERT") == set()
        other.execute("COMMIT")
        task_id = await asyncio.wait_for(pending, 10)
    finally:
        other.close()
    assert (await store.stats()).tasks == 1 and await store.pending_inbox(task_id)
    assert main not in trace.threads_of("INSERT")  # done by the thread once the lock was free
    assert any(thread == main and "busy_timeout = 0" in s for thread, s in trace.lines)  # tried here first


async def test_the_scheduler_is_alone_with_one_driver_and_no_delivery_waiting(tmp_path: Path) -> None:
    gate = AckGate()
    scheduler = Scheduler(store=SQLiteStore(tmp_path / "s.db"), executor=None, ack_gate=gate)  # type: ignore[arg-type]
    assert scheduler.nothing_else_to_do()
    never = asyncio.get_running_loop().create_future()
    drivers = [asyncio.ensure_future(never) for _ in range(2)]
    scheduler._drivers["t1"] = drivers[0]
    assert scheduler.nothing_else_to_do()  # the caller's own run
    scheduler._drivers["t2"] = drivers[1]
    assert not scheduler.nothing_else_to_do()
    del scheduler._drivers["t2"]
    with gate.acking():
        assert not scheduler.nothing_else_to_do()  # a delivery waits for its 200: acks first
    assert scheduler.nothing_else_to_do()
    never.cancel()


def test_the_edge_is_alone_with_at_most_one_delivery_in_flight() -> None:
    gate = AckGate()
    edge = HttpEdge.__new__(HttpEdge)
    edge._ack_gate = gate
    assert edge.nothing_else_to_do()
    with gate.acking():
        assert edge.nothing_else_to_do()  # the delivery whose claim asks
        with gate.acking():
            assert not edge.nothing_else_to_do()
