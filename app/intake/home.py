"""The App Home tab — a person's open tasks (with links), pending follow-ups (with Cancel buttons)
and budget today, drawn afresh each time they open it — and the Cancel buttons' clicks, from the
Home tab or from the slash command's ``follow-ups`` answer.

``app_home_opened`` (tab ``home``) is acknowledged at once; the view is read from the store and
published (``views.publish``) in the background, for that person only: everything on it is read by
their user id. A Cancel click cancels (the click's quick, durable work) and then, in the background,
redraws where it was clicked: the Home tab again, or the private answer through its ``response_url``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from app.clicks import Action
from app.settings import Settings
from channel.errors import ChannelError
from storage.base import StoreError

from .personal import Personal, parse_cancel_value
from .personal_blocks import Block, Links, follow_up_blocks, header, section, task_blocks, usage_blocks

log = logging.getLogger(__name__)

#: Publishes a Home view for a person: ``(user, view)``.
Publish = Callable[[str, Mapping[str, Any]], Awaitable[None]]
#: Answers through an interaction's ``response_url``: ``(url, body)``.
Respond = Callable[[str, Mapping[str, Any]], Awaitable[None]]
#: Tells a clicker something privately (``app.intake.interactions.Interactions.tell``).
Tell = Callable[[Action, str], None]

_CANCEL_NOTES = {
    "not_yours": "Only the person who asked for that follow-up can cancel it.",
    "gone": "That follow-up is no longer pending (it fired or was cancelled already).",
}


class AppHome:
    """See the module docstring."""

    def __init__(
        self,
        settings: Settings,
        personal: Personal,
        links: Links,
        *,
        publish: Publish,
        respond: Respond,
        tell: Tell | None = None,
    ) -> None:
        self.settings = settings
        self.personal = personal
        self.links = links
        self._publish = publish
        self._respond = respond
        self.tell = tell
        self._drawing: set[asyncio.Task[None]] = set()

    def opened(self, event: Mapping[str, Any]) -> None:
        """``app_home_opened``: the Home tab redrawn for its person, in the background."""
        user = str(event.get("user") or "")
        if event.get("tab", "home") != "home" or not user:
            return
        if self.settings.allowed_users and user not in self.settings.allowed_users:
            self._spawn(self._publish_view(user, [section("This app is not open to you.")]), user)
            return
        self._spawn(self.publish(user), user)

    async def view(self, user: str) -> list[Block]:
        """The Home tab's blocks for ``user``: their tasks, follow-ups and budget, read now."""
        usage = await self.personal.usage(user)
        tasks = await self.personal.tasks(user)
        follow_ups = await self.personal.follow_ups(user)
        command = self.settings.slash_command
        return [
            header("Your budget today"),
            *usage_blocks(usage),
            {"type": "divider"},
            header("Your tasks"),
            *task_blocks(tasks, self.links),
            {"type": "divider"},
            header("Your follow-ups"),
            *follow_up_blocks(follow_ups, self.links),
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": f"`{command} help` lists what the command does."}],
            },
        ]

    async def publish(self, user: str) -> None:
        try:
            blocks = await self.view(user)
        except StoreError as exc:
            log.warning("the Home tab could not be read: %s", exc)
            blocks = [section("Your tasks could not be looked up just now; open this tab again in a minute.")]
        await self._publish_view(user, blocks)

    async def _publish_view(self, user: str, blocks: list[Block]) -> None:
        try:
            await self._publish(user, {"type": "home", "blocks": blocks})
        except ChannelError as exc:
            log.warning("the Home tab was not published: %s", exc.provider_code or exc.code)

    async def cancel_click(self, action: Action) -> None:
        """A Cancel button: the clicker's own pending follow-up cancelled, then its surface redrawn."""
        parsed = parse_cancel_value(action.value)
        if parsed is None:
            return
        outcome = await self.personal.cancel(action.user_id, *parsed)
        if outcome.status != "cancelled" and self.tell is not None:
            self.tell(action, _CANCEL_NOTES[outcome.status])
        container = action.payload.get("container")
        on_home = isinstance(container, Mapping) and container.get("type") == "view"
        if on_home:
            self._spawn(self.publish(action.user_id), action.user_id)
        elif action.response_url:
            self._spawn(self._redraw_answer(action), action.user_id)

    async def _redraw_answer(self, action: Action) -> None:
        """The slash command's private ``follow-ups`` answer, redrawn in place without the cancelled one."""
        records = await self.personal.follow_ups(action.user_id)
        text = f"You have {len(records)} pending follow-up{'s' if len(records) != 1 else ''}."
        body = {
            "replace_original": True,
            "response_type": "ephemeral",
            "text": text,
            "blocks": [section(f"*{text}*"), *follow_up_blocks(records, self.links)],
        }
        try:
            await self._respond(action.response_url, body)
        except ChannelError as exc:
            log.warning("the follow-ups answer was not redrawn: %s", exc.message)

    def _spawn(self, work: Awaitable[None], user: str) -> None:
        async def run() -> None:
            try:
                await work
            except Exception:
                log.exception("drawing a person's Home tab or answer failed")

        task = asyncio.create_task(run(), name=f"home:{user}")
        self._drawing.add(task)
        task.add_done_callback(self._drawing.discard)

    async def idle(self) -> None:
        """Wait until every drawing in flight is done (tests, shutdown)."""
        while self._drawing:
            await asyncio.gather(*list(self._drawing), return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._drawing):
            task.cancel()
        await asyncio.gather(*list(self._drawing), return_exceptions=True)
