"""The embedded store: one SQLite file through aiosqlite.

One connection per store, opened on first use. Each operation is one plain function run on
aiosqlite's worker thread (:func:`_on_db_thread`): its statements, transaction included, run
back to back there, so a hop between threads is paid once per operation, not once per statement,
and operations of this process never interleave on the shared connection (the thread runs them
one after the other). Across processes the database does the work: multi-statement transactions
(claims, task creation, saves, migrations) start with ``BEGIN IMMEDIATE``, taking SQLite's write
lock up front (another store on the same file waits up to ``busy_timeout`` instead of failing on
a read-to-write upgrade); leases, handle mints and effects are single statements. ``prune_claims``
is one such transaction (and one trip) per batch of ``_PRUNE_BATCH`` keys.

Claims are group-committed: concurrent ``claim_message`` calls queue up while a batch is on the
thread and the next batch (at most ``_CLAIM_BATCH``) commits in one transaction, one WAL sync
for all of them (``synchronous = FULL`` makes that sync the cost of a claim).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, cast

import aiosqlite

from ._rows import (
    EFFECT_COLUMNS,
    HANDLE_COLUMNS,
    INBOX_COLUMNS,
    LEASE_COLUMNS,
    TASK_COLUMNS,
    effect_from_row,
    handle_from_row,
    inbox_from_row,
    lease_from_row,
    task_from_row,
    tools_json,
)
from .base import (
    ClaimOutcome,
    EffectRecord,
    HandleKind,
    HandleRecord,
    InboxItem,
    LeaseRecord,
    StoreError,
    StoreStats,
    TaskRecord,
)
from .schema import (
    DUE_TASKS_SQL,
    SCHEMA_VERSION_DDL,
    SET_THREAD_SQL,
    STATS_SQL,
    new_task_id,
    pending,
    stats_from_counts,
)

T = TypeVar("T")
Db = sqlite3.Connection

#: Most claims committed in one transaction: bounds how long one batch holds the write lock.
_CLAIM_BATCH = 64
#: Most claim keys of one table a prune transaction deletes: a backlog goes in short transactions.
_PRUNE_BATCH = 10_000
#: One prune batch per claim table; ``?1`` is the cutoff, ``?2`` the batch size. No ``DELETE …
#: LIMIT`` (a compile-time option of SQLite): the keys to delete come from a limited subquery.
_PRUNE_SQL = (
    "DELETE FROM event_claims WHERE event_id IN"
    " (SELECT event_id FROM event_claims WHERE claimed_at < ?1 LIMIT ?2)",
    "DELETE FROM message_claims WHERE (channel, ts) IN"
    " (SELECT channel, ts FROM message_claims WHERE claimed_at < ?1 LIMIT ?2)",
)


async def _on_db_thread(conn: aiosqlite.Connection, fn: Callable[[Db], T]) -> T:
    """``fn(raw sqlite3 connection)`` run on aiosqlite's worker thread, awaited in one hop.

    aiosqlite has no public way to run a callable on its thread, and its per-statement API
    costs a thread round trip per statement. ``Connection._execute`` (queue a callable, await
    its result) and ``Connection._conn`` are private: aiosqlite is pinned exactly
    (``aiosqlite==0.22.1`` in pyproject.toml and requirements.txt) so they cannot change under
    us; re-check this helper when moving the pin (the contract suite exercises it).
    """
    return cast(T, await conn._execute(lambda: fn(conn._conn)))


# -- functions run on the database thread ------------------------------------------------


def _one(db: Db, sql: str, params: Sequence[Any] = ()) -> sqlite3.Row | None:
    return cast(sqlite3.Row | None, db.execute(sql, params).fetchone())


def _all(db: Db, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
    return db.execute(sql, params).fetchall()


def _rollback(db: Db) -> None:
    # Also after a failed COMMIT: a transaction left open would break every later BEGIN.
    with contextlib.suppress(sqlite3.Error):
        db.execute("ROLLBACK")


def _immediate(db: Db, work: Callable[[Db], T]) -> T:
    """``work`` in a ``BEGIN IMMEDIATE`` transaction, committed if it returns, else rolled back."""
    db.execute("BEGIN IMMEDIATE")
    try:
        result = work(db)
        db.execute("COMMIT")
    except BaseException:
        _rollback(db)
        raise
    return result


def _insert_task(db: Db, channel: str, thread_ts: str, now: float, *, map_key: bool) -> str:
    task_id = new_task_id()
    db.execute(
        "INSERT INTO tasks (task_id, channel, thread_ts, created_at) VALUES (?, ?, ?, ?)",
        (task_id, channel, thread_ts, now),
    )
    if map_key:
        db.execute(
            "INSERT INTO conversations (channel, thread_ts, task_id) VALUES (?, ?, ?)",
            (channel, thread_ts, task_id),
        )
    return task_id


@dataclass(frozen=True, slots=True)
class _Claim:
    event_id: str
    channel: str
    ts: str
    thread_ts: str
    create: bool
    payload: str
    now: float


#: Everything a claim reads, in one statement: the message's prior claim, whether either claim
#: key is taken, and the conversation's task.
_CLAIM_LOOKUP = """
SELECT
    (SELECT task_id FROM message_claims WHERE channel = ?1 AND ts = ?2) AS prior,
    EXISTS (SELECT 1 FROM message_claims WHERE channel = ?1 AND ts = ?2)
        OR EXISTS (SELECT 1 FROM event_claims WHERE event_id = ?3) AS seen,
    (SELECT task_id FROM conversations WHERE channel = ?1 AND thread_ts = ?4) AS task_id
