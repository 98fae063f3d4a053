"""A fresh Postgres schema on ``TEST_DATABASE_URL`` for one test, dropped after it.

Tests that start several real processes on one database (failover, crash matrix, socket mode)
share this setup instead of each spelling out the skip, the schema name and the teardown.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from typing import NamedTuple

import asyncpg
import pytest


class Schema(NamedTuple):
    """``base``: TEST_DATABASE_URL; ``name``: the schema; ``url``: the URL that opens it."""

    base: str
    name: str
    url: str


def base_url(reason: str = "TEST_DATABASE_URL not set") -> str:
    """TEST_DATABASE_URL, or skip the test (with ``reason``) when it is not set."""
    base = os.environ.get("TEST_DATABASE_URL", "")
    if not base:
        pytest.skip(reason)
    return base


def new_schema(base: str, prefix: str = "tb_test") -> Schema:
    """A new (not yet created) schema name on ``base``'s Postgres, and the URL that opens it."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    return Schema(base, name, f"{base}{'&' if '?' in base else '?'}schema={name}")


async def drop_schema(base: str, schema: str) -> None:
    """Drop ``schema`` (and all in it) on ``base``'s Postgres, if it exists."""
    conn = await asyncpg.connect(base)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def fresh_schema(
    prefix: str = "tb_test", reason: str = "TEST_DATABASE_URL not set"
) -> AsyncIterator[Schema]:
    """A fresh schema on TEST_DATABASE_URL (skipping the test when unset), dropped on exit."""
    schema = new_schema(base_url(reason), prefix)
    try:
        yield schema
    finally:
        await drop_schema(schema.base, schema.name)
