"""store_claims: ``Store.claim_message`` per second, against a raw single-row INSERT loop.

SQLite (always): our ``SQLiteStore`` on a temp file vs a raw ``sqlite3`` loop on one worker thread
(each INSERT awaited from the event loop, as an async driver would) on another temp file of the
same directory with the store's durability settings (``journal_mode=WAL``, ``synchronous=FULL``,
autocommit: one commit, one WAL sync, per row).

Postgres (when ``BENCH_DATABASE_URL`` or ``TEST_DATABASE_URL`` is set): our ``PostgresStore`` in
a fresh schema vs a raw ``asyncpg`` single-row INSERT loop on one connection, in a second fresh
schema; both dropped afterwards.

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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from storage import Store, open_store

from . import Row, Scale
from .common import median

ROWS = ("store_claims_sqlite", "store_claims_postgres")
PAYLOAD = json.dumps({"channel": "C1", "user": "U1", "text": "<@UBOT> a question of ordinary length"})
RAW_TABLE = (
    "CREATE TABLE {table} (event_id TEXT PRIMARY KEY, channel TEXT NOT NULL, ts TEXT NOT NULL,"
    " payload TEXT NOT NULL, claimed_at {real} NOT NULL)"
)


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


async def _sqlite(scale: Scale) -> Row:
    keys = _Keys()
    ours: list[float] = []
    base: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-claims-") as tmp:
        store = open_store(f"sqlite:///{tmp}/store.db")
        thread = ThreadPoolExecutor(max_workers=1)
        loop = asyncio.get_running_loop()

        def on_thread(sql: str, *params: object) -> Awaitable[object]:
            return loop.run_in_executor(thread, raw.execute, sql, params)

        raw = await loop.run_in_executor(
            thread,
            lambda: sqlite3.connect(Path(tmp) / "raw.db", isolation_level=None, check_same_thread=False),
        )
        try:
            await store.migrate()
            # The store's settings (storage/sqlite.py): WAL, synchronous=FULL, autocommit per statement.
            await on_thread("PRAGMA journal_mode = WAL")
            await on_thread("PRAGMA synchronous = FULL")
            await on_thread(RAW_TABLE.format(table="claims", real="REAL"))

            async def insert() -> None:
                event_id, ts = keys.next()
                await on_thread(
                    "INSERT INTO claims (event_id, channel, ts, payload, claimed_at) VALUES (?, ?, ?, ?, ?)",
                    event_id,
                    "C1",
                    ts,
                    PAYLOAD,
                    time.time(),
                )

            for _ in range(scale.claim_rounds):
                base.append(await _rate(scale.claims, insert))
                ours.append(await _ours(store, keys, scale.claims))
        finally:
            await loop.run_in_executor(thread, raw.close)
            thread.shutdown()
            await store.close()
    return _row("store_claims_sqlite", ours, base, scale, "sqlite3")


def _postgres_url() -> str:
    return os.environ.get("BENCH_DATABASE_URL") or os.environ.get("TEST_DATABASE_URL") or ""


async def _postgres(scale: Scale, url: str) -> Row:
    import asyncpg

    keys = _Keys()
    ours: list[float] = []
    base: list[float] = []
    ours_schema = f"tb_bench_{uuid.uuid4().hex[:10]}"
    raw_schema = f"tb_bench_raw_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(url)
    try:
        await admin.execute(f'CREATE SCHEMA "{raw_schema}"')
        await admin.execute(RAW_TABLE.format(table=f'"{raw_schema}".claims', real="DOUBLE PRECISION"))
        store = open_store(f"{url}{'&' if '?' in url else '?'}schema={ours_schema}")
        try:
            await store.migrate()

            async def insert() -> None:
                event_id, ts = keys.next()
                await admin.execute(
                    f'INSERT INTO "{raw_schema}".claims (event_id, channel, ts, payload, claimed_at)'
                    " VALUES ($1, $2, $3, $4, $5)",
                    event_id,
                    "C1",
                    ts,
                    PAYLOAD,
                    time.time(),
                )

            for _ in range(scale.claim_rounds):
                base.append(await _rate(scale.claims, insert))
                ours.append(await _ours(store, keys, scale.claims))
        finally:
            await store.close()
    finally:
        for schema in (ours_schema, raw_schema):
            await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await admin.close()
    return _row("store_claims_postgres", ours, base, scale, "asyncpg")


def _row(name: str, ours: list[float], base: list[float], scale: Scale, driver: str) -> Row:
    return Row(
        name,
        round(median(ours), 1),
        round(median(base), 1),
        "claims/s",
        ">= 0.8",
        note=f"{scale.claim_rounds}x{scale.claims} sequential claims per side; baseline: raw {driver} INSERT",
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