"""


def _claim_one(db: Db, c: _Claim) -> ClaimOutcome:
    """One claim inside the caller's write transaction (see ``Store.claim_message``)."""
    row = _one(db, _CLAIM_LOOKUP, (c.channel, c.ts, c.event_id, c.thread_ts))
    assert row is not None  # a SELECT without FROM yields one row
    if row["seen"]:
        db.execute(
            "INSERT OR IGNORE INTO event_claims (event_id, channel, ts, claimed_at) VALUES (?, ?, ?, ?)",
            (c.event_id, c.channel, c.ts, c.now),
        )
        return ClaimOutcome("duplicate", task_id=row["prior"])
    task_id: str | None = row["task_id"]
    created = False
    if task_id is None:
        if not c.create:
            return ClaimOutcome("no_task")  # nothing written
        # Mapped even when thread_ts is "": a DM's top level is one conversation.
        task_id = _insert_task(db, c.channel, c.thread_ts, c.now, map_key=True)
        created = True
    db.execute(
        "INSERT INTO event_claims (event_id, channel, ts, claimed_at) VALUES (?, ?, ?, ?)",
        (c.event_id, c.channel, c.ts, c.now),
    )
    db.execute(
        "INSERT INTO message_claims (channel, ts, event_id, task_id, claimed_at) VALUES (?, ?, ?, ?, ?)",
        (c.channel, c.ts, c.event_id, task_id, c.now),
    )
    item = _one(
        db,
        "INSERT INTO inbox (task_id, channel, ts, thread_ts, payload, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?) RETURNING item_id",
        (task_id, c.channel, c.ts, c.thread_ts, c.payload, c.now),
    )
    assert item is not None  # RETURNING of a successful INSERT always yields the row
    return ClaimOutcome("claimed", task_id=task_id, item_id=int(item["item_id"]), created=created)


def _claim_batch(db: Db, claims: Sequence[_Claim]) -> list[ClaimOutcome | sqlite3.Error]:
    """Each claim's outcome or error. All claims go in one transaction, in order, so a later one
    sees an earlier one's keys (two deliveries of one message: one claimed, one duplicate). If a
    claim or the commit fails, the batch is rolled back and every claim rerun in a transaction of
    its own, so a bad claim fails alone. A BEGIN that fails (busy past the timeout) fails them all:
    rerunning would only wait out the timeout once per claim."""
    try:
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        return [exc] * len(claims)
    try:
        outcomes: list[ClaimOutcome | sqlite3.Error] = [_claim_one(db, c) for c in claims]
        db.execute("COMMIT")
        return outcomes
    except sqlite3.Error as exc:
        _rollback(db)
        if len(claims) == 1:
            return [exc]
    except BaseException:
        _rollback(db)
        raise
    results: list[ClaimOutcome | sqlite3.Error] = []
    for claim in claims:
        try:
            results.append(_immediate(db, partial(_claim_one, c=claim)))
        except sqlite3.Error as exc:
            results.append(exc)
    return results


