"""The shared store for several instances: Postgres through an asyncpg pool.

The pool is created on first use (``migrate()`` on start). Atomicity comes from
transactions and unique keys: a claim inserts its claim keys with
``ON CONFLICT DO NOTHING``, so a concurrent claim of the same message waits
on the first one's uncommitted row and then sees it as a duplicate (or proceeds,
if the first rolled back). The hot paths are one round trip each: a claim is one
call of a server-side function (``tb_claim_message``, schema v2), saves, leases
and handles are single statements, and released connections skip asyncpg's
session reset query. Transactions (or statements) that Postgres aborts as
deadlocked or unserializable are rerun.

``schema=`` (or ``?schema=NAME`` in the URL) puts every table in that schema,
created by ``migrate()`` if missing; tests use it for isolation.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from functools import partial
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

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

#: Driver failures that mean "the store could not do it"; mapped to StoreError at the boundary.
_DRIVER_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)
_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
#: First key of the migration advisory lock ("tb"); the second is derived from the schema name.
_MIGRATE_LOCK_CLASS = 0x7462
_TX_ATTEMPTS = 3
_CLOSE_TIMEOUT = 10.0
#: Most claim keys of one table a prune statement deletes: a backlog goes in short transactions.
_PRUNE_BATCH = 10_000
#: One prune batch per claim table, one statement each (``$1`` the cutoff, ``$2`` the batch size).
#: ``SKIP LOCKED``: instances pruning at the same time split the rows instead of waiting on each other.
_PRUNE_SQL = (
    "WITH doomed AS ("
    " SELECT event_id FROM event_claims WHERE claimed_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED"
    "), gone AS ("
    " DELETE FROM event_claims e USING doomed d WHERE e.event_id = d.event_id RETURNING 1"
    ") SELECT COUNT(*) FROM gone",
    "WITH doomed AS ("
    " SELECT channel, ts FROM message_claims WHERE claimed_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED"
    "), gone AS ("
    " DELETE FROM message_claims m USING doomed d WHERE m.channel = d.channel AND m.ts = d.ts RETURNING 1"
    ") SELECT COUNT(*) FROM gone",
)


async def _keep_session(conn: asyncpg.Connection) -> None:
    """The pool's reset on release, in place of asyncpg's default (a ``RESET ALL; UNLISTEN *; …``
    query, one more round trip per operation). The store leaves no session state to reset: no
    SET, LISTEN, cursors or session advisory locks (the migration lock is transaction-scoped), and
    asyncpg still rolls back a transaction left open before calling this."""


def split_schema(url: str) -> tuple[str, str | None]:
    """``url`` without its ``schema`` query parameter, and that parameter (asyncpg would
    otherwise send it to the server as an unknown setting)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = next((value for key, value in query if key == "schema"), None)
    if schema is None:
        return url, None
    rest = urlencode([(key, value) for key, value in query if key != "schema"])
    return urlunsplit(parts._replace(query=rest)), schema or None


