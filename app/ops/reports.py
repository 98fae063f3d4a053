"""What the commands that report from the database (``usage``, ``follow-ups``) share: reading the
store, which says why when it cannot open, and the Slack adapter they look names and permalinks up
with, which only costs those when Slack cannot be reached (the command says so and still prints)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TextIO, TypeVar

from app.settings import Settings
from channel.slack import SlackAdapter
from storage.base import Store

log = logging.getLogger(__name__)

T = TypeVar("T")


async def read_store(settings: Settings, read: Callable[[Store], Awaitable[T]], err: TextIO) -> T | None:
    """What ``read`` gets from the ready store (closed after), or None, said on ``err``, when the
    store cannot be opened (the command exits 2)."""
    from app.service import StartupError, open_ready_store

    try:
        store = await open_ready_store(settings)
    except StartupError as exc:
        print(f"threadbound: {exc}", file=err)
        return None
    try:
        return await read(store)
    finally:
        await store.close()


@asynccontextmanager
async def slack_lookups(
    settings: Settings, err: TextIO, without: str, *, wanted: bool = True
) -> AsyncIterator[SlackAdapter | None]:
    """The Slack adapter while the block looks things up (closed after), or None: not ``wanted``, no
    bot token, or Slack not reachable, which is said on ``err`` with what the report goes ``without``."""
    adapter = await _connect(settings) if wanted else None
    if wanted and adapter is None:
        print(f"threadbound: Slack is not reachable at {settings.slack_api_url}: {without}", file=err)
    try:
        yield adapter
    finally:
        if adapter is not None:
            await adapter.close()


async def _connect(settings: Settings) -> SlackAdapter | None:
    token = settings.slack_bot_token.get_secret_value()
    if not token:
        return None
    try:
        return await SlackAdapter.connect(
            token=token, api_url=settings.slack_api_url, file_origins=settings.slack_file_origins
        )
    except Exception as exc:  # any failure only costs the lookups
        log.debug("no Slack for a report's lookups: %s", exc)
        return None
