"""Clicks on the bot's messages: signed ``block_actions`` interactions, routed by ``action_id``.

Slack posts an interaction (form-encoded ``payload=``) to the same ``/slack/events``
URL as events; Bolt verifies the signature and parses it, and the server's ingress
middleware hands every ``block_actions`` body to :meth:`Interactions.handle`. Each
feature registers the actions it owns (``interactions.on("threadbound_feedback",
feedback.click)``); one click may carry several actions, each goes to its handler.

Slack wants the 200 within 3 seconds: a handler does only durable, quick work (a
store write, an inbox item) before it returns, and calls Slack (a private note, a card
update) only in the background, after the click is answered. A handler that fails is
logged and the click still gets its 200 — Slack would not retry a click anyway, and a
non-2xx only shows the person a warning icon — and the clicker is told privately. A click
on one of our buttons (``threadbound_…``) that nothing here handles (an instance of another
version during a rolling deploy) is not ignored silently either: it is logged and the
clicker told to try again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from app import traces
from app.clicks import Action, Handler
from channel.slack.cards import input_values

log = logging.getLogger(__name__)

#: ``action_id`` prefix of the buttons threadbound posts.
OUR_ACTIONS = "threadbound_"
#: Tells a clicker something privately, in the background (never delays the click's answer).
Tell = Callable[[Action, str], None]


class Interactions:
    """The registry of action handlers, by ``action_id``."""

    def __init__(self, tell: Tell | None = None) -> None:
        self._handlers: dict[str, Handler] = {}
        self.tell = tell
        #: Message shortcuts (``message_action`` payloads): ``app.intake.shortcuts.Shortcuts.handle``.
        self.on_shortcut: Callable[[Mapping[str, Any]], Awaitable[tuple[int, str]]] | None = None

    def on(self, action_id: str, handler: Handler) -> None:
        """Route clicks on elements with ``action_id`` to ``handler`` (one handler per id)."""
        if action_id in self._handlers:
            raise ValueError(f"action {action_id!r} already has a handler")
        self._handlers[action_id] = handler

    @property
    def action_ids(self) -> frozenset[str]:
        return frozenset(self._handlers)

    async def handle(self, payload: Mapping[str, Any]) -> tuple[int, str]:
        """Dispatch every action of one ``block_actions`` payload, or a message shortcut to
        :attr:`on_shortcut`; ``(status, body)`` for Slack."""
        if payload.get("type") == "message_action" and self.on_shortcut is not None:
            return await self.on_shortcut(payload)
        if payload.get("type") != "block_actions":
            return 200, ""  # view submissions, global shortcuts: nothing here uses them yet
        actions = payload.get("actions")
        if not isinstance(actions, list):
            return 400, "block_actions without actions"
        for raw in actions:
            if not isinstance(raw, Mapping):
                continue
            action = parse_action(payload, raw)
            handler = self._handlers.get(action.action_id)
            if handler is None:
                if not action.action_id.startswith(OUR_ACTIONS):
                    log.info(
                        "click on an action nobody handles", extra={"fields": {"action_id": action.action_id}}
                    )
                    continue
                log.warning(
                    "click on one of our buttons that this instance does not handle (another version?)",
                    extra={"fields": {"action_id": action.action_id}},
                )
                self._tell(
                    action, "That button could not be handled just now; please click it again in a minute."
                )
                continue
            try:
                with traces.click_span(action.action_id):
                    await handler(action)
            except Exception:
                log.exception("handling a click failed", extra={"fields": {"action_id": action.action_id}})
                self._tell(action, "Your click could not be handled just now; please try again.")
        return 200, ""

    def _tell(self, action: Action, text: str) -> None:
        if self.tell is None or not action.user_id or not action.channel:
            return
        try:
            self.tell(action, text)
        except Exception:
            log.exception("could not tell the clicker")


def parse_action(payload: Mapping[str, Any], raw: Mapping[str, Any]) -> Action:
    """One action of a ``block_actions`` payload as an :class:`Action` (missing fields empty)."""
    user = _mapping(payload.get("user"))
    team = _mapping(payload.get("team"))
    channel = _mapping(payload.get("channel"))
    container = _mapping(payload.get("container"))
    message = _mapping(payload.get("message"))
    message_ts = str(container.get("message_ts") or message.get("ts") or "")
    thread_ts = str(container.get("thread_ts") or message.get("thread_ts") or "")
    value = raw.get("value")
    if value is None and isinstance(raw.get("selected_option"), Mapping):
        value = raw["selected_option"].get("value")
    return Action(
        action_id=str(raw.get("action_id") or ""),
        value=str(value or ""),
        type=str(raw.get("type") or ""),
        user_id=str(user.get("id") or ""),
        user_name=str(user.get("name") or user.get("username") or ""),
        team_id=str(team.get("id") or user.get("team_id") or ""),
        channel=str(channel.get("id") or container.get("channel_id") or ""),
        message_ts=message_ts,
        thread_ts=thread_ts,
        block_id=str(raw.get("block_id") or ""),
        response_url=str(payload.get("response_url") or ""),
        values=input_values(payload.get("state")),
        payload=payload,
    )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


__all__ = ["Action", "Handler", "Interactions", "parse_action"]
