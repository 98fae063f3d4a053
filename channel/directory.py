"""Who a person is and what a conversation is, as access rules need them (neutral).

The host decides who is served where (``app.agent.admission``) from facts only the platform knows:
whether a person is a guest, still active, from which organisation; which people a named group
holds; a conversation's name and whether it is a direct message. An adapter that can tell offers a
:class:`Directory` (the Slack one is ``channel.slack.directory``); what it cannot tell it reports
as unknown, and the host decides what unknown means (for guests: not admitted).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["Conversation", "Directory", "Person"]


@dataclass(frozen=True, slots=True)
class Person:
    """A person as the platform sees them now."""

    id: str
    #: False when the look-up failed: the other fields are then guesses, not facts.
    known: bool = True
    #: A guest of the workspace (Slack: single- or multi-channel guest).
    guest: bool = False
    #: Still an active account (not deactivated).
    active: bool = True
    #: The organisation (workspace) the account belongs to; ``""`` unknown.
    team: str = ""


@dataclass(frozen=True, slots=True)
class Conversation:
    """A conversation's name (without ``#``; ``""`` unknown or none) and whether it is a direct
    message (one person or a group)."""

    id: str
    name: str = ""
    is_dm: bool = False


class Directory(Protocol):
    """Cached look-ups of people, groups and conversations; none of them raises."""

    async def person(self, user_id: str) -> Person: ...

    async def group_members(self, handle: str) -> frozenset[str] | None:
        """The people of the group named ``handle`` (without ``@``); None when it cannot be told."""

    async def conversation(self, channel: str) -> Conversation: ...
