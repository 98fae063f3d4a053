"""The shared store for several instances: Postgres through an asyncpg pool.

The pool is created on first use (``migrate()`` on start). Atomicity comes from
transactions and unique keys: a claim inserts its claim keys with
``ON CONFLICT DO NOTHING``, so a concurrent claim of the same message waits
on the first one's uncommitted row and then sees it as a duplicate (or proceeds,
if the first rolled back). Every operation is one round trip: a procedure
(claim, task creation, save) is one call of the function ``migrate()`` generated
from its statements (``sql.Procedure``), everything else is a single statement,
and released connections skip asyncpg's session reset query. Statements that
Postgres aborts as deadlocked or unserializable are rerun.

Every call is bounded: a statement by ``command_timeout`` (asyncpg's, on every connection of the
pool) and the wait for a pooled connection by ``acquire_timeout``, so a connection stuck after a
failover fails the call with ``StoreError`` instead of hanging the heartbeat, a lease check, a
run (and its slot) or shutdown.

``schema=`` (or ``?schema=NAME`` in the URL) puts every table in that schema,
created by ``migrate()`` if missing; tests use it for isolation.
"""

from __future__ import annotations

import asyncio
import functools
import re
import secrets
import zlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

from .records import StoreError
from .sql import POSTGRES, Procedure, Row, Script, Statement
from .sqlcore import Database
from .sqlstore import SqlStore

T = TypeVar("T")

#: Driver failures that mean "the store could not do it"; mapped to StoreError at the boundary.
#: ``TimeoutError`` is a statement past ``command_timeout`` or no pooled connection in time;
#: ``InternalClientError`` a connection whose ended session's last message (a terminated backend's
#: FATAL) arrived while it was idle ("cannot switch to state …" at its next statement).
_DRIVER_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
    OSError,
    TimeoutError,
)
#: Seconds one statement (a procedure, a migration step) may run before it fails.
COMMAND_TIMEOUT = 15.0
#: Seconds a call may wait for a pooled connection before it fails.
ACQUIRE_TIMEOUT = 10.0
_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
#: First key of the migration advisory lock ("tb"); the second is derived from the schema name.
_MIGRATE_LOCK_CLASS = 0x7462
_MIGRATE_LOCK = Statement("SELECT pg_advisory_xact_lock(:lock_class, :lock_key)")
#: An instance's liveness: a session-level advisory lock ``(_LIVENESS_LOCK_CLASS, its key)`` held on
#: a connection of its own for the instance's life. Postgres ends it when that session ends, so a
#: killed instance's lock is gone as soon as the database notices the connection dropped.
_LIVENESS_LOCK_CLASS = 0x7469
_LIVENESS_LOCK = "SELECT pg_advisory_lock($1, $2)"
_LIVE_KEYS = (
    "SELECT objid::bigint AS key FROM pg_locks WHERE locktype = 'advisory' AND granted"
    " AND objsubid = 2 AND classid::bigint = $1"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)
_TX_ATTEMPTS = 3
_READ = re.compile(r"\s*(SELECT|WITH)\b", re.IGNORECASE)
_WRITES = re.compile(
    r"\b(INSERT|UPDATE|DELETE|MERGE|pg_advisory\w*|nextval|setval)\b|\bFOR\s+UPDATE\b", re.IGNORECASE
)
#: Connections of a store made by ``for_another_loop`` (the HTTP edge's claims), and the seconds its
#: close waits for them before dropping them (it runs inside the shutdown's drain step).
SIBLING_POOL = 4
SIBLING_CLOSE_TIMEOUT = 1.0
_CLOSE_TIMEOUT = 10.0


def _session_ended(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection's session is gone (terminated, dropped, its protocol
    left mid-message by a terminated backend), not that a statement failed."""
    return isinstance(
        exc,
        (
            asyncpg.InterfaceError,
            asyncpg.exceptions.InternalClientError,
            asyncpg.PostgresConnectionError,
            asyncpg.exceptions.OperatorInterventionError,
            OSError,
        ),
    )


@functools.lru_cache(maxsize=512)
def _reads_only(sql: str) -> bool:
    """Whether a statement only reads (a SELECT that writes nothing): making it twice is harmless."""
    return bool(_READ.match(sql)) and not _WRITES.search(sql)


def _never_sent(exc: BaseException) -> bool:
    """Whether the call failed before its statement could reach the server, so that making it again
    cannot make it twice: the connection was in no state to send (a terminated backend's FATAL
    arrived while it was idle: "cannot switch to state …"), or writing to its socket failed."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, (asyncpg.exceptions.InternalClientError, BrokenPipeError)):
            return True
        if isinstance(cause, asyncpg.InterfaceError) and "cannot switch to state" in str(cause):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


async def _keep_session(conn: asyncpg.Connection) -> None:
    """The pool's reset on release, in place of asyncpg's default (a ``RESET ALL; UNLISTEN *; …``
    query, one more round trip per operation). The store leaves no session state to reset: no
    SET, LISTEN, cursors or session advisory locks (the migration lock is transaction-scoped), and
    asyncpg still rolls back a transaction left open before calling this."""


