"""How a driver takes a task up: the lease, the run's start state and the woken message's handle
in one store trip, and the inbox look its run steers with."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Container, Sequence

from channel.contract import ChannelAdapter
from channel.handles import new_handle
from storage.base import Fence, HandleRecord, InboxItem, RunState, Store, StoreError

from .outcome import Inbox

log = logging.getLogger(__name__)


async def take_task(
    store: Store,
    adapter: ChannelAdapter,
    task_id: str,
    *,
    owner: str,
    ttl: float,
    now: float,
    message: tuple[str, str] | None,
) -> tuple[Fence | None, RunState | None, list[HandleRecord]]:
    """The task's lease and, when taken, its start state (``Store.take_lease_with_state``); with
    ``message`` (the ``(channel, ts)`` that woke it) also that message's handle, which the run's
    prompt shows: minted in the same trip (SQLite commits both in one batch) instead of one of its
    own once the prompt is rendered. Minted whoever gets the lease — an upsert, as the run's own
    mint would be — and skipped when the adapter cannot name the message without a look."""
    taking = store.take_lease_with_state(task_id, owner=owner, ttl=ttl, now=now)
    ref = adapter.inbound_ref(*message) if message is not None else None
    if ref is None:
        fence, state = await taking
        return fence, state, []
    (fence, state), minted = await asyncio.gather(taking, _mint(store, task_id, ref))
    return fence, state, minted


async def _mint(store: Store, task_id: str, ref: str) -> list[HandleRecord]:
    try:
        return [await store.mint_handle(task_id=task_id, kind="msg", ref=ref, handle=new_handle("msg"))]
    except StoreError as exc:
        log.warning("could not mint the woken message's handle early (the run mints it): %s", exc)
        return []


def steering_inbox(store: Store, task_id: str, woken: Container[str]) -> Inbox:
    """The run's look at its inbox for steering. The start state has just read the items, so the
    first look (before the first model request) goes to the store only when a delivery woke the
    task since (``task_id in woken``); a message that is claimed without waking this process (on
    another instance) is seen at the next look, after the first model response."""
    first = True

    async def look() -> Sequence[InboxItem]:
        nonlocal first
        if first and task_id not in woken:
            first = False
            return ()
        first = False
        return await store.pending_inbox(task_id)

    return look
