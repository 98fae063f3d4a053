"""Profiles: per-conversation policy in the agent file (``[profiles.NAME]`` tables).

A profile says, for the conversations it names (``channels``: ``#name``, a channel id, ``dm`` for
direct and group messages, ``*`` for every other one), what the agent is there: instructions added
to the base, its model, which tools and MCP servers exist at all, which calls wait for approval and
who approves, who may use the bot (people, ``@usergroup`` handles, ``*``), whether guests are
served, and token budgets. The file's top-level keys are the **default** profile: a conversation no
profile names gets it, so an agent file without profiles behaves as before.

Exactly one profile applies to a conversation, chosen by :meth:`Profiles.choose` with this
precedence: its channel id, then its ``#name``, then ``dm`` (a direct or group message), then
``*``, then the default. Every key a profile does not set is the default's. docs/agent-file.md
documents the format; it is kept stable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app.agent.toml_lines import located

__all__ = ["DEFAULT", "Profile", "Profiles", "parse_profiles"]

#: The name of the top-level (default) profile.
DEFAULT = "default"
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
#: A channel id (public ``C…``, private ``G…``, direct ``D…``).
_CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]+$")
#: A Slack channel name after its ``#``.
_CHANNEL_NAME = re.compile(r"^#[a-z0-9][a-z0-9._-]{0,79}$")
#: A user id (``U…``/``W…``) or a user group's handle (``@support-team``).
_USER = re.compile(r"^(?:[UW][A-Z0-9]+|@[a-z0-9][a-z0-9._-]{0,79}|\*)$")
_KEYS = (
    "channels",
    "instructions",
    "model",
    "tools",
    "mcp",
    "approval",
    "approvers",
    "users",
    "guests",
    "daily_token_budget",
    "user_daily_token_budget",
)


@dataclass(frozen=True, slots=True)
class Profile:
    """One conversation's policy. ``None`` in a field means "as the default" (inherited when the
    profile is parsed, so a chosen profile is always complete except where the default is open)."""

    name: str = DEFAULT
    #: What it applies to: channel ids, ``#names``, ``dm``, ``*`` (empty for the default).
    channels: tuple[str, ...] = ()
    #: Added to the base instructions (the default's ``instructions``), after them.
    instructions: str = ""
    #: ``provider:name``; ``""``: the install's model (``MODEL``, else the file's top-level ``model``).
    model: str = ""
    #: Tool names or globs that exist here (None: every tool the install offers).
    tools: tuple[str, ...] | None = None
    #: MCP server names or globs whose tools exist here (None: every server).
    mcp: tuple[str, ...] | None = None
    #: Calls that wait for a person's approval (names or globs).
    approval: tuple[str, ...] = ()
    #: Who may decide approvals here besides ``APPROVERS`` (and the requester, per ``APPROVAL_BY``).
    approvers: tuple[str, ...] = ()
    #: Who may use the bot here: user ids, ``@usergroup`` handles, ``*`` (None: everyone).
    users: tuple[str, ...] | None = None
    #: Whether guests are served here (None: as ``ALLOW_GUESTS``).
    guests: bool | None = None
    #: Install-wide model tokens per UTC day past which requests here get the budget note (None: as
    #: ``DAILY_TOKEN_BUDGET``; 0: no limit).
    daily_token_budget: int | None = None
    #: One person's model tokens per UTC day past which their requests here get the note (None: as
    #: ``USER_DAILY_TOKEN_BUDGET``; 0: no limit).
    user_daily_token_budget: int | None = None

    @property
    def groups(self) -> tuple[str, ...]:
        """The ``@usergroup`` handles among ``users`` and ``approvers`` (without the ``@``)."""
        return tuple(sorted({u[1:] for u in (*(self.users or ()), *self.approvers) if u.startswith("@")}))


@dataclass(frozen=True, slots=True)
class Profiles:
    """The default profile and the named ones, with the precedence :meth:`choose` applies."""

    default: Profile = field(default_factory=Profile)
    named: tuple[Profile, ...] = ()

    def all(self) -> tuple[Profile, ...]:
        return (self.default, *self.named)

    def choose(self, channel: str, name: str = "", *, is_dm: bool = False) -> Profile:
        """The one profile of the conversation ``channel`` (its ``name`` without ``#``, ``""`` when
        unknown): id, then ``#name``, then ``dm``, then ``*``, then the default."""
        wanted = [channel]
        if name:
            wanted.append(f"#{name.lower()}")
        if is_dm:
            wanted.append("dm")
        wanted.append("*")
        for entry in wanted:
            for profile in self.named:
                if entry in profile.channels:
                    return profile
        return self.default

    @property
    def needs_names(self) -> bool:
        """Whether choosing needs the conversation's name or kind (a ``#name`` or ``dm`` entry)."""
        return any(c.startswith("#") or c == "dm" for p in self.named for c in p.channels)


