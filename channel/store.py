"""What the channel layer needs from storage: the seven store methods a session uses.

A :class:`storage.base.Store` satisfies :class:`SessionStore`; so does any small
double a test writes. Keeping the session on this narrow protocol means a change
to scheduling or ingress storage never reaches the tools.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from storage.base import EffectRecord, Fence, HandleKind, HandleRecord


class SessionStore(Protocol):
    """Handles, the effect journal and the task's conversation keys, for one session."""

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
        """The task's handle for ``ref``, minting ``handle`` if it has none (``Store.mint_handle``)."""

    async def resolve_handle(self, task_id: str, handle: str) -> HandleRecord | None:
        """The record of one of this task's handles, or None."""

    async def open_effect(
        self,
        *,
        effect_id: str,
        task_id: str,
        tool: str,
        args: str,
        now: float,
        call_id: str = "",
        fence: Fence | None = None,
    ) -> None:
        """Journal a write before the provider call is made (refused once the lease left ``fence``)."""

    async def close_effect(self, effect_id: str, *, result: str, fence: Fence | None = None) -> None:
        """Record a journalled write's result (JSON); fenced like ``open_effect``."""

    async def get_effect(self, effect_id: str) -> EffectRecord | None:
        """One journalled write, open or closed, or None."""

    async def record_root(self, *, channel: str, ts: str, task_id: str) -> None:
        """Route a thread root the bot posted to this task."""

    async def set_task_thread(self, task_id: str, thread_ts: str) -> None:
        """Move the task's origin into the thread of a root it just posted."""

    async def set_enabled_tools(self, task_id: str, tools: Sequence[str]) -> None:
        """Remember the deferred tools ``tool_search`` enabled, across runs."""
