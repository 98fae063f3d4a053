"""The message shortcut "Ask threadbound" (``callback_id`` :data:`ASK`): starts or resumes the task of
the message's thread, with that message in view.

Slack posts a ``message_action`` payload (signed, form-encoded, to ``/slack/events``; or an
``interactive`` envelope over Socket Mode) when someone picks the shortcut on any message. It is
admitted exactly as a mention by that person of that message would be (``app.intake.router``:
``ALLOWED_USERS``, ``ALLOWED_CHANNELS``, ``ALLOW_DMS``, people from another organisation only with
``ALLOW_EXTERNAL_USERS``), then claimed like a message: once, by its trigger (``shortcut:<trigger_id>``,
as event id and as the claim's key), so a payload delivered twice (Socket Mode's redelivery, both
transports) is one turn, and a message already answered as a mention can still be asked about. The
inbox item is the message pointed at, ``asked_about`` by the person who used the shortcut
(``channel.slack.inbound.shortcut_message``): the model sees who asked and that message by its handle.

The acknowledgement waits for the claim only. A shortcut that is refused, or one the store could not
take, is explained to the person privately through the payload's ``response_url``, in the background.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from channel.errors import ChannelError
from channel.slack.inbound import shortcut_message

from .ingress import Ingress
from .router import classify

log = logging.getLogger(__name__)

#: The shortcut's ``callback_id`` in the manifest.
ASK = "threadbound_ask"
#: Its name people see in a message's menu.
ASK_NAME = "Ask threadbound"
#: A person's display name (``users.info``, cached): ``user id → name``.
NameOf = Callable[[str], Awaitable[str]]
#: Seconds the acknowledgement may wait for the asker's display name.
NAME_WAIT = 1.0
#: Answers through the payload's ``response_url``: ``(url, body)``.
Respond = Callable[[str, Mapping[str, Any]], Awaitable[None]]

_REFUSED = "I can't take that here: {reason}."
_UNAVAILABLE = "That could not be taken just now; please try the shortcut again in a minute."


class Shortcuts:
    """Message shortcuts by ``callback_id``; see the module docstring."""

    def __init__(
        self, ingress: Ingress, respond: Respond | None = None, name_of: NameOf | None = None
    ) -> None:
        self.ingress = ingress
        self._respond = respond
        self._name_of = name_of
        self._telling: set[asyncio.Task[None]] = set()

    async def handle(self, payload: Mapping[str, Any]) -> tuple[int, str]:
        """One ``message_action`` payload → ``(status, body)`` for Slack, once its claim committed."""
        if payload.get("callback_id") != ASK:
            log.info(
                "a message shortcut nobody handles",
                extra={"fields": {"callback_id": payload.get("callback_id")}},
            )
            return 200, ""
        message = shortcut_message(payload)
        trigger = str(payload.get("trigger_id") or payload.get("action_ts") or "")
        if message is None or not trigger:
            return 400, "message_action without message, channel, user or trigger_id"
        # The access rules of a mention of this message by the person who used the shortcut.
        as_mention = {
            "type": "app_mention",
            "channel": message.conversation,
            "ts": message.id,
            "thread_ts": message.thread,
            "user": message.author.id,
            "team": message.author.organisation,
            "channel_type": "im" if message.direct else "channel",
        }
        decision = classify(as_mention, self.ingress.bot, self.ingress.settings)
        response_url = str(payload.get("response_url") or "")
        if decision.action == "ignore":
            log.info("a shortcut was refused", extra={"fields": {"reason": decision.reason}})
            self._tell(response_url, _REFUSED.format(reason=decision.reason))
            return 200, ""
        if (name := await self._display_name(message.author.id)) is not None:
            message = replace(message, author=replace(message.author, name=name))
        key = f"shortcut:{trigger}"
        result = await self.ingress.claim(key, decision, message, key=key)
        log.info(
            "shortcut",
            extra={
                "fields": {"outcome": result.outcome, "task": result.task_id, "channel": decision.channel}
            },
        )
        if result.status >= 500:
            self._tell(response_url, _UNAVAILABLE)
            return 200, ""  # Slack does not retry a shortcut: the person was told to try again
        return 200, ""

    async def _display_name(self, user: str) -> str | None:
        """The asker's display name, as the model sees people elsewhere; None (the payload's user name
        stands) when the look-up fails or takes more of Slack's 3 seconds than :data:`NAME_WAIT`."""
        if self._name_of is None:
            return None
        try:
            async with asyncio.timeout(NAME_WAIT):
                name = await self._name_of(user)
        except (ChannelError, TimeoutError):
            return None
        return name if name and name != "someone" else None

    def _tell(self, response_url: str, text: str) -> None:
        if self._respond is None or not response_url:
            return
        respond = self._respond

        async def tell() -> None:
            try:
                await respond(response_url, {"response_type": "ephemeral", "text": text})
            except ChannelError as exc:
                log.warning("could not tell a shortcut's user why: %s", exc.message)

        task = asyncio.create_task(tell(), name="shortcut-note")
        self._telling.add(task)
        task.add_done_callback(self._telling.discard)

    async def idle(self) -> None:
        while self._telling:
            await asyncio.gather(*list(self._telling), return_exceptions=True)