async def _alive(conn: asyncpg.Connection) -> bool:
    """Whether the session holding the liveness lock still answers (a terminated backend's socket
    may not look closed until it is used)."""
    try:
        await asyncio.wait_for(conn.fetchval("SELECT 1"), _CLOSE_TIMEOUT / 2)
    except (TimeoutError, *_DRIVER_ERRORS):
        return False
    return True


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


class PostgresDatabase(Database):
    """Postgres as a :class:`~storage.sqlstore.SqlStore` reaches it: an asyncpg pool, every call one
    round trip (module docstring)."""

    dialect: ClassVar = POSTGRES
    #: A database restart, a failover or a terminated backend ends every instance's liveness session
    #: at once; each takes its lock again on its next takeover pass (``app.runs.scheduler``). An owner
    #: not seen alive under the looker's current lock counts as dead only once its lock has been
    #: missing this long (``Store.liveness_grace``, ``app.runs.takeover``).
    liveness_grace: float = 12.0

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = 10.0,
        command_timeout: float = COMMAND_TIMEOUT,
        acquire_timeout: float = ACQUIRE_TIMEOUT,
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
        self._command_timeout = command_timeout
        self._acquire_timeout = acquire_timeout
        self._pool: asyncpg.Pool | None = None
        self._pool_lock = asyncio.Lock()
        self._closed = False
        #: The connection holding this instance's liveness lock (register_instance), if any,
        #: and the owner and key it holds it for.
        self._liveness: asyncpg.Connection | None = None
        self._liveness_of: tuple[str, int] | None = None
        self._close_timeout = _CLOSE_TIMEOUT

    @property
    def schema(self) -> str | None:
        return self._schema

    def for_another_loop(self) -> PostgresDatabase:
        """The same database and schema through a pool of its own (at most ``SIBLING_POOL``
        connections), created on first use on the calling loop."""
        sibling = PostgresDatabase(
            self._dsn,
            schema=self._schema,
            min_size=1,
            max_size=SIBLING_POOL,
            connect_timeout=self._connect_timeout,
            command_timeout=self._command_timeout,
            acquire_timeout=self._acquire_timeout,
        )
        sibling._close_timeout = SIBLING_CLOSE_TIMEOUT
        return sibling

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
                            command_timeout=self._command_timeout,
                            server_settings=settings,
                            reset=_keep_session,
                        )
                    except (*_DRIVER_ERRORS, ValueError) as exc:
                        # The message names the failure, never the URL (it may carry a password).
                        raise StoreError(f"cannot connect to Postgres: {exc}") from exc
        if self._closed:
            raise StoreError("store is closed")
        return pool

    async def _transact(
        self, work: Callable[[Any], Awaitable[T]], *, transaction: bool = False, reads: bool = False
    ) -> T:
        """Run ``work(conn)`` on a pooled connection, rerunning it when Postgres aborts it as a
        deadlock or serialization failure (nothing of it was committed then), and when its session
        had ended (a restart, a failover) if it only ``reads`` or never reached the server. Without
        ``transaction`` ``work`` is one statement, atomic on its own: no BEGIN/COMMIT trips."""
        for attempt in range(1, _TX_ATTEMPTS + 1):
            pool = await self._get_pool()
            try:
                async with pool.acquire(timeout=self._acquire_timeout) as conn:
                    if not transaction:
                        return await work(conn)
                    async with conn.transaction():
                        return await work(conn)
            except asyncpg.TransactionRollbackError as exc:
                if attempt == _TX_ATTEMPTS:
                    raise StoreError(f"postgres: {exc}") from exc
            except _DRIVER_ERRORS as exc:
                ended = _session_ended(exc)
                if ended:
                    # A restart or failover ended every session: the pool's idle connections are
                    # dead too; each would fail its next call. Replace them all at their next use.
                    await pool.expire_connections()
                    if attempt < _TX_ATTEMPTS and (reads or _never_sent(exc)):
                        continue  # a read, or nothing reached the server: made again (it cannot count twice)
                error = StoreError(f"postgres: {exc or type(exc).__name__}")
                error.session_ended = ended
                raise error from exc
        raise AssertionError("unreachable")

    # -- statements ------------------------------------------------------------------
    async def fetch(self, statement: Statement, params: Mapping[str, Any]) -> list[Row]:
        sql, args = POSTGRES.sql(statement), POSTGRES.args(statement, params)
        return await self._transact(lambda conn: conn.fetch(sql, *args), reads=_reads_only(sql))

    async def execute(self, statement: Statement, params: Mapping[str, Any]) -> int:
        sql, args = POSTGRES.sql(statement), POSTGRES.args(statement, params)
        status: str = await self._transact(lambda conn: conn.execute(sql, *args))
        # The command tag: "DELETE 3", "UPDATE 1", "INSERT 0 1"; the count comes last.
        return int(status.rsplit(" ", 1)[-1])

    async def call(self, procedure: Procedure, params: Mapping[str, Any], *, synced: bool = True) -> Row:
        # ``synced`` is SQLite's business: every Postgres commit waits for its WAL flush.
        call = procedure.call
        sql, args = POSTGRES.sql(call), POSTGRES.args(call, params)
        row: Row | None = await self._transact(lambda conn: conn.fetchrow(sql, *args))
        assert row is not None, procedure.name  # a procedure's result query yields one row
        return row

    async def script(self, make: Callable[[], Script]) -> Any:
        async def drive(conn: Any) -> Any:
            script = make()
            try:
                statement, params = next(script)
                while True:
                    sql, args = POSTGRES.sql(statement), POSTGRES.args(statement, params)
                    statement, params = script.send(await conn.fetch(sql, *args))
            except StopIteration as done:
                return done.value

        return await self._transact(drive, transaction=True)

    def migration_prelude(self) -> Sequence[tuple[Statement, Mapping[str, Any]]]:
        schema = self._schema
        lock_key = zlib.crc32((schema or "").encode()) - 0x80000000  # fit Postgres' signed int4
        # Transaction-scoped: released on commit or rollback, so a crashed migrator never wedges it.
        steps: list[tuple[Statement, Mapping[str, Any]]] = [
            (_MIGRATE_LOCK, {"lock_class": _MIGRATE_LOCK_CLASS, "lock_key": lock_key})
        ]
        if schema:
            steps.append((Statement(f'CREATE SCHEMA IF NOT EXISTS "{schema}"', verbatim=True), {}))
        return steps

    # -- liveness ----------------------------------------------------------------
    async def hold_liveness(self, owner: str) -> tuple[int, bool]:
        held = self._liveness
        if held is not None and not held.is_closed() and self._liveness_of is not None:
            if self._liveness_of[0] == owner and await _alive(held):
                return self._liveness_of[1], False
        key = secrets.randbelow(2**31 - 1) + 1  # an int4 key, positive: it reads back unchanged
        try:
            conn = await asyncpg.connect(
                self._dsn, timeout=self._connect_timeout, command_timeout=self._command_timeout
            )
        except (*_DRIVER_ERRORS, ValueError) as exc:
            raise StoreError(f"cannot connect to Postgres: {exc}") from exc
        try:
            await conn.execute(_LIVENESS_LOCK, _LIVENESS_LOCK_CLASS, key)
        except _DRIVER_ERRORS as exc:
            conn.terminate()  # it may be the stuck one: no goodbye
            raise StoreError(f"postgres: {exc or type(exc).__name__}") from exc
        old, self._liveness = self._liveness, conn
        self._liveness_of = (owner, key)
        if old is not None:
            old.terminate()  # a session that may be dead already: no goodbye
        return key, True

    async def dead(self, owners: Sequence[tuple[str, int]]) -> list[str]:
        _, held = await self.lock_states("", owners)
        return [owner for owner, alive in held.items() if not alive]

    async def lock_states(
        self, owner: str, owners: Sequence[tuple[str, int]]
    ) -> tuple[int | None, dict[str, bool]]:
        # One pg_locks read: a consistent snapshot of every lock, ours included.
        rows = await self._transact(lambda conn: conn.fetch(_LIVE_KEYS, _LIVENESS_LOCK_CLASS))
        live = {int(r["key"]) for r in rows}
        ours = self._liveness_of
        session = ours[1] if ours is not None and ours[0] == owner and ours[1] in live else None
        return session, {name: key in live for name, key in owners}

    # -- lifecycle ---------------------------------------------------------------
    async def close(self) -> None:
        liveness, self._liveness = self._liveness, None
        if liveness is not None:
            # Closing the session releases the lock; a clean stop released its leases already.
            await _close(liveness)
        async with self._pool_lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            await _close(pool, self._close_timeout)


class PostgresStore(SqlStore):
    """:class:`~storage.base.Store` on Postgres; safe to share between processes and machines."""

    database: PostgresDatabase

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = 10.0,
        command_timeout: float = COMMAND_TIMEOUT,
        acquire_timeout: float = ACQUIRE_TIMEOUT,
    ) -> None:
        database = PostgresDatabase(
            url,
            schema=schema,
            min_size=min_size,
            max_size=max_size,
            connect_timeout=connect_timeout,
            command_timeout=command_timeout,
            acquire_timeout=acquire_timeout,
        )
        super().__init__(database)

    @property
    def schema(self) -> str | None:
        return self.database.schema


async def _close(closable: asyncpg.Connection | asyncpg.Pool, within: float = _CLOSE_TIMEOUT) -> None:
    """Close a connection or the pool politely, or terminate it when that fails or takes too long."""
    try:
        await asyncio.wait_for(closable.close(), within)
    except (TimeoutError, *_DRIVER_ERRORS):
        closable.terminate()
