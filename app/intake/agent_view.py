"""Slack's agent messaging experience (``manifest --agent-view``): suggested prompts and thread titles.

- ``assistant_thread_started`` (someone opens a new conversation with the bot in its agent view):
  the prompts of ``agent.toml`` (``prompts = [...]``) are offered with
  ``assistant.threads.setSuggestedPrompts``. Nothing is offered when the file has none.
- ``app_home_opened`` on the Messages tab needs nothing: a DM is answered when someone writes; on
  the Home tab it draws that person's Home (``app.intake.home``).
- The first run of a DM thread titles it (``assistant.threads.setTitle``) after its first message.

Everything here is best effort: an install without the agent view never receives these events,
and a refused call is logged and changes nothing else.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from app.runs.run import RunHooks
from channel import inbound
from channel.contract import Origin
from channel.errors import ChannelError
from channel.session import ChannelSession
from channel.slack import SlackAdapter
from storage.base import InboxItem

log = logging.getLogger(__name__)

#: Events the agent view sends that are answered here, not routed to a task.
AGENT_EVENTS = frozenset({"assistant_thread_started", "app_home_opened"})
TITLE_CHARS = 60
#: Slack wants the events acknowledged within 3 seconds.
CALL_TIMEOUT = 2.0


class AgentView:
    def __init__(self, adapter: SlackAdapter, prompts: Sequence[str]) -> None:
        self.adapter = adapter
        self.prompts = tuple(prompts)
        #: Draws the App Home tab when someone opens it (``app.intake.home.AppHome.opened``).
        self.home: Callable[[Mapping[str, Any]], None] | None = None
        # Titles are set in the background (the first model request must not wait); kept until done.
        self._titling: set[asyncio.Task[None]] = set()

    def hooks(self) -> RunHooks:
        return RunHooks(on_start=self.on_start)

    async def close(self) -> None:
        tasks = list(self._titling)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def event(self, event: Mapping[str, Any]) -> None:
        """Handle one agent-view event (acknowledged by the caller whatever happens here)."""
        if event.get("type") == "app_home_opened":
            if self.home is not None:
                self.home(event)  # drawn in the background
            return
        if event.get("type") != "assistant_thread_started" or not self.prompts:
            return
        thread = event.get("assistant_thread")
        if not isinstance(thread, Mapping):
            return
        channel, thread_ts = str(thread.get("channel_id") or ""), str(thread.get("thread_ts") or "")
        if not channel or not thread_ts:
            return
        try:
            async with asyncio.timeout(CALL_TIMEOUT):
                await self.adapter.suggest_prompts(Origin(channel, thread_ts), self.prompts)
        except (ChannelError, TimeoutError) as exc:
            log.info(
                "suggested prompts not shown: %s", getattr(exc, "provider_code", None) or type(exc).__name__
            )

    async def on_start(self, session: ChannelSession, items: Sequence[InboxItem]) -> None:
        """Title a DM thread from its first message, on the task's first run."""
        origin = session.origin
        if session.task.transcript or not items or not origin.thread or not origin.channel.startswith("D"):
            return
        task = asyncio.create_task(self._title(session, items[0], origin), name="thread-title")
        self._titling.add(task)
        task.add_done_callback(self._titling.discard)

    async def _title(self, session: ChannelSession, item: InboxItem, origin: Origin) -> None:
        if (first := inbound.stored(item.payload)) is None:
            return
        try:
            text = (await session.adapter.view(first.data)).text.strip()
        except ChannelError:
            return
        if not text:
            return
        title = " ".join(text.split())
        if len(title) > TITLE_CHARS:
            title = title[: TITLE_CHARS - 1].rstrip() + "…"
        try:
            await self.adapter.set_title(origin, title)
        except ChannelError as exc:
            log.info("thread title not set: %s", exc.provider_code or exc.code)
