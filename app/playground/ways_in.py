"""The playground's other ways in: the message shortcut "Ask threadbound", the slash command, the App
Home tab — each delivered to the app as Slack would (signed, over HTTP), each answer kept where the
page shows it.

A slash command's private answer, and whatever the app posts later to its ``response_url``, become a
note only its person sees (like ``chat.postEphemeral``'s, at the conversation's top level). The Home
tab is what the app last published for each person (``views.publish``), drawn as a list of items
(headers, texts, dividers, Cancel buttons) the page renders.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from app.intake.shortcuts import ASK
from threadbound_emulator import FakeSlack
from threadbound_emulator import events as slack_events

from .view import mrkdwn_html
from .workspace import Delivery

#: Sends a signed body to the app's ``/slack/events``: ``(body, headers) → its answer``.
PostToApp = Callable[[bytes, dict[str, str]], Awaitable[Delivery]]


class WaysIn:
    """The shortcut, the slash command and the Home tab of one playground's workspace."""

    def __init__(
        self, slack: FakeSlack, post: PostToApp, secret: str, command: str, notify: Callable[[], None]
    ) -> None:
        self.slack = slack
        self._post = post
        #: Tells the page the workspace changed (a note it must show).
        self._notify = notify
        self.secret = secret
        #: The slash command's name (``SLASH_COMMAND``): composer text starting with it is one.
        self.command_name = command
        #: Which person and conversation each ``response_url`` handed out belongs to.
        self._urls: dict[str, tuple[str, str]] = {}

    def _check(self, person: str, channel: str | None = None) -> None:
        """``ValueError`` unless ``person`` is one of the workspace's people and may see ``channel``."""
        user = self.slack.users.get(person)
        if user is None or user.is_bot:
            raise ValueError(f"unknown person {person!r}")
        if channel is None:
            return
        chan = self.slack.channels.get(channel)
        if chan is None:
            raise ValueError(f"unknown conversation {channel!r}")
        if chan.is_im and chan.user != person:
            raise ValueError("a DM is only its person's")

    async def shortcut(self, person: str, channel: str, ts: str) -> Delivery:
        """``person`` picks "Ask threadbound" on message ``ts``."""
        self._check(person, channel)
        if self.slack.find(channel, ts) is None:
            raise ValueError(f"no message {ts} in {channel!r}")
        payload = slack_events.message_action(self.slack, channel, ts, person, callback_id=ASK)
        return await self._post(*slack_events.interaction_body(payload, self.secret))

    async def command(self, person: str, channel: str, text: str) -> Delivery:
        """``person`` types ``/threadbound text`` in ``channel``; the answer becomes their private note."""
        self._check(person, channel)
        url = self.slack.response_url()
        self._urls[url] = (person, channel)
        payload = slack_events.slash_command(
            self.slack, channel, person, text.strip(), command=self.command_name, response_url=url
        )
        delivery = await self._post(*slack_events.command_body(payload, self.secret))
        if delivery.status == 200 and delivery.body.startswith("{"):
            self._note(person, channel, json.loads(delivery.body))
        return delivery

    def responded(self, url: str, body: Mapping[str, Any]) -> None:
        """The app posted ``body`` to a ``response_url`` this playground handed out: a private note."""
        if (whose := self._urls.get(url)) is not None:
            self._note(*whose, body)

    def _note(self, person: str, channel: str, answer: Mapping[str, Any]) -> None:
        lines = [str(answer.get("text") or "")]
        for block in answer.get("blocks") or []:
            text = block.get("text") if isinstance(block, Mapping) else None
            if isinstance(text, Mapping) and text.get("text") and text.get("text") != answer.get("text"):
                lines.append(str(text["text"]))
        self.slack.ephemerals.append((channel, person, "", "\n\n".join(line for line in lines if line)))
        self._notify()

    async def open_home(self, person: str) -> Delivery:
        """``person`` opens the app's Home tab."""
        self._check(person)
        envelope = slack_events.app_home_opened(self.slack, person)
        return await self._post(*slack_events.event_body(envelope, self.secret))

    async def home_click(self, person: str, action_id: str, value: str) -> Delivery:
        """``person`` clicks a button of their Home tab (one it shows)."""
        self._check(person)
        buttons = [i["button"] for i in self.home(person) if "button" in i]
        if not any(b["action_id"] == action_id and b["value"] == value for b in buttons):
            raise ValueError("your Home tab has no such button")
        payload = {
            "type": "block_actions",
            "user": {"id": person, "name": person.lower(), "team_id": self.slack.team_id},
            "team": {"id": self.slack.team_id},
            "container": {"type": "view", "view_id": f"V{person}"},
            "trigger_id": "playground.trigger",
            "actions": [{"action_id": action_id, "type": "button", "value": value, "block_id": ""}],
        }
        return await self._post(*slack_events.interaction_body(payload, self.secret))

    def home(self, person: str) -> list[dict[str, Any]]:
        """``person``'s Home tab as the page draws it; empty until the app published one."""
        names = {uid: u.display_name or u.name for uid, u in self.slack.users.items()}
        items: list[dict[str, Any]] = []
        for block in (self.slack.home_views.get(person) or {}).get("blocks") or []:
            kind = block.get("type")
            if kind == "divider":
                items.append({"kind": "divider"})
            elif kind == "header":
                items.append({"kind": "header", "text": str(block.get("text", {}).get("text", ""))})
            elif kind in ("section", "context"):
                texts = [block.get("text")] if kind == "section" else block.get("elements") or []
                html = "".join(
                    mrkdwn_html(str(t.get("text", "")), names) for t in texts if isinstance(t, Mapping)
                )
                item: dict[str, Any] = {"kind": "text", "html": html}
                accessory = block.get("accessory")
                if isinstance(accessory, Mapping) and accessory.get("type") == "button":
                    item["button"] = {
                        "action_id": str(accessory.get("action_id") or ""),
                        "value": str(accessory.get("value") or ""),
                        "label": str(accessory.get("text", {}).get("text", "")),
                    }
                items.append(item)
        return items
