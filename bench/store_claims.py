"""store_claims: ``Store.claim_message`` per second, against plain statements writing the same rows.

A claim of a mention that starts a conversation writes five rows in one transaction: both claim
keys (``event_claims``, ``message_claims``), the task, its conversation key and the inbox item. The
baseline writes those same rows into the same five tables (its own copy of the DDL: same columns,
keys, foreign keys and index) with plain statements, independent of ``storage/``:

- SQLite (always): the stdlib ``sqlite3`` module, the whole transaction (``BEGIN IMMEDIATE`` … five
  INSERTs and the conversation lookup … ``COMMIT``) in one ``asyncio.to_thread`` call, on a file of
  the same directory with the store's durability settings (``journal_mode=WAL``,
  ``synchronous=FULL``, ``foreign_keys=ON``): one WAL sync per claim. Ours is ``SQLiteStore``.
- Postgres (when ``BENCH_DATABASE_URL`` or ``TEST_DATABASE_URL`` is set): ``asyncpg``, one
  connection, the same statements in a transaction; ours is ``PostgresStore``. Each side in a fresh
  schema, both dropped afterwards.

Each claim is a new message starting a new conversation (``create=True``), as a mention is; the
loop is sequential (one claim after the other), as is the baseline's. Rounds alternate baseline /
ours on the same database; the row is the median rate.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from storage import Store, open_store

from . import Row, Scale, ratios
from .common import median

ROWS = ("store_claims_sqlite", "store_claims_postgres")
PAYLOAD = json.dumps({"channel": "C1", "user": "U1", "text": "<@UBOT> a question of ordinary length"})

#: The five tables a claim writes, as plain DDL; ``{real}``/``{blob}``/``{tools}``/``{serial}`` per dialect.
PLAIN_DDL = (
    """CREATE TABLE tasks (task_id TEXT PRIMARY KEY, channel TEXT NOT NULL, thread_ts TEXT NOT NULL,
        transcript {blob} NOT NULL DEFAULT {empty_blob}, enabled_tools {tools} NOT NULL DEFAULT {no_tools},
        created_at {real} NOT NULL)""",
    """CREATE TABLE conversations (channel TEXT NOT NULL, thread_ts TEXT NOT NULL,
        task_id TEXT NOT NULL REFERENCES tasks (task_id) DEFERRABLE INITIALLY DEFERRED,
        PRIMARY KEY (channel, thread_ts))""",
    """CREATE TABLE event_claims (event_id TEXT PRIMARY KEY, channel TEXT NOT NULL, ts TEXT NOT NULL,
        claimed_at {real} NOT NULL)""",
    """CREATE TABLE message_claims (channel TEXT NOT NULL, ts TEXT NOT NULL, event_id TEXT NOT NULL,
        task_id TEXT REFERENCES tasks (task_id), claimed_at {real} NOT NULL, PRIMARY KEY (channel, ts))""",
    """CREATE TABLE inbox (item_id {serial}, task_id TEXT NOT NULL REFERENCES tasks (task_id),
        channel TEXT NOT NULL, ts TEXT NOT NULL, thread_ts TEXT NOT NULL, payload TEXT NOT NULL,
        created_at {real} NOT NULL)""",
    "CREATE INDEX inbox_task ON inbox (task_id, item_id)",
)
SQLITE_TYPES = {
    "real": "REAL",
    "blob": "BLOB",
    "empty_blob": "x''",
    "tools": "TEXT",
    "no_tools": "'[]'",
    "serial": "INTEGER PRIMARY KEY AUTOINCREMENT",
}
POSTGRES_TYPES = {
    "real": "DOUBLE PRECISION",
    "blob": "BYTEA",
    "empty_blob": "'\\x'",
    "tools": "TEXT[]",
    "no_tools": "'{}'",
    "serial": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
}
#: One claim, in order: the conversation's task (none: a new one), then the rows.
FIND = "SELECT task_id FROM conversations WHERE channel = {0} AND thread_ts = {1}"
INSERTS = (
    "INSERT INTO event_claims (event_id, channel, ts, claimed_at) VALUES ({0}, {1}, {2}, {3})",
    "INSERT INTO tasks (task_id, channel, thread_ts, created_at) VALUES ({0}, {1}, {2}, {3})",
    "INSERT INTO conversations (channel, thread_ts, task_id) VALUES ({0}, {1}, {2})",
    "INSERT INTO message_claims (channel, ts, event_id, task_id, claimed_at)"
    " VALUES ({0}, {1}, {2}, {3}, {4})",
    "INSERT INTO inbox (task_id, channel, ts, thread_ts, payload, created_at)"
    " VALUES ({0}, {1}, {2}, {3}, {4}, {5}) RETURNING item_id",
)


def _sql(template: str, dialect: str) -> str:
    marks = ["?"] * 6 if dialect == "sqlite" else [f"${i}" for i in range(1, 7)]
    return template.format(*marks)


def _claim_rows(event_id: str, ts: str) -> list[tuple[Any, ...]]:
    """The parameters of the five INSERTs for a mention ``ts`` that starts its own conversation."""
    now = time.time()
    task_id = uuid.uuid4().hex
    return [
        (event_id, "C1", ts, now),
        (task_id, "C1", ts, now),
        ("C1", ts, task_id),
        ("C1", ts, event_id, task_id, now),
        (task_id, "C1", ts, ts, PAYLOAD, now),
    ]


class _Keys:
    """Distinct (event_id, ts) pairs across every round and both sides."""

    def __init__(self) -> None:
        self.n = 0

    def next(self) -> tuple[str, str]:
        self.n += 1
        return f"Ev{self.n:09d}", f"1700000000.{self.n:06d}"


async def _rate(count: int, one: Callable[[], Awaitable[None]]) -> float:
    started = time.perf_counter()
    for _ in range(count):
        await one()
    return count / (time.perf_counter() - started)


async def _ours(store: Store, keys: _Keys, count: int) -> float:
    async def one() -> None:
        event_id, ts = keys.next()
        outcome = await store.claim_message(
            event_id=event_id,
            channel="C1",
            ts=ts,
            thread_ts=ts,
            create=True,
            payload=PAYLOAD,
            now=time.time(),
        )
        assert outcome.status == "claimed", outcome

    return await _rate(count, one)


class _PlainSQLite:
    """The baseline on SQLite: stdlib sqlite3, one thread hop per claim."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = FULL")
        self.db.execute("PRAGMA foreign_keys = ON")
        for ddl in PLAIN_DDL:
            self.db.execute(ddl.format(**SQLITE_TYPES))
        self.find = _sql(FIND, "sqlite")
        self.inserts = [_sql(s, "sqlite") for s in INSERTS]

    def claim(self, event_id: str, ts: str) -> int:
        rows = _claim_rows(event_id, ts)
        self.db.execute("BEGIN IMMEDIATE")
        try:
            assert self.db.execute(self.find, ("C1", ts)).fetchone() is None  # a new conversation
            for sql, params in zip(self.inserts[:-1], rows, strict=False):
                self.db.execute(sql, params)
            item = self.db.execute(self.inserts[-1], rows[-1]).fetchone()
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return int(item[0])

    def close(self) -> None:
        self.db.close()


