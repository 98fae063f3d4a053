"""The embedded store: one SQLite file through aiosqlite.

One connection per store, opened on first use. Every operation holds an asyncio
lock, so coroutines of this process never see each other's half-done
transactions on the shared connection. Across processes the database does the
work: multi-statement transactions (claims, task creation, saves, migrations)
start with ``BEGIN IMMEDIATE``, taking SQLite's write lock up front (another
store on the same file waits up to ``busy_timeout`` instead of failing on a
read-to-write upgrade); leases and handle mints are single upsert statements.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

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


class SQLiteStore:
    """:class:`~storage.base.Store` on a SQLite file (``":memory:"`` works for a single store)."""

    def __init__(self, path: str | Path, *, busy_timeout: float = 10.0) -> None:
        self._path = str(path)
        self._busy_timeout = busy_timeout
        self._conn: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    @property
    def path(self) -> str:
        return self._path

    # -- connection plumbing ---------------------------------------------------
    async def _connect(self) -> aiosqlite.Connection:
        """The open connection, opening it on first use. Caller holds ``self._lock``."""
        if self._closed:
            raise StoreError("store is closed")
        if self._conn is not None:
            return self._conn
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
        self._conn = conn
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

    @contextlib.asynccontextmanager
    async def _use(self) -> AsyncIterator[aiosqlite.Connection]:
        async with self._lock:
            try:
                yield await self._connect()
            except (sqlite3.Error, OSError) as exc:
                raise StoreError(f"sqlite: {exc}") from exc

    @contextlib.asynccontextmanager
    async def _write(self) -> AsyncIterator[aiosqlite.Connection]:
        """A ``BEGIN IMMEDIATE`` transaction, committed on normal exit and rolled back otherwise."""
        async with self._use() as conn:
            await conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                await conn.execute("COMMIT")
            except BaseException:
                # Also after a failed COMMIT: a transaction left open would break every later BEGIN.
                with contextlib.suppress(sqlite3.Error, ValueError):
                    await conn.execute("ROLLBACK")
                raise

    @staticmethod
    async def _all(conn: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        return list(await conn.execute_fetchall(sql, params))

    @classmethod
    async def _one(
        cls, conn: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()
    ) -> sqlite3.Row | None:
        rows = await cls._all(conn, sql, params)
        return rows[0] if rows else None

    # -- lifecycle ---------------------------------------------------------------
    async def migrate(self) -> None:
        async with self._write() as conn:
            await conn.execute(SCHEMA_VERSION_DDL["sqlite"])
            row = await self._one(conn, "SELECT COALESCE(MAX(version), 0) AS v FROM schema_version")
            current = int(row["v"]) if row is not None else 0
            # A newer schema than this code knows is left alone: migrations are additive,
            # so an older instance keeps working during a rolling deploy.
            for version, statements in pending("sqlite", current):
                for statement in statements:
                    await conn.execute(statement)
                await conn.execute(
                    "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)", (version, time.time())
                )

    async def close(self) -> None:
        async with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
            if conn is not None:
                # Always stop aiosqlite's worker thread: a live one keeps the process from exiting.
                with contextlib.suppress(sqlite3.Error):
                    await conn.close()

    async def ping(self) -> None:
        async with self._use() as conn:
            await self._all(conn, "SELECT 1")

    # -- ingress ---------------------------------------------------------------------
    @classmethod
    async def _find(cls, conn: aiosqlite.Connection, channel: str, thread_ts: str) -> str | None:
        row = await cls._one(
            conn,
            "SELECT task_id FROM conversations WHERE channel = ? AND thread_ts = ?",
            (channel, thread_ts),
        )
        return None if row is None else str(row["task_id"])

    @staticmethod
    async def _insert_task(
        conn: aiosqlite.Connection, channel: str, thread_ts: str, now: float, *, map_key: bool
    ) -> str:
        task_id = new_task_id()
        await conn.execute(
            "INSERT INTO tasks (task_id, channel, thread_ts, created_at) VALUES (?, ?, ?, ?)",
            (task_id, channel, thread_ts, now),
        )
        if map_key:
            await conn.execute(
                "INSERT INTO conversations (channel, thread_ts, task_id) VALUES (?, ?, ?)",
                (channel, thread_ts, task_id),
            )
        return task_id

    async def find_task(self, channel: str, thread_ts: str) -> str | None:
        async with self._use() as conn:
            return await self._find(conn, channel, thread_ts)

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
        async with self._write() as conn:
            prior = await self._one(
                conn, "SELECT task_id FROM message_claims WHERE channel = ? AND ts = ?", (channel, ts)
            )
            seen = await self._one(conn, "SELECT 1 FROM event_claims WHERE event_id = ?", (event_id,))
            if prior is not None or seen is not None:
                await conn.execute(
                    "INSERT OR IGNORE INTO event_claims (event_id, channel, ts, claimed_at)"
                    " VALUES (?, ?, ?, ?)",
                    (event_id, channel, ts, now),
                )
                return ClaimOutcome("duplicate", task_id=None if prior is None else prior["task_id"])
            task_id = await self._find(conn, channel, thread_ts)
            created = False
            if task_id is None:
                if not create:
                    return ClaimOutcome("no_task")
                # Mapped even when thread_ts is "": a DM's top level is one conversation.
                task_id = await self._insert_task(conn, channel, thread_ts, now, map_key=True)
                created = True
            await conn.execute(
                "INSERT INTO event_claims (event_id, channel, ts, claimed_at) VALUES (?, ?, ?, ?)",
                (event_id, channel, ts, now),
            )
            await conn.execute(
                "INSERT INTO message_claims (channel, ts, event_id, task_id, claimed_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (channel, ts, event_id, task_id, now),
            )
            row = await self._one(
                conn,
                "INSERT INTO inbox (task_id, channel, ts, thread_ts, payload, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?) RETURNING item_id",
                (task_id, channel, ts, thread_ts, payload, now),
            )
            assert row is not None  # RETURNING of a successful INSERT always yields the row
            return ClaimOutcome("claimed", task_id=task_id, item_id=int(row["item_id"]), created=created)

    # -- tasks -------------------------------------------------------------------------
    async def create_task(self, *, channel: str, thread_ts: str, now: float) -> TaskRecord:
        async with self._write() as conn:
            task_id = await self._find(conn, channel, thread_ts) if thread_ts else None
            if task_id is None:
                task_id = await self._insert_task(conn, channel, thread_ts, now, map_key=bool(thread_ts))
            row = await self._one(conn, f"SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = ?", (task_id,))
            assert row is not None  # found or inserted in this transaction
            return task_from_row(row)

    async def get_task(self, task_id: str) -> TaskRecord | None:
        async with self._use() as conn:
            row = await self._one(conn, f"SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = ?", (task_id,))
            return None if row is None else task_from_row(row)

    async def set_task_thread(self, task_id: str, thread_ts: str) -> None:
        async with self._use() as conn:
            row = await self._one(conn, SET_THREAD_SQL.format(task="?1", thread="?2"), (task_id, thread_ts))
        if row is None:
            raise StoreError(f"unknown task {task_id!r}")

    async def record_root(self, *, channel: str, ts: str, task_id: str) -> None:
        async with self._use() as conn:
            await conn.execute(
                "INSERT INTO conversations (channel, thread_ts, task_id) VALUES (?, ?, ?)"
                " ON CONFLICT (channel, thread_ts) DO NOTHING",
                (channel, ts, task_id),
            )

    async def save_run(
        self,
        task_id: str,
        *,
        transcript: bytes,
        consumed: Sequence[int],
        enabled_tools: Sequence[str] | None = None,
    ) -> None:
        async with self._write() as conn:
            if enabled_tools is None:
                cursor = await conn.execute(
                    "UPDATE tasks SET transcript = ? WHERE task_id = ?", (transcript, task_id)
                )
            else:
                cursor = await conn.execute(
                    "UPDATE tasks SET transcript = ?, enabled_tools = ? WHERE task_id = ?",
                    (transcript, tools_json(enabled_tools), task_id),
                )
            if cursor.rowcount == 0:
                raise StoreError(f"unknown task {task_id!r}")
            # Scoped by task: an id of another task's item is ignored, never consumed.
            await conn.executemany(
                "DELETE FROM inbox WHERE task_id = ? AND item_id = ?", [(task_id, i) for i in consumed]
            )

    async def set_enabled_tools(self, task_id: str, tools: Sequence[str]) -> None:
        async with self._use() as conn:
            cursor = await conn.execute(
                "UPDATE tasks SET enabled_tools = ? WHERE task_id = ?", (tools_json(tools), task_id)
            )
            if cursor.rowcount == 0:
                raise StoreError(f"unknown task {task_id!r}")

    # -- inbox ---------------------------------------------------------------------------
    async def pending_inbox(self, task_id: str) -> list[InboxItem]:
        async with self._use() as conn:
            rows = await self._all(
                conn, f"SELECT {INBOX_COLUMNS} FROM inbox WHERE task_id = ? ORDER BY item_id", (task_id,)
            )
        return [inbox_from_row(r) for r in rows]

    async def tasks_with_pending_inbox(self, *, now: float) -> list[str]:
        async with self._use() as conn:
            rows = await self._all(conn, DUE_TASKS_SQL.format(now="?"), (now,))
        return [str(r["task_id"]) for r in rows]

    # -- leases --------------------------------------------------------------------------
    async def acquire_lease(self, task_id: str, *, owner: str, ttl: float, now: float) -> bool:
        # One upsert statement: the conflict branch only fires for a free, expired or own lease.
        async with self._use() as conn:
            row = await self._one(
                conn,
                "INSERT INTO leases (task_id, owner, expires_at) VALUES (?, ?, ?)"
                " ON CONFLICT (task_id) DO UPDATE"
                " SET owner = excluded.owner, expires_at = excluded.expires_at"
                " WHERE leases.owner = excluded.owner OR leases.expires_at <= ?"
                " RETURNING owner",
                (task_id, owner, now + ttl, now),
            )
            return row is not None

    async def renew_lease(self, task_id: str, *, owner: str, ttl: float, now: float) -> bool:
        async with self._use() as conn:
            row = await self._one(
                conn,
                "UPDATE leases SET expires_at = ? WHERE task_id = ? AND owner = ? RETURNING owner",
                (now + ttl, task_id, owner),
            )
            return row is not None

    async def release_lease(self, task_id: str, *, owner: str) -> None:
        async with self._use() as conn:
            await conn.execute("DELETE FROM leases WHERE task_id = ? AND owner = ?", (task_id, owner))

    async def get_lease(self, task_id: str) -> LeaseRecord | None:
        async with self._use() as conn:
            row = await self._one(conn, f"SELECT {LEASE_COLUMNS} FROM leases WHERE task_id = ?", (task_id,))
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
        async with self._use() as conn:
            row = await self._one(
                conn,
                "INSERT INTO handles (task_id, handle, kind, ref, authored, data) VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (task_id, kind, ref) DO UPDATE SET"
                " authored = handles.authored OR excluded.authored,"
                " data = CASE WHEN excluded.data = '{}' THEN handles.data ELSE excluded.data END"
                f" RETURNING {HANDLE_COLUMNS}",
                (task_id, handle, kind, ref, int(authored), data),
            )
        assert row is not None  # an upsert with RETURNING yields the inserted or updated row
        return handle_from_row(row)

    async def resolve_handle(self, task_id: str, handle: str) -> HandleRecord | None:
        async with self._use() as conn:
            row = await self._one(
                conn,
                f"SELECT {HANDLE_COLUMNS} FROM handles WHERE task_id = ? AND handle = ?",
                (task_id, handle),
            )
        return None if row is None else handle_from_row(row)

    # -- effect journal --------------------------------------------------------------------
    async def open_effect(self, *, effect_id: str, task_id: str, tool: str, args: str, now: float) -> None:
        async with self._use() as conn:
            await conn.execute(
                "INSERT INTO effects (effect_id, task_id, tool, args, state, created_at)"
                " VALUES (?, ?, ?, ?, 'open', ?)",
                (effect_id, task_id, tool, args, now),
            )

    async def close_effect(self, effect_id: str, *, result: str) -> None:
        async with self._use() as conn:
            row = await self._one(
                conn,
                "UPDATE effects SET state = 'done', result = ? WHERE effect_id = ? RETURNING effect_id",
                (result, effect_id),
            )
        if row is None:
            raise StoreError(f"unknown effect {effect_id!r}")

    async def open_effects(self, task_id: str) -> list[EffectRecord]:
        async with self._use() as conn:
            rows = await self._all(
                conn,
                f"SELECT {EFFECT_COLUMNS} FROM effects WHERE task_id = ? AND state = 'open' ORDER BY seq",
                (task_id,),
            )
        return [effect_from_row(r) for r in rows]

    async def get_effect(self, effect_id: str) -> EffectRecord | None:
        async with self._use() as conn:
            row = await self._one(
                conn, f"SELECT {EFFECT_COLUMNS} FROM effects WHERE effect_id = ?", (effect_id,)
            )
        return None if row is None else effect_from_row(row)

    async def stats(self) -> StoreStats:
        async with self._use() as conn:
            row = await self._one(conn, STATS_SQL)
        assert row is not None  # an aggregate query always yields one row
        return stats_from_counts(dict(zip(row.keys(), row, strict=True)))