def parse_profiles(path: Path, tables: Any, default: Profile) -> Profiles:
    """``[profiles.*]`` of the agent file at ``path``, each completed from ``default``; ValueError
    naming the table, key and line on any mistake (an entry two profiles claim included)."""
    if tables is None:
        return Profiles(default)
    if not isinstance(tables, dict):
        raise ValueError(located(path, "profiles", "profiles must be tables: [profiles.NAME]"))
    named: list[Profile] = []
    claimed: dict[str, str] = {}
    for name, table in tables.items():
        profile = _profile(path, name, table, default)
        for entry in profile.channels:
            if entry in claimed:
                text = f"{entry!r} is in the channels of profiles {claimed[entry]} and {name}; keep one"
                raise ValueError(located(path, "channels", text, f"profiles.{name}"))
            claimed[entry] = name
        named.append(profile)
    return Profiles(default, tuple(named))


def _profile(path: Path, name: str, table: Any, default: Profile) -> Profile:
    where = f"profiles.{name}"

    def fail(key: str | None, text: str) -> ValueError:
        return ValueError(located(path, key, f"[{where}] {text}", where))

    if not _NAME.match(name) or name == DEFAULT:
        raise fail(None, "a profile's name is lowercase letters, digits, - and _ (and not 'default')")
    if not isinstance(table, dict):
        raise fail(None, "must be a table")
    unknown = sorted(set(table) - set(_KEYS))
    if unknown:
        raise fail(unknown[0], f"unknown keys {unknown}; allowed: {', '.join(_KEYS)}")
    channels = _strings(table, "channels", fail, example='["#support", "C0123", "dm", "*"]')
    if not channels:
        raise fail("channels", 'channels must name at least one conversation, e.g. ["#support"]')
    for entry in channels:
        if not (entry in ("dm", "*") or _CHANNEL_ID.match(entry) or _CHANNEL_NAME.match(entry)):
            raise fail("channels", f"{entry!r} is not a #channel-name, a channel id, 'dm' or '*'")
    changes: dict[str, Any] = {"name": name, "channels": tuple(channels)}
    for key in ("instructions", "model"):
        if key in table:
            if not isinstance(table[key], str):
                raise fail(key, f'{key} must be a string, e.g. {key} = "…"')
            changes[key] = table[key].strip()
    if "instructions" in table:
        changes["instructions"] = "\n\n".join(t for t in (default.instructions, table["instructions"]) if t)
    for key in ("tools", "mcp", "approval"):
        if key in table:
            changes[key] = tuple(_strings(table, key, fail, example='["channel_*"]'))
    for key in ("users", "approvers"):
        if key in table:
            people = _strings(table, key, fail, example='["U0123", "@support-team"]')
            bad = [p for p in people if not _USER.match(p) or (key == "approvers" and p == "*")]
            if bad:
                raise fail(key, f"{bad[0]!r} is not a user id (U…) or an @usergroup handle")
            changes[key] = tuple(people)
    if "guests" in table:
        if not isinstance(table["guests"], bool):
            raise fail("guests", "guests must be true or false")
        changes["guests"] = table["guests"]
    for key in ("daily_token_budget", "user_daily_token_budget"):
        if key in table:
            value = table[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise fail(key, f"{key} must be a whole number of tokens (0: no limit)")
            changes[key] = value
    return replace(default, **changes)


def _strings(table: Mapping[str, Any], key: str, fail: Any, *, example: str) -> Sequence[str]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise fail(key, f"{key} must be a list of non-empty strings, e.g. {key} = {example}")
    return [v.strip() for v in value]