class PostgresStore:
    """:class:`~storage.base.Store` on Postgres; safe to share between processes and machines."""

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = 10.0,
    ) -> None:
        dsn, url_schema = split_schema(url)
        schema = schema or url_schema
        if schema is not None and not _SCHEMA_NAME.match(schema):
            raise ValueError(f"invalid Postgres schema name {schema!r}")
        self._dsn = dsn
        self._schema = schema
        self._min_size = min_size
        self._max_size = max_size
        self._connect_timeout = connect_timeout
        self._pool: asyncpg.Pool | None = None
        self._pool_lock = asyncio.Lock()
        self._closed = False

    @property
    def schema(self) -> str | None:
        return self._schema

    # -- connection plumbing ---------------------------------------------------
    async def _get_pool(self) -> asyncpg.Pool:
        pool = self._pool
        if pool is None:
            async with self._pool_lock:
                if self._closed:
                    raise StoreError("store is closed")
                pool = self._pool
                if pool is None:
                    settings = {"search_path": f'"{self._schema}"'} if self._schema else None
                    try:
                        pool = self._pool = await asyncpg.create_pool(
                            self._dsn,
                            min_size=self._min_size,
                            max_size=self._max_size,
                            timeout=self._connect_timeout,
                            server_settings=settings,
                            reset=_keep_session,
                        )
                    except (*_DRIVER_ERRORS, ValueError) as exc:
                        # The message names the failure, never the URL (it may carry a password).
                        raise StoreError(f"cannot connect to Postgres: {exc}") from exc
        if self._closed:
            raise StoreError("store is closed")
        return pool

    @contextlib.asynccontextmanager
    async def _conn(self) -> AsyncIterator[Any]:
        """A pooled connection; driver errors in the block surface as StoreError."""
        pool = await self._get_pool()
        try:
            async with pool.acquire() as conn:
                yield conn
        except _DRIVER_ERRORS as exc:
            raise StoreError(f"postgres: {exc}") from exc

    async def _transact(self, work: Callable[[Any], Awaitable[T]], *, transaction: bool = True) -> T:
        """Run ``work(conn)`` in a transaction, rerunning it when Postgres aborts it as a
        deadlock or serialization failure (nothing of it was committed then). With
        ``transaction=False`` ``work`` is one statement, atomic on its own: no BEGIN/COMMIT trips."""
        for attempt in range(1, _TX_ATTEMPTS + 1):
            pool = await self._get_pool()
            try:
                async with pool.acquire() as conn:
                    if not transaction:
                        return await work(conn)
                    async with conn.transaction():
                        return await work(conn)
            except asyncpg.TransactionRollbackError as exc:
                if attempt == _TX_ATTEMPTS:
                    raise StoreError(f"postgres: {exc}") from exc
            except _DRIVER_ERRORS as exc:
                raise StoreError(f"postgres: {exc}") from exc
        raise AssertionError("unreachable")

    # -- lifecycle ---------------------------------------------------------------
    async def migrate(self) -> None:
        schema = self._schema
        lock_key = zlib.crc32((schema or "").encode()) - 0x80000000  # fit Postgres' signed int4

        async def run(conn: Any) -> None:
            # Transaction-scoped: released on commit or rollback, so a crashed migrator never wedges it.
            await conn.execute("SELECT pg_advisory_xact_lock($1, $2)", _MIGRATE_LOCK_CLASS, lock_key)
            if schema:
                await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            await conn.execute(SCHEMA_VERSION_DDL["postgres"])
            current = await conn.fetchval("SELECT COALESCE(MAX(version), 0) FROM schema_version")
            # A newer schema than this code knows is left alone: migrations are additive,
            # so an older instance keeps working during a rolling deploy.
            for version, statements in pending("postgres", int(current)):
                for statement in statements:
                    await conn.execute(statement)
                await conn.execute(
                    "INSERT INTO schema_version (version, applied_at) VALUES ($1, $2)", version, time.time()
                )

        await self._transact(run)

    async def close(self) -> None:
        async with self._pool_lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), _CLOSE_TIMEOUT)
            except (TimeoutError, *_DRIVER_ERRORS):
                pool.terminate()

    async def ping(self) -> None:
        async with self._conn() as conn:
            await conn.fetchval("SELECT 1")

    # -- ingress ---------------------------------------------------------------------
    @staticmethod
    async def _find(conn: Any, channel: str, thread_ts: str) -> str | None:
        task_id = await conn.fetchval(
            "SELECT task_id FROM conversations WHERE channel = $1 AND thread_ts = $2", channel, thread_ts
        )
        return None if task_id is None else str(task_id)

    @classmethod
    async def _create(
        cls, conn: Any, channel: str, thread_ts: str, now: float, *, map_key: bool
    ) -> tuple[str, bool]:
        """A new task with origin ``(channel, thread_ts)``, mapping that key when ``map_key``:
        ``(task_id, True)``; or ``(winner, False)`` if a concurrent transaction mapped the key first."""
        task_id = new_task_id()
        if map_key:
            # The key first (its foreign key is deferred): ON CONFLICT waits for a concurrent
            # transaction mapping the same key, and if that one committed, its task wins.
            mapped = await conn.fetchval(
                "INSERT INTO conversations (channel, thread_ts, task_id) VALUES ($1, $2, $3)"
                " ON CONFLICT (channel, thread_ts) DO NOTHING RETURNING task_id",
                channel,
                thread_ts,
                task_id,
            )
            if mapped is None:
                winner = await cls._find(conn, channel, thread_ts)
                if winner is None:  # mappings are never deleted, so the winner's is there
                    raise StoreError(f"conversation {channel}/{thread_ts} vanished while mapping it")
                return winner, False
        await conn.execute(
            "INSERT INTO tasks (task_id, channel, thread_ts, created_at) VALUES ($1, $2, $3, $4)",
            task_id,
            channel,
            thread_ts,
            now,
        )
        return task_id, True

    async def find_task(self, channel: str, thread_ts: str) -> str | None:
        async with self._conn() as conn:
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
        # One round trip: the whole claim is the server-side function of schema v2 (see schema.py),
        # run in the statement's own transaction.
        async def claim(conn: Any) -> ClaimOutcome:
            row = await conn.fetchrow(
                "SELECT status, task_id, item_id, created"
                " FROM tb_claim_message($1, $2, $3, $4, $5, $6, $7, $8)",
                event_id,
                channel,
                ts,
                thread_ts,
                create,
                payload,
                now,
                new_task_id(),
            )
            item_id = row["item_id"]
            return ClaimOutcome(
                row["status"],
                task_id=row["task_id"],
                item_id=None if item_id is None else int(item_id),
                created=bool(row["created"]),
            )

        return await self._transact(claim, transaction=False)

    @staticmethod
    async def _prune_batch(conn: Any, sql: str, older_than: float) -> int:
        return int(await conn.fetchval(sql, older_than, _PRUNE_BATCH))

    async def prune_claims(self, *, older_than: float) -> int:
        deleted = 0
        for sql in _PRUNE_SQL:
            while True:
                # One statement per batch, committed on its own: row locks are held only that long.
                count = await self._transact(
                    partial(self._prune_batch, sql=sql, older_than=older_than), transaction=False
                )
                deleted += count
                if count < _PRUNE_BATCH:  # done, or the rest is locked by a concurrent prune
                    break
        return deleted

    # -- tasks -------------------------------------------------------------------------
    async def create_task(self, *, channel: str, thread_ts: str, now: float) -> TaskRecord:
        async def create(conn: Any) -> TaskRecord:
            task_id = await self._find(conn, channel, thread_ts) if thread_ts else None
            if task_id is None:
                task_id, _ = await self._create(conn, channel, thread_ts, now, map_key=bool(thread_ts))
            row = await conn.fetchrow(f"SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = $1", task_id)
            return task_from_row(row)

        return await self._transact(create)

    async def get_task(self, task_id: str) -> TaskRecord | None:
        async with self._conn() as conn:
            row = await conn.fetchrow(f"SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = $1", task_id)
        return None if row is None else task_from_row(row)

    async def set_task_thread(self, task_id: str, thread_ts: str) -> None:
        async with self._conn() as conn:
            found = await conn.fetchval(SET_THREAD_SQL.format(task="$1", thread="$2"), task_id, thread_ts)
        if not found:
            raise StoreError(f"unknown task {task_id!r}")

    async def record_root(self, *, channel: str, ts: str, task_id: str) -> None:
        async with self._conn() as conn:
            await conn.execute(
                "INSERT INTO conversations (channel, thread_ts, task_id) VALUES ($1, $2, $3)"
                " ON CONFLICT (channel, thread_ts) DO NOTHING",
                channel,
                ts,
                task_id,
            )

    async def save_run(
        self,
        task_id: str,
        *,
        transcript: bytes,
        consumed: Sequence[int],
        enabled_tools: Sequence[str] | None = None,
    ) -> None:
        async def save(conn: Any) -> bool:
            # One statement, atomic on its own: the delete only sees a task the update found.
            # Scoped by task: an id of another task's item is ignored, never consumed.
            return bool(
                await conn.fetchval(
                    "WITH saved AS ("
                    " UPDATE tasks SET transcript = $2, enabled_tools = COALESCE($3, enabled_tools)"
                    " WHERE task_id = $1 RETURNING task_id"
                    "), consumed AS ("
                    " DELETE FROM inbox WHERE task_id IN (SELECT task_id FROM saved)"
                    " AND item_id = ANY($4::bigint[])"
                    ") SELECT EXISTS (SELECT 1 FROM saved)",
                    task_id,
                    transcript,
                    None if enabled_tools is None else list(enabled_tools),
                    list(consumed),
                )
            )

        if not await self._transact(save, transaction=False):
            raise StoreError(f"unknown task {task_id!r}")

    async def set_enabled_tools(self, task_id: str, tools: Sequence[str]) -> None:
        async with self._conn() as conn:
            found = await conn.fetchval(
                "UPDATE tasks SET enabled_tools = $2 WHERE task_id = $1 RETURNING true", task_id, list(tools)
            )
        if not found:
            raise StoreError(f"unknown task {task_id!r}")

    # -- inbox ---------------------------------------------------------------------------
    async def pending_inbox(self, task_id: str) -> list[InboxItem]:
        async with self._conn() as conn:
            rows = await conn.fetch(
                f"SELECT {INBOX_COLUMNS} FROM inbox WHERE task_id = $1 ORDER BY item_id", task_id
            )
        return [inbox_from_row(r) for r in rows]

    async def tasks_with_pending_inbox(self, *, now: float) -> list[str]:
        async with self._conn() as conn:
            rows = await conn.fetch(DUE_TASKS_SQL.format(now="$1"), now)
        return [str(r["task_id"]) for r in rows]

    # -- leases --------------------------------------------------------------------------
    async def acquire_lease(self, task_id: str, *, owner: str, ttl: float, now: float) -> bool:
        # One upsert: ON CONFLICT locks the row and re-checks the WHERE on its latest version,
        # so of two concurrent takers of an expired lease only one gets a row back.
        async with self._conn() as conn:
            got = await conn.fetchval(
                "INSERT INTO leases (task_id, owner, expires_at) VALUES ($1, $2, $3)"
                " ON CONFLICT (task_id) DO UPDATE"
                " SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at"
                " WHERE leases.owner = EXCLUDED.owner OR leases.expires_at <= $4"
                " RETURNING true",
                task_id,
                owner,
                now + ttl,
                now,
            )
        return bool(got)

    async def renew_lease(self, task_id: str, *, owner: str, ttl: float, now: float) -> bool:
        async with self._conn() as conn:
            got = await conn.fetchval(
                "UPDATE leases SET expires_at = $3 WHERE task_id = $1 AND owner = $2 RETURNING true",
                task_id,
                owner,
                now + ttl,
            )
        return bool(got)

    async def release_lease(self, task_id: str, *, owner: str) -> None:
        async with self._conn() as conn:
            await conn.execute("DELETE FROM leases WHERE task_id = $1 AND owner = $2", task_id, owner)

    async def get_lease(self, task_id: str) -> LeaseRecord | None:
        async with self._conn() as conn:
            row = await conn.fetchrow(f"SELECT {LEASE_COLUMNS} FROM leases WHERE task_id = $1", task_id)
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
        async with self._conn() as conn:
            row = await conn.fetchrow(
                "INSERT INTO handles (task_id, handle, kind, ref, authored, data)"
                " VALUES ($1, $2, $3, $4, $5, $6)"
                " ON CONFLICT (task_id, kind, ref) DO UPDATE SET"
                " authored = handles.authored OR EXCLUDED.authored,"
                " data = CASE WHEN EXCLUDED.data = '{}' THEN handles.data ELSE EXCLUDED.data END"
                f" RETURNING {HANDLE_COLUMNS}",
                task_id,
                handle,
                kind,
                ref,
                authored,
                data,
            )
        return handle_from_row(row)

    async def resolve_handle(self, task_id: str, handle: str) -> HandleRecord | None:
        async with self._conn() as conn:
            row = await conn.fetchrow(
                f"SELECT {HANDLE_COLUMNS} FROM handles WHERE task_id = $1 AND handle = $2", task_id, handle
            )
        return None if row is None else handle_from_row(row)

    # -- effect journal --------------------------------------------------------------------
    async def open_effect(self, *, effect_id: str, task_id: str, tool: str, args: str, now: float) -> None:
        async with self._conn() as conn:
            await conn.execute(
                "INSERT INTO effects (effect_id, task_id, tool, args, state, created_at)"
                " VALUES ($1, $2, $3, $4, 'open', $5)",
                effect_id,
                task_id,
                tool,
                args,
                now,
            )

    async def close_effect(self, effect_id: str, *, result: str) -> None:
        async with self._conn() as conn:
            found = await conn.fetchval(
                "UPDATE effects SET state = 'done', result = $2 WHERE effect_id = $1 RETURNING true",
                effect_id,
                result,
            )
        if not found:
            raise StoreError(f"unknown effect {effect_id!r}")

    async def open_effects(self, task_id: str) -> list[EffectRecord]:
        async with self._conn() as conn:
            rows = await conn.fetch(
                f"SELECT {EFFECT_COLUMNS} FROM effects WHERE task_id = $1 AND state = 'open' ORDER BY seq",
                task_id,
            )
        return [effect_from_row(r) for r in rows]

    async def get_effect(self, effect_id: str) -> EffectRecord | None:
        async with self._conn() as conn:
            row = await conn.fetchrow(f"SELECT {EFFECT_COLUMNS} FROM effects WHERE effect_id = $1", effect_id)
        return None if row is None else effect_from_row(row)

    async def stats(self) -> StoreStats:
        async with self._conn() as conn:
            row = await conn.fetchrow(STATS_SQL)
        return stats_from_counts(dict(row.items()))