def _migrate(db: Db) -> None:
    db.execute(SCHEMA_VERSION_DDL["sqlite"])
    row = _one(db, "SELECT COALESCE(MAX(version), 0) AS v FROM schema_version")
    current = int(row["v"]) if row is not None else 0
    # A newer schema than this code knows is left alone: migrations are additive,
    # so an older instance keeps working during a rolling deploy.
    for version, statements in pending("sqlite", current):
        for statement in statements:
            db.execute(statement)
        db.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)", (version, time.time()))


def _find(db: Db, channel: str, thread_ts: str) -> str | None:
    row = _one(
        db, "SELECT task_id FROM conversations WHERE channel = ? AND thread_ts = ?", (channel, thread_ts)
    )
    return None if row is None else str(row["task_id"])


def _create_task(db: Db, channel: str, thread_ts: str, now: float) -> TaskRecord:
    task_id = _find(db, channel, thread_ts) if thread_ts else None
    if task_id is None:
        task_id = _insert_task(db, channel, thread_ts, now, map_key=bool(thread_ts))
    row = _one(db, f"SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = ?", (task_id,))
    assert row is not None  # found or inserted in this transaction
    return task_from_row(row)


def _save_run(
    db: Db, task_id: str, transcript: bytes, consumed: Sequence[int], enabled_tools: Sequence[str] | None
) -> None:
    if enabled_tools is None:
        cursor = db.execute("UPDATE tasks SET transcript = ? WHERE task_id = ?", (transcript, task_id))
    else:
        cursor = db.execute(
            "UPDATE tasks SET transcript = ?, enabled_tools = ? WHERE task_id = ?",
            (transcript, tools_json(enabled_tools), task_id),
        )
    if cursor.rowcount == 0:
        raise StoreError(f"unknown task {task_id!r}")  # rolls the transaction back
    # Scoped by task: an id of another task's item is ignored, never consumed.
    db.executemany("DELETE FROM inbox WHERE task_id = ? AND item_id = ?", [(task_id, i) for i in consumed])


def _rowcount(db: Db, sql: str, params: Sequence[Any]) -> int:
    return db.execute(sql, params).rowcount


def _store_error(exc: BaseException) -> StoreError:
    """A fresh StoreError for ``exc`` (one per caller: a batch's callers may share one failure)."""
    if isinstance(exc, StoreError):
        error = StoreError(*exc.args)
        error.__cause__ = exc.__cause__
    else:
        error = StoreError(f"sqlite: {exc}")
        error.__cause__ = exc
    return error


def _answer(
    futures: Sequence[asyncio.Future[ClaimOutcome]], results: Sequence[ClaimOutcome | BaseException]
) -> None:
    for future, result in zip(futures, results, strict=True):
        if future.done():  # its caller was cancelled
            continue
        if isinstance(result, ClaimOutcome):
            future.set_result(result)
        else:
            future.set_exception(_store_error(result))


