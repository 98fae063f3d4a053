"""A card update after a decision runs in the background: a store failure there is logged, not lost."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from app.agent.approvals import Approvals
from app.agent.asks import Asks
from storage.base import StoreError


class _FailingStore:
    """Only what a card update reads; the store is down."""

    async def get_approval(self, approval_id: str) -> Any:
        raise StoreError("database unreachable")

    async def get_ask(self, ask_id: str) -> Any:
        raise StoreError("database unreachable")


class _NoCalls:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"no Slack call expected ({name})")


@pytest.mark.parametrize("kind", ["approval", "ask"])
async def test_a_store_failure_while_updating_a_card_is_logged_and_contained(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The decision is already stored; reading it back for the card fails: one warning, no Slack call,
    and the background task ends cleanly (no "Task exception was never retrieved")."""
    approvals = Approvals(store=_FailingStore(), adapter=_NoCalls())  # type: ignore[arg-type]
    updater = approvals if kind == "approval" else Asks(approvals)
    caplog.set_level(logging.WARNING)
    updater._update_card("ap_1" if kind == "approval" else "q_1")
    tasks = list(approvals.cards._tasks)
    await approvals.idle()
    assert all(t.done() and t.exception() is None for t in tasks)
    assert any("to update its card" in r.getMessage() for r in caplog.records)
    await asyncio.sleep(0)
