"""Every Postgres call is bounded: a stuck statement and a pool with no free connection fail the call
with StoreError instead of hanging it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import asyncpg
import pytest

from app.service import open_ready_store
from app.settings import Settings
from storage.base import StoreError
from storage.postgres import PostgresStore, _alive
from tests.support.postgres import fresh_schema

#: Generous: the test fails (instead of hanging) if a call is not bounded at all.
NOT_BOUNDED = 60.0


@pytest.fixture
async def pg() -> AsyncIterator[tuple[str, str]]:
    async with fresh_schema() as schema:
        yield schema.base, schema.name


async def test_a_statement_stuck_on_a_lock_fails_after_the_command_timeout(pg: tuple[str, str]) -> None:
    """A statement that cannot proceed (a table locked by another session) fails with StoreError."""
    base, schema = pg
    store = PostgresStore(base, schema=schema, command_timeout=0.5)
    await store.migrate()
    task = await store.create_task(channel="C1", thread_ts="1.0", now=time.time())
    blocker = await asyncpg.connect(base)
    try:
        async with blocker.transaction():
            await blocker.execute(f'LOCK TABLE "{schema}".tasks IN ACCESS EXCLUSIVE MODE')
            with pytest.raises(StoreError):
                await asyncio.wait_for(store.get_task(task.task_id), NOT_BOUNDED)
    finally:
        await blocker.close()
        await store.close()


async def test_waiting_for_a_pooled_connection_is_bounded(pg: tuple[str, str]) -> None:
    """With every pooled connection taken, a call fails with StoreError after the acquire timeout."""
    base, schema = pg
    store = PostgresStore(base, schema=schema, min_size=1, max_size=1, acquire_timeout=0.5)
    await store.migrate()
    pool = await store.database._get_pool()
    try:
        async with pool.acquire():
            with pytest.raises(StoreError):
                await asyncio.wait_for(store.find_task("C1", "1.0"), NOT_BOUNDED)
        assert await store.find_task("C1", "1.0") is None  # and it works again once one is free
    finally:
        await store.close()


async def test_a_liveness_session_whose_connection_broke_is_not_alive() -> None:
    """A terminated backend's FATAL can reach asyncpg while the liveness connection is idle; its next
    statement then fails with InternalClientError ("cannot switch to state 11; another operation (2)
    is in progress"). The ping says "not alive", so register_instance takes a new session, instead
    of raising at every look from then on (seen under load in the contract test that terminates
    our own session)."""

    class Broken:
        async def fetchval(self, query: str) -> object:
            raise asyncpg.exceptions.InternalClientError(
                "cannot switch to state 11; another operation (2) is in progress"
            )

    assert await _alive(Broken()) is False  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("runs", "pool_size", "expected"),
    [(64, None, 36), (200, None, 104), (1, None, 10), (64, 80, 80)],
)
def test_the_pool_is_sized_from_max_concurrent_runs(runs: int, pool_size: int | None, expected: int) -> None:
    """A connection for every second run and four for the instance's own trips, at least ten;
    DATABASE_POOL_SIZE overrides it."""
    settings = Settings(_env_file=None, max_concurrent_runs=runs, database_pool_size=pool_size)  # type: ignore[call-arg]
    assert settings.resolved_database_pool_size == expected


async def test_the_services_store_opens_a_pool_of_that_size() -> None:
    """The service's Postgres store (``open_ready_store``) opens its pool at the size the settings
    say, not a fixed ten: 200 concurrent runs get 104 connections."""
    async with fresh_schema() as schema:
        settings = Settings(_env_file=None, database_url=schema.url, max_concurrent_runs=200)  # type: ignore[call-arg]
        store = await open_ready_store(settings)
        try:
            assert isinstance(store, PostgresStore)
            pool = await store.database._get_pool()
            assert pool.get_max_size() == 104
        finally:
            await store.close()