class SQLiteStore:
    """:class:`~storage.base.Store` on a SQLite file (``":memory:"`` works for a single store)."""

    def __init__(self, path: str | Path, *, busy_timeout: float = 10.0) -> None:
        self._path = str(path)
        self._busy_timeout = busy_timeout
        self._conn: aiosqlite.Connection | None = None
        #: Guards opening and closing the connection; operations need no lock (see module doc).
        self._lock = asyncio.Lock()
        self._closed = False
        #: Claims waiting for the next batch; whether a caller or the backlog task is committing.
        self._claims: list[tuple[_Claim, asyncio.Future[ClaimOutcome]]] = []
        self._claiming = False
        #: Tasks kept referenced while they run: the backlog's, and answers of cancelled batches.
        self._claimer: asyncio.Task[None] | None = None
        self._stragglers: set[asyncio.Task[None]] = set()

    @property
    def path(self) -> str:
        return self._path

    # -- connection plumbing ---------------------------------------------------
    async def _connect(self) -> aiosqlite.Connection:
        """The open connection, opening it on first use."""
        if self._closed:
            raise StoreError("store is closed")
        if self._conn is not None:
            return self._conn
        async with self._lock:
            if self._closed:
                raise StoreError("store is closed")
            if self._conn is None:
                self._conn = await self._open()
            return self._conn

    async def _open(self) -> aiosqlite.Connection:
        if self._path != ":memory:":
            await asyncio.to_thread(Path(self._path).parent.mkdir, parents=True, exist_ok=True)
        # isolation_level=None: the sqlite3 module must not open transactions behind our back;
        # timeout is SQLite's busy timeout, how long to wait for another process's write lock.
        conn = await aiosqlite.connect(self._path, isolation_level=None, timeout=self._busy_timeout)
        try:
            conn.row_factory = aiosqlite.Row
            await self._enable_wal(conn)
            # FULL: a claim acknowledged to Slack must survive a power loss, not only a crash.
            await conn.execute("PRAGMA synchronous = FULL")
            await conn.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _enable_wal(self, conn: aiosqlite.Connection) -> None:
        """Switch to WAL (readers never block the writer). Two stores opening a fresh file at once
        can get SQLITE_BUSY here without SQLite's busy handler being consulted, so retry ourselves."""
        deadline = asyncio.get_running_loop().time() + self._busy_timeout
        while True:
            try:
                await conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                busy = exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY  # primary code of an extended one
                if not busy or asyncio.get_running_loop().time() > deadline:
                    raise
            await asyncio.sleep(0.02)

    async def _run(self, fn: Callable[[Db], T]) -> T:
        """``fn`` on the database thread; driver failures surface as StoreError."""
        try:
            conn = await self._connect()
            return await _on_db_thread(conn, fn)
        except (sqlite3.Error, OSError) as exc:
            raise _store_error(exc) from exc
        except ValueError as exc:  # aiosqlite's "Connection closed": close() raced this call
            if self._closed:
                raise StoreError("store is closed") from exc
            raise

    async def _write(self, fn: Callable[[Db], T]) -> T:
        """``fn`` in a ``BEGIN IMMEDIATE`` transaction on the database thread."""
        return await self._run(partial(_immediate, work=fn))

    # -- lifecycle ---------------------------------------------------------------
    async def migrate(self) -> None:
        await self._write(_migrate)

    async def close(self) -> None:
        async with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
            if conn is not None:
                # Always stop aiosqlite's worker thread: a live one keeps the process from exiting.
                # Operations already queued on it finish first (its queue is FIFO).
                with contextlib.suppress(sqlite3.Error):
                    await conn.close()

    async def ping(self) -> None:
        await self._run(partial(_all, sql="SELECT 1"))

    # -- ingress ---------------------------------------------------------------------
    async def find_task(self, channel: str, thread_ts: str) -> str | None:
        return await self._run(partial(_find, channel=channel, thread_ts=thread_ts))

    async def claim_message(
        self,
        *,
        event_id: str,
        channel: str,
        ts: str,
        thread_ts: str,
        create: bool,
        payload: str,
        now: float,
    ) -> ClaimOutcome:
        claim = _Claim(event_id, channel, ts, thread_ts, create, payload, now)
        future: asyncio.Future[ClaimOutcome] = asyncio.get_running_loop().create_future()
        self._claims.append((claim, future))
        if not self._claiming:
            # Nobody is committing: this caller does, in its own task (a lone claim pays no extra
            # task), until its own claim is answered; a backlog left then goes to a task.
            self._claiming = True
            try:
                while self._claims and not future.done():
                    await self._commit_batch()
            except asyncio.CancelledError:
                future.cancel()  # nobody will read its outcome
                raise
            finally:
                self._claiming = False
                if self._claims:
                    self._claiming = True
                    self._claimer = asyncio.create_task(self._commit_backlog())
        return await future

    async def _commit_backlog(self) -> None:
        try:
            while self._claims:
                await self._commit_batch()
        except BaseException:
            # Cancelled (the loop is shutting down): nobody would answer these any more.
            for _, future in self._claims:
                if not future.done():
                    future.set_exception(StoreError("claim interrupted before it was attempted"))
            self._claims.clear()
            raise
        finally:
            self._claiming = False
            self._claimer = None

    async def _commit_batch(self) -> None:
        """Commit the next batch: the claims queued meanwhile, at most ``_CLAIM_BATCH`` (none is
        waited for, so a lone claim goes at once), and answer each claim's caller."""
        batch = self._claims[:_CLAIM_BATCH]
        del self._claims[:_CLAIM_BATCH]
        claims = [claim for claim, _ in batch]
        futures = [future for _, future in batch]
        done: list[Sequence[ClaimOutcome | BaseException]] = []

        def commit(db: Db) -> None:
            try:
                done.append(_claim_batch(db, claims))
            except BaseException as exc:  # not a driver error (a bug): every claim of the batch fails
                done.append([exc] * len(claims))

        try:
            await self._run(commit)
        except asyncio.CancelledError:
            # The batch is on the thread all the same, and its other callers wait for it.
            task = asyncio.create_task(self._answer_when_done(futures, done))
            self._stragglers.add(task)
            task.add_done_callback(self._stragglers.discard)
            raise
        except (StoreError, ValueError) as exc:
            if not done:  # never queued: the store is closed or cannot open
                _answer(futures, [exc] * len(futures))
                return
        _answer(futures, done[0])

    async def _answer_when_done(
        self, futures: list[asyncio.Future[ClaimOutcome]], done: list[Sequence[ClaimOutcome | BaseException]]
    ) -> None:
        # The thread runs jobs in order: once this no-op has run, so has the batch before it.
        with contextlib.suppress(StoreError, ValueError):
            await self._run(lambda db: None)
        interrupted = StoreError("claim interrupted; it may or may not be recorded")
        _answer(futures, done[0] if done else [interrupted] * len(futures))

    async def prune_claims(self, *, older_than: float) -> int:
        # One trip and one BEGIN IMMEDIATE transaction per batch, not per prune: between batches
        # the write lock is free for other processes, and this process's claims (queued on the
        # same database thread) get their turn instead of waiting for a whole backlog.
        deleted = 0
        for sql in _PRUNE_SQL:
            while True:
                count = await self._write(partial(_rowcount, sql=sql, params=(older_than, _PRUNE_BATCH)))
                deleted += count
                if count < _PRUNE_BATCH:
                    break
        return deleted

    # -- tasks -------------------------------------------------------------------------
    async def create_task(self, *, channel: str, thread_ts: str, now: float) -> TaskRecord:
        return await self._write(partial(_create_task, channel=channel, thread_ts=thread_ts, now=now))

    async def get_task(self, task_id: str) -> TaskRecord | None:
        row = await self._run(
            partial(_one, sql=f"SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = ?", params=(task_id,))
        )
        return None if row is None else task_from_row(row)

    async def set_task_thread(self, task_id: str, thread_ts: str) -> None:
        sql = SET_THREAD_SQL.format(task="?1", thread="?2")
        if await self._run(partial(_one, sql=sql, params=(task_id, thread_ts))) is None:
            raise StoreError(f"unknown task {task_id!r}")

    async def record_root(self, *, channel: str, ts: str, task_id: str) -> None:
        await self._run(
            partial(
                _rowcount,
                sql="INSERT INTO conversations (channel, thread_ts, task_id) VALUES (?, ?, ?)"
                " ON CONFLICT (channel, thread_ts) DO NOTHING",
                params=(channel, ts, task_id),
            )
        )

    async def save_run(
        self,
        task_id: str,
        *,
        transcript: bytes,
        consumed: Sequence[int],
        enabled_tools: Sequence[str] | None = None,
    ) -> None:
        await self._write(
            partial(
                _save_run,
                task_id=task_id,
                transcript=transcript,
                consumed=list(consumed),
                enabled_tools=None if enabled_tools is None else list(enabled_tools),
            )
        )

    async def set_enabled_tools(self, task_id: str, tools: Sequence[str]) -> None:
        changed = await self._run(
            partial(
                _rowcount,
                sql="UPDATE tasks SET enabled_tools = ? WHERE task_id = ?",
                params=(tools_json(tools), task_id),
            )
        )
        if changed == 0:
            raise StoreError(f"unknown task {task_id!r}")

    # -- inbox ---------------------------------------------------------------------------
    async def pending_inbox(self, task_id: str) -> list[InboxItem]:
        rows = await self._run(
            partial(
                _all,
                sql=f"SELECT {INBOX_COLUMNS} FROM inbox WHERE task_id = ? ORDER BY item_id",
                params=(task_id,),
            )
        )
        return [inbox_from_row(r) for r in rows]

    async def tasks_with_pending_inbox(self, *, now: float) -> list[str]:
        rows = await self._run(partial(_all, sql=DUE_TASKS_SQL.format(now="?"), params=(now,)))
        return [str(r["task_id"]) for r in rows]

    # -- leases --------------------------------------------------------------------------
    async def acquire_lease(self, task_id: str, *, owner: str, ttl: float, now: float) -> bool:
        # One upsert statement: the conflict branch only fires for a free, expired or own lease.
        row = await self._run(
            partial(
                _one,
                sql="INSERT INTO leases (task_id, owner, expires_at) VALUES (?, ?, ?)"
                " ON CONFLICT (task_id) DO UPDATE"
                " SET owner = excluded.owner, expires_at = excluded.expires_at"
                " WHERE leases.owner = excluded.owner OR leases.expires_at <= ?"
                " RETURNING owner",
                params=(task_id, owner, now + ttl, now),
            )
        )
        return row is not None

    async def renew_lease(self, task_id: str, *, owner: str, ttl: float, now: float) -> bool:
        row = await self._run(
            partial(
                _one,
                sql="UPDATE leases SET expires_at = ? WHERE task_id = ? AND owner = ? RETURNING owner",
                params=(now + ttl, task_id, owner),
            )
        )
        return row is not None

    async def release_lease(self, task_id: str, *, owner: str) -> None:
        await self._run(
            partial(
                _rowcount, sql="DELETE FROM leases WHERE task_id = ? AND owner = ?", params=(task_id, owner)
            )
        )

    async def get_lease(self, task_id: str) -> LeaseRecord | None:
        row = await self._run(
            partial(_one, sql=f"SELECT {LEASE_COLUMNS} FROM leases WHERE task_id = ?", params=(task_id,))
        )
        return None if row is None else lease_from_row(row)

    # -- handles -------------------------------------------------------------------------
    async def mint_handle(
        self,
        *,
        task_id: str,
        kind: HandleKind,
        ref: str,
        handle: str,
        authored: bool = False,
        data: str = "{}",
    ) -> HandleRecord:
        row = await self._run(
            partial(
                _one,
                sql="INSERT INTO handles (task_id, handle, kind, ref, authored, data)"
                " VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (task_id, kind, ref) DO UPDATE SET"
                " authored = handles.authored OR excluded.authored,"
                " data = CASE WHEN excluded.data = '{}' THEN handles.data ELSE excluded.data END"
                f" RETURNING {HANDLE_COLUMNS}",
                params=(task_id, handle, kind, ref, int(authored), data),
            )
        )
        assert row is not None  # an upsert with RETURNING yields the inserted or updated row
        return handle_from_row(row)

    async def resolve_handle(self, task_id: str, handle: str) -> HandleRecord | None:
        row = await self._run(
            partial(
                _one,
                sql=f"SELECT {HANDLE_COLUMNS} FROM handles WHERE task_id = ? AND handle = ?",
                params=(task_id, handle),
            )
        )
        return None if row is None else handle_from_row(row)

    # -- effect journal --------------------------------------------------------------------
    async def open_effect(self, *, effect_id: str, task_id: str, tool: str, args: str, now: float) -> None:
        await self._run(
            partial(
                _rowcount,
                sql="INSERT INTO effects (effect_id, task_id, tool, args, state, created_at)"
                " VALUES (?, ?, ?, ?, 'open', ?)",
                params=(effect_id, task_id, tool, args, now),
            )
        )

    async def close_effect(self, effect_id: str, *, result: str) -> None:
        row = await self._run(
            partial(
                _one,
                sql="UPDATE effects SET state = 'done', result = ? WHERE effect_id = ? RETURNING effect_id",
                params=(result, effect_id),
            )
        )
        if row is None:
            raise StoreError(f"unknown effect {effect_id!r}")

    async def open_effects(self, task_id: str) -> list[EffectRecord]:
        rows = await self._run(
            partial(
                _all,
                sql=f"SELECT {EFFECT_COLUMNS} FROM effects WHERE task_id = ? AND state = 'open' ORDER BY seq",
                params=(task_id,),
            )
        )
        return [effect_from_row(r) for r in rows]

    async def get_effect(self, effect_id: str) -> EffectRecord | None:
        row = await self._run(
            partial(
                _one, sql=f"SELECT {EFFECT_COLUMNS} FROM effects WHERE effect_id = ?", params=(effect_id,)
            )
        )
        return None if row is None else effect_from_row(row)

    async def stats(self) -> StoreStats:
        row = await self._run(partial(_one, sql=STATS_SQL))
        assert row is not None  # an aggregate query always yields one row
        return stats_from_counts(dict(zip(row.keys(), row, strict=True)))
