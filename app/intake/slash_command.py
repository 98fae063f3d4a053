"""The slash command (``SLASH_COMMAND``, ``/threadbound``): ``help``, ``usage``, ``follow-ups``,
each answered privately.

Slack posts a slash command (form-encoded, signed) to the request URL the manifest gives it —
``/slack/events``, like events and clicks — or sends it over Socket Mode as a ``slash_commands``
envelope. The answer is the acknowledgement's own body (``response_type: ephemeral``), so only the
person who typed it sees it, within Slack's 3 seconds: every subcommand reads the store and nothing
else. A subcommand is one entry of :attr:`SlashCommand.subcommands` (:meth:`SlashCommand.add`), with
the line ``help`` shows for it; the first word of the command's text picks it, the rest is its
argument.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.settings import Settings
from storage.base import StoreError

from .personal import Personal
from .personal_blocks import Block, Links, follow_up_blocks, section, usage_blocks

log = logging.getLogger(__name__)

#: The answer Slack shows the person (``text``, ``blocks``, ``response_type``…).
Answer = dict[str, Any]


@dataclass(frozen=True, slots=True)
class CommandCall:
    """One use of the slash command: who, where, and the words after the subcommand."""

    user: str
    team: str
    channel: str
    #: The text after the subcommand's name, stripped.
    argument: str
    response_url: str
    #: The whole payload, for a subcommand that needs more (a thread, a trigger id).
    payload: Mapping[str, Any] = field(repr=False)


#: A subcommand: the call → the private answer.
Subcommand = Callable[[CommandCall], Awaitable[Answer]]


@dataclass(frozen=True, slots=True)
class Entry:
    handler: Subcommand
    #: What ``help`` says it does.
    summary: str


def private(text: str, blocks: list[Block] | None = None) -> Answer:
    """An answer only the person who typed the command sees."""
    answer: Answer = {"response_type": "ephemeral", "text": text}
    if blocks:
        answer["blocks"] = blocks
    return answer


class SlashCommand:
    """The command's subcommands and its access rule (the mention's: ``ALLOWED_USERS``, people from
    another organisation only with ``ALLOW_EXTERNAL_USERS``)."""

    def __init__(self, settings: Settings, personal: Personal, links: Links, *, team_id: str = "") -> None:
        self.settings = settings
        self.personal = personal
        self.links = links
        #: The install's workspace (``auth.test``): a person of another one is external.
        self.team_id = team_id
        self.subcommands: dict[str, Entry] = {}
        self.add("help", self._help, "what this command does")
        self.add("usage", self._usage, "your model tokens today, against your daily budget")
        self.add("follow-ups", self._follow_ups, "your pending follow-ups, each with a Cancel button")

    def add(self, name: str, handler: Subcommand, summary: str) -> None:
        """One more subcommand (``stop``…): ``name`` is the first word people type after the command."""
        if name in self.subcommands:
            raise ValueError(f"subcommand {name!r} already exists")
        self.subcommands[name] = Entry(handler, summary)

    async def handle(self, payload: Mapping[str, Any]) -> tuple[int, Answer]:
        """One slash command payload → ``(status, answer)``; the answer is the acknowledgement's body."""
        user = str(payload.get("user_id") or "")
        if not user:
            return 400, private("a slash command without user_id")
        team = str(payload.get("team_id") or "")
        refusal = self._refusal(user, team)
        if refusal is not None:
            return 200, private(refusal)
        words = str(payload.get("text") or "").strip().split(maxsplit=1)
        name = words[0].lower() if words else "help"
        entry = self.subcommands.get(name)
        if entry is None:
            return 200, private(f"I don't know `{name[:40]}`.\n\n{self._help_text()}")
        call = CommandCall(
            user=user,
            team=team,
            channel=str(payload.get("channel_id") or ""),
            argument=words[1].strip() if len(words) > 1 else "",
            response_url=str(payload.get("response_url") or ""),
            payload=payload,
        )
        try:
            return 200, await entry.handler(call)
        except StoreError as exc:
            log.warning("the %s subcommand could not read the store: %s", name, exc)
            return 200, private("That could not be looked up just now; please try again in a minute.")

    def _refusal(self, user: str, team: str) -> str | None:
        external = bool(self.team_id) and bool(team) and team != self.team_id
        if external and not self.settings.allow_external_users:
            return "This app only answers people in its own organisation."
        if self.settings.allowed_users and user not in self.settings.allowed_users:
            return "This app is not open to you; ask its operator to add you to ALLOWED_USERS."
        return None

    def _help_text(self) -> str:
        command = self.settings.slash_command
        lines = [f"`{command} {name}` — {entry.summary}" for name, entry in self.subcommands.items()]
        return "\n".join(
            [
                *lines,
                "Mention the app, message it, or use *Ask threadbound* on a message (its ⋮ menu) to ask "
                "it something; the app's Home tab shows your tasks, follow-ups and budget.",
            ]
        )

    async def _help(self, call: CommandCall) -> Answer:
        text = self._help_text()
        return private(text, [section(text)])

    async def _usage(self, call: CommandCall) -> Answer:
        usage = await self.personal.usage(call.user)
        return private(usage.line(), usage_blocks(usage))

    async def _follow_ups(self, call: CommandCall) -> Answer:
        records = await self.personal.follow_ups(call.user)
        text = f"You have {len(records)} pending follow-up{'s' if len(records) != 1 else ''}."
        return private(text, [section(f"*{text}*"), *follow_up_blocks(records, self.links)])