async def _sqlite(scale: Scale) -> Row:
    keys = _Keys()
    ours: list[float] = []
    base: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-claims-") as tmp:
        store = open_store(f"sqlite:///{tmp}/store.db")
        plain = await asyncio.to_thread(_PlainSQLite, Path(tmp) / "plain.db")
        try:
            await store.migrate()

            async def insert() -> None:
                await asyncio.to_thread(plain.claim, *keys.next())

            for _ in range(scale.claim_rounds):
                base.append(await _rate(scale.claims, insert))
                ours.append(await _ours(store, keys, scale.claims))
        finally:
            await asyncio.to_thread(plain.close)
            await store.close()
    return _row("store_claims_sqlite", ours, base, scale, "sqlite3 in one to_thread call per claim")


def _postgres_url() -> str:
    return os.environ.get("BENCH_DATABASE_URL") or os.environ.get("TEST_DATABASE_URL") or ""


async def _postgres(scale: Scale, url: str) -> Row:
    import asyncpg

    keys = _Keys()
    ours: list[float] = []
    base: list[float] = []
    ours_schema = f"tb_bench_{uuid.uuid4().hex[:10]}"
    plain_schema = f"tb_bench_plain_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(url)
    try:
        await admin.execute(f'CREATE SCHEMA "{plain_schema}"')
        plain = await asyncpg.connect(url, server_settings={"search_path": plain_schema})
        try:
            for ddl in PLAIN_DDL:
                await plain.execute(ddl.format(**POSTGRES_TYPES))
            find = _sql(FIND, "postgres")
            inserts = [_sql(s, "postgres") for s in INSERTS]
            store = open_store(f"{url}{'&' if '?' in url else '?'}schema={ours_schema}")
            try:
                await store.migrate()

                async def insert() -> None:
                    rows = _claim_rows(*keys.next())
                    async with plain.transaction():
                        assert await plain.fetchval(find, "C1", rows[1][2]) is None  # a new conversation
                        for sql, params in zip(inserts[:-1], rows, strict=False):
                            await plain.execute(sql, *params)
                        await plain.fetchval(inserts[-1], *rows[-1])

                for _ in range(scale.claim_rounds):
                    base.append(await _rate(scale.claims, insert))
                    ours.append(await _ours(store, keys, scale.claims))
            finally:
                await store.close()
        finally:
            await plain.close()
    finally:
        for schema in (ours_schema, plain_schema):
            await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await admin.close()
    return _row("store_claims_postgres", ours, base, scale, "asyncpg statements in a transaction")


def _row(name: str, ours: list[float], base: list[float], scale: Scale, baseline: str) -> Row:
    ratio, spread = ratios(ours, base)
    return Row(
        name,
        round(median(ours), 1),
        round(median(base), 1),
        "claims/s",
        ">= 0.8",
        ratio=ratio,
        spread=spread,
        note=f"{scale.claim_rounds}x{scale.claims} sequential claims per side, five rows each;"
        f" baseline: {baseline}",
    )


async def run(scale: Scale) -> list[Row]:
    rows = [await _sqlite(scale)]
    url = _postgres_url()
    if url:
        rows.append(await _postgres(scale, url))
    else:
        rows.append(
            Row(
                "store_claims_postgres",
                None,
                None,
                "claims/s",
                ">= 0.8",
                skipped=True,
                note="skipped: set BENCH_DATABASE_URL or TEST_DATABASE_URL to a Postgres database",
            )
        )
    return rows
