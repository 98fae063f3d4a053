"""The SQLite store's database thread: one daemon thread that runs the store's jobs in order, each
settling its caller's future on the caller's loop; while it has none, a caller may run its job on
its own thread instead (:meth:`DatabaseThread.run_here`)."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class Db(sqlite3.Connection):
    """The store's connection (``sqlite3.connect(factory=Db)``). It keeps the two settings its jobs
    switch as they are now, so that a switch costs a statement only when it changes one: whether
    it waits ``busy_ms`` for another connection's lock (the database thread's jobs) or not at all
    (a job run on the caller's thread), and whether a commit syncs the WAL (``synchronous = FULL``,
    the store's default) or not (``NORMAL``: a batch of writes synced by the next commit)."""

    busy_ms = 0
    _waits = True
    _synced = True

    def waits_for_locks(self, on: bool) -> None:
        if self._waits != on:
            self.execute(f"PRAGMA busy_timeout = {self.busy_ms if on else 0}")
            self._waits = on

    def syncs(self, on: bool) -> None:
        if self._synced != on:
            # Outside any transaction: SQLite refuses to change it inside one.
            self.execute(f"PRAGMA synchronous = {'FULL' if on else 'NORMAL'}")
            self._synced = on


class DatabaseThread:
    """One daemon thread that opens the connection on its first job and runs jobs in order.

    Daemon: a store never closed cannot keep the process from exiting (every commit is durable
    when it returns; an interrupted transaction is rolled back by SQLite on the next open).
    """

    def __init__(self, opener: Callable[[], Db], name: str) -> None:
        self._opener = opener
        self._db: Db | None = None
        self._jobs: queue.SimpleQueue[tuple[Callable[[Db], Any], asyncio.Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        #: Set by ``stop``: jobs submitted afterwards (from another loop's thread) fail at once.
        self._stopping = False
        self._lock = threading.Lock()
        #: Jobs submitted and not yet run to their end: ``run_here`` waits for none of them.
        self._pending = 0
        #: Held by whoever uses the connection: the thread for each job, or a ``run_here`` caller.
        self._use = threading.Lock()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[Db], T]) -> asyncio.Future[T]:
        """Queue ``fn(connection)``; the future is settled on the caller's loop (any thread's)."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        with self._lock:
            if self._stopping:
                future.set_exception(sqlite3.ProgrammingError("the database thread has stopped"))
            else:
                self._pending += 1
                self._jobs.put((fn, future))
        return future

    def run_here(self, fn: Callable[[Db], T]) -> tuple[bool, T | None]:
        """``(True, fn(connection))``, run on the calling thread, when no job is queued or running
        (so jobs still use the connection one at a time, each after those made before it);
        ``(False, None)`` when there is one, or before the thread opened the connection. What
        ``fn`` raises reaches the caller."""
        if self._pending or self._db is None or self._stopping:
            return False, None
        if not self._use.acquire(blocking=False):  # another loop's thread is running one here
            return False, None
        try:
            db = self._db
            if self._pending or db is None:  # a job was queued from another thread meanwhile
                return False, None
            return True, fn(db)
        finally:
            self._use.release()

    async def stop(self) -> None:
        """Close the connection after the jobs queued so far, then end the thread."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._stopping = True
            self._pending += 1
            self._jobs.put((self._close, future))
            self._jobs.put(None)
        try:
            await future
        finally:
            await asyncio.to_thread(self._thread.join)  # returns at once: the thread is past its last job

    def _close(self, db: Db) -> None:
        self._db = None
        db.close()

    def _main(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, future = job
            with self._use:
                try:
                    if self._db is None and fn != self._close:
                        self._db = self._opener()
                    if self._db is not None and fn != self._close:
                        # Each job here starts waiting for locks and syncing its commits.
                        self._db.waits_for_locks(True)
                        self._db.syncs(True)
                    result, error = (fn(self._db) if self._db is not None else None), None
                except BaseException as exc:  # handed to the caller, whatever it is
                    result, error = None, exc
            with self._lock:
                self._pending -= 1
            _settle(future, result, error)
        if self._db is not None:  # stop() without its close job having run (cannot happen; cheap)
            self._db.close()


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    def settle() -> None:
        if future.done():  # its caller was cancelled
            return
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)

    # The caller's loop may be closed already (a store never closed, at exit): nobody is waiting.
    with contextlib.suppress(RuntimeError):
        future.get_loop().call_soon_threadsafe(settle)
