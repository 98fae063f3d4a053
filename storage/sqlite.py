"""The embedded store: one SQLite file, driven by the standard ``sqlite3`` module on one thread.

:class:`SQLiteDatabase` owns one connection and one daemon thread
(``storage.sqlite_thread.DatabaseThread``), the only user of that connection besides the inline jobs
below. Each operation is one plain function queued to that thread: its statements, transaction
included, run back to back there, so the hop between threads is paid once per operation, not once
per statement, and operations of this process never interleave on the connection (the thread runs
them in order). Across processes the database does the work: procedures (claims, task creation,
saves) and migrations run in ``BEGIN IMMEDIATE`` transactions, taking SQLite's write lock up front
(another store on the same file waits up to ``busy_timeout`` instead of failing on a read-to-write
upgrade); every other operation is one statement, its own transaction.

Writes are group-committed: procedure calls, and every single statement that writes (a run's
lease, handles, effect journal, usage), made while a batch is on the thread queue up, and the next
batch (at most ``_BATCH``) commits in one transaction, one WAL sync for all of them
(``synchronous = FULL`` makes that sync the cost of a write). Fifty conversations' turns thus
share their syncs instead of queueing one per statement; a write is answered only once committed.
A batch of writes that need no sync of their own (``Statement.synced``, ``call(synced=False)``)
commits under ``synchronous = NORMAL``: it survives the process dying, and a power loss from the next
synced commit on (whose sync covers all the WAL before it).

While the process has nothing else to do (``inline_when``: one run working, no delivery waiting
for its 200) and the database thread has no job, a read or a batch runs on the caller's thread
instead, its loop waiting out the statements and the sync: the two thread hops and the loop laps
around them cost more than the job then. It never waits for another process's lock there (busy
timeout 0; the job goes to the thread, which waits), and a batch with a failing call is rolled
back and redone on the thread, so the outcome is the thread's. Under load the thread does the
work as before, and the loop goes on with everything else meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from .liveness import FileLiveness
from .records import StoreError
from .sql import SQLITE, Procedure, Row, Script, Statement
from .sqlcore import Database, Reads, WriteRead
from .sqlite_jobs import Call, NeedsTheThread, drive, immediate, run_batch, without_waiting
from .sqlite_thread import DatabaseThread, Db
from .sqlstore import SqlStore

T = TypeVar("T")
#: SQL that only reads, by its first word; anything else writes (INSERT, UPDATE, DELETE, a WITH …).
_READS = ("SELECT",)
#: Most procedure calls committed in one transaction: bounds how long one batch holds the write lock.
_BATCH = 64


def _store_error(exc: BaseException) -> StoreError:
    """A fresh StoreError for ``exc`` (one per caller: a batch's callers may share one failure)."""
    if isinstance(exc, StoreError):
        error = StoreError(*exc.args)
        error.__cause__ = exc.__cause__
    else:
        error = StoreError(f"sqlite: {exc}")
        error.__cause__ = exc
    return error


def _answer(futures: Sequence[asyncio.Future[Any]], results: Sequence[Any]) -> None:
    for future, result in zip(futures, results, strict=True):
        if future.done():  # its caller was cancelled
            continue
        if isinstance(result, BaseException):
            future.set_exception(_store_error(result))
        else:
            future.set_result(result)


class SQLiteDatabase(Database):
    """A SQLite file as a :class:`~storage.sqlstore.SqlStore` reaches it: one connection on a
    database thread, writes group-committed (module docstring)."""

    dialect: ClassVar = SQLITE

    def __init__(self, path: str | Path, *, busy_timeout: float = 10.0) -> None:
        self._path = str(path)
        self._busy_timeout = busy_timeout
        #: Started on first use; None again once closed.
        self._thread: DatabaseThread | None = None
        self._closed = False
        #: Calls waiting for the next batch (each with whether it needs a sync); whether a caller or
        #: the backlog task is committing.
        self._calls: list[tuple[Call, asyncio.Future[Any], bool]] = []
        self._committing = False
        #: Tasks kept referenced while they run: the backlog's, and answers of cancelled batches.
        self._committer: asyncio.Task[None] | None = None
        self._stragglers: set[asyncio.Task[None]] = set()
        #: Lock files of registered instances (none for an in-memory database: no other process sees it).
        self._liveness = FileLiveness(self._path) if self._path != ":memory:" else None
        #: The database whose thread this one uses (``for_another_loop``); None: its own.
        self._parent: SQLiteDatabase | None = None
        self._thread_lock = threading.Lock()
        #: Whether this process has nothing else to do now (``inline_when``); None: always queue.
        self._nothing_else_to_do: Callable[[], bool] | None = None

    def for_another_loop(self) -> SQLiteDatabase:
        """The same database, batched on the calling loop, through this one's database thread
        (so its operations and this one's still run one at a time, in order)."""
        sibling = SQLiteDatabase(self._path, busy_timeout=self._busy_timeout)
        sibling._parent = self
        sibling._liveness = None  # instances register through the main store only
        return sibling

    def inline_when(self, nothing_else_to_do: Callable[[], bool]) -> None:
        """While ``nothing_else_to_do()``, run reads and batches on the caller's thread when the database
        thread is idle (module docstring)."""
        self._nothing_else_to_do = nothing_else_to_do

    @property
    def path(self) -> str:
        return self._path

    # -- connection plumbing ---------------------------------------------------
    def _open(self) -> Db:
        """On the database thread: open and configure the connection."""
        if self._path != ":memory:":
            Path(self._path).parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: the sqlite3 module must not open transactions behind our back;
        # timeout is SQLite's busy timeout, how long to wait for another process's write lock.
        # check_same_thread=False: a caller's thread may use it between the thread's jobs (run_here,
        # which holds the connection's lock).
        db = sqlite3.connect(
            self._path, isolation_level=None, timeout=self._busy_timeout, check_same_thread=False, factory=Db
        )
        try:
            db.busy_ms = int(self._busy_timeout * 1000)
            db.row_factory = sqlite3.Row
            self._enable_wal(db)
            # FULL: a claim acknowledged to Slack must survive a power loss, not only a crash.
            db.execute("PRAGMA synchronous = FULL")
            db.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            db.close()
            raise
        return db

    def _enable_wal(self, db: Db) -> None:
        """Switch to WAL (readers never block the writer). Two stores opening a fresh file at once
        can get SQLITE_BUSY here without SQLite's busy handler being consulted, so retry ourselves
        (on the database thread, where waiting blocks nobody else)."""
        deadline = time.monotonic() + self._busy_timeout
        while True:
            try:
                db.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                busy = exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY  # primary code of an extended one
                if not busy or time.monotonic() > deadline:
                    raise
            time.sleep(0.02)

    def _database_thread(self) -> DatabaseThread:
        """The thread running this database's jobs (the parent's for a sibling), started on first use."""
        if self._parent is not None:
            if self._parent._closed:
                raise StoreError("store is closed")
            return self._parent._database_thread()
        with self._thread_lock:  # a sibling on another thread may be first
            if self._thread is None:
                self._thread = DatabaseThread(self._open, name=f"threadbound-sqlite:{self._path}")
            return self._thread

    async def _run(self, fn: Callable[[Db], T]) -> T:
        """``fn`` on the database thread; driver failures surface as StoreError."""
        if self._closed:
            raise StoreError("store is closed")
        thread = self._database_thread()
        try:
            return await thread.submit(fn)
        except (sqlite3.Error, OSError) as exc:
            raise _store_error(exc) from exc

    def _here(self, fn: Callable[[Db], T]) -> tuple[bool, T | None]:
        """``(True, fn(connection))`` run on this thread while the process has nothing else to do
        and the database thread is idle; ``(False, None)``: queue it (module docstring)."""
        if self._nothing_else_to_do is None or self._closed or not self._nothing_else_to_do():
            return False, None
        thread = self._parent._thread if self._parent is not None else self._thread
        if thread is None:
            return False, None
        try:
            return thread.run_here(partial(without_waiting, work=fn))
        except (NeedsTheThread, sqlite3.Error, OSError):
            # Nothing done here: the thread does it and reports what fails (its errors are the store's).
            return False, None

    async def _read(self, fn: Callable[[Db], T]) -> T:
        """``fn``, which only reads, here when it can be, else on the database thread."""
        done, result = self._here(fn)
        return result if done else await self._run(fn)  # type: ignore[return-value]

    # -- statements ------------------------------------------------------------------
    async def fetch(self, statement: Statement, params: Mapping[str, Any]) -> list[sqlite3.Row]:
        text = SQLITE.sql(statement)
        if text.lstrip().split(None, 1)[0].upper() in _READS:
            return await self._read(lambda db: db.execute(text, params).fetchall())
        rows: list[sqlite3.Row] = await self._batch(
            lambda db: db.execute(text, params).fetchall(), synced=statement.synced
        )
        return rows

    async def reads(self, reads: Sequence[tuple[Statement, Mapping[str, Any]]]) -> list[Sequence[Row]]:
        texts = [(SQLITE.sql(statement), params) for statement, params in reads]
        if any(text.lstrip().split(None, 1)[0].upper() not in _READS for text, _ in texts):
            return await super().reads(reads)
        return await self._read(lambda db: [db.execute(text, params).fetchall() for text, params in texts])

    async def execute(self, statement: Statement, params: Mapping[str, Any]) -> int:
        text = SQLITE.sql(statement)
        count: int = await self._batch(lambda db: db.execute(text, params).rowcount, synced=statement.synced)
        return count

    async def write_then_reads(self, write: Statement, params: Mapping[str, Any], reads: Reads) -> WriteRead:
        text = SQLITE.sql(write)

        def call(db: Db) -> WriteRead:
            # In the write's transaction: the reads see it, and nothing else committed between.
            row = db.execute(text, params).fetchone()
            return row, [db.execute(SQLITE.sql(s), p).fetchall() for s, p in reads(row)]

        result: WriteRead = await self._batch(call, synced=write.synced)
        return result

    async def script(self, make: Callable[[], Script]) -> Any:
        return await self._run(lambda db: immediate(db, lambda db: drive(db, make())))

    async def call(self, procedure: Procedure, params: Mapping[str, Any], *, synced: bool = True) -> Row:
        row: Row = await self._batch((procedure, params), synced=synced)
        return row

    async def _batch(self, call: Call, *, synced: bool = True) -> Any:
        """``call``'s result, committed in the next batch (module docstring); the batch syncs the
        WAL when any of its calls is ``synced``."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._calls.append((call, future, synced))
        if not self._committing:
            # Nobody is committing: this caller does (after the loop's current step, so calls made
            # beside it share its trip) until its own call is answered; a backlog goes to a task.
            self._committing = True
            try:
                await asyncio.sleep(0)
                while self._calls and not future.done():
                    await self._commit_batch()
            except asyncio.CancelledError:
                future.cancel()  # nobody will read its outcome
                raise
            finally:
                self._committing = False
                if self._calls:
                    self._committing = True
                    self._committer = asyncio.create_task(self._commit_backlog())
        return await future

    async def _commit_backlog(self) -> None:
        try:
            while self._calls:
                await self._commit_batch()
        except BaseException:
            # Cancelled (the loop is shutting down): nobody would answer these any more.
            for _, future, _ in self._calls:
                if not future.done():
                    future.set_exception(StoreError("write interrupted before it was attempted"))
            self._calls.clear()
            raise
        finally:
            self._committing = False
            self._committer = None

    async def _commit_batch(self) -> None:
        """Commit the next batch: the calls queued meanwhile (at most ``_BATCH``; nobody waits for
        more), and answer each call's caller."""
        batch = self._calls[:_BATCH]
        del self._calls[:_BATCH]
        calls = [call for call, _, _ in batch]
        futures = [future for _, future, _ in batch]
        synced = any(sync for _, _, sync in batch)
        done: list[Sequence[Any]] = []

        def commit(db: Db, here: bool = False) -> None:
            try:
                db.syncs(synced)  # the level this batch needs (``Db``)
                done.append(run_batch(db, calls, here=here))
            except BaseException as exc:
                if here and isinstance(exc, (NeedsTheThread, sqlite3.Error)):
                    raise  # nothing done here: the thread does it and reports its failure
                done.append([exc] * len(calls))  # not a driver error (a bug): every call fails

        self._here(partial(commit, here=True))
        if done:  # committed here
            _answer(futures, done[0])
            return
        try:
            await self._run(commit)
        except asyncio.CancelledError:
            # The batch is on the thread all the same, and its other callers wait for it.
            task = asyncio.create_task(self._answer_when_done(futures, done))
            self._stragglers.add(task)
            task.add_done_callback(self._stragglers.discard)
            raise
        except StoreError as exc:
            if not done:  # never ran: the store is closed or cannot open
                _answer(futures, [exc] * len(futures))
                return
        _answer(futures, done[0])

    async def _answer_when_done(self, futures: list[asyncio.Future[Any]], done: list[Sequence[Any]]) -> None:
        # The thread runs jobs in order: once this no-op has run, so has the batch before it.
        with contextlib.suppress(StoreError):
            await self._run(lambda db: None)
        interrupted = StoreError("write interrupted; it may or may not be recorded")
        _answer(futures, done[0] if done else [interrupted] * len(futures))

    # -- liveness ----------------------------------------------------------------
    async def hold_liveness(self, owner: str) -> tuple[int, bool]:
        if self._liveness is not None and self._liveness.holds(owner):
            return 0, False
        if self._liveness is not None:
            try:
                await self._liveness.hold(owner)
            except BlockingIOError as exc:
                raise StoreError(f"an instance named {owner!r} is already running on this database") from exc
            except OSError as exc:
                raise _store_error(exc) from exc
        return 0, True

    async def dead(self, owners: Sequence[tuple[str, int]]) -> list[str]:
        if self._liveness is None:
            return []
        return await self._liveness.dead([owner for owner, _ in owners])

    async def lock_states(
        self, owner: str, owners: Sequence[tuple[str, int]]
    ) -> tuple[int | None, dict[str, bool]]:
        if self._liveness is None:
            return None, {}
        # A file lock ends only with its process: ours is held while this store is open.
        session = 0 if self._liveness.holds(owner) else None
        return session, await self._liveness.states([name for name, _ in owners])

    async def gone(self, owners: Sequence[tuple[str, int]]) -> list[str]:
        if self._liveness is None:
            return []
        # A clean stop removed its lock file: gone too (``dead`` skips a missing file, which could be
        # an instance on another machine; one without leases is harmless to forget, it re-registers).
        return await self._liveness.gone([owner for owner, _ in owners])

    async def forget_liveness(self, owner: str) -> None:
        if self._liveness is not None:
            await self._liveness.forget(owner)

    # -- lifecycle ---------------------------------------------------------------
    async def close(self) -> None:
        if self._closed:
            return
        if self._parent is not None:
            # The database thread is the parent's; the writes queued here are answered first.
            while self._committer is not None and not self._committer.done():
                await asyncio.gather(self._committer, return_exceptions=True)
            self._closed = True
            return
        self._closed = True
        if self._liveness is not None:
            with contextlib.suppress(OSError):
                await self._liveness.release()
        with self._thread_lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            # Jobs already queued finish first (the queue is FIFO); then the thread ends.
            with contextlib.suppress(sqlite3.Error):
                await thread.stop()


class SQLiteStore(SqlStore):
    """:class:`~storage.base.Store` on a SQLite file (``":memory:"`` works for a single store)."""

    database: SQLiteDatabase

    def __init__(self, path: str | Path, *, busy_timeout: float = 10.0) -> None:
        super().__init__(SQLiteDatabase(path, busy_timeout=busy_timeout))

    @property
    def path(self) -> str:
        return self.database.path
