"""Who is served where: the access rules a message's author and a clicker both pass.

One rule set, asked by the run before the model sees a message (``app.runs.budget_screen``) and by
the click router before a handler runs (``app.intake.interactions``), so a person a conversation
does not admit starts nothing, by message or by click (invariant "Scoped by profile",
docs/architecture.md). In order:

- ``ALLOWED_USERS`` (when set): the person is in it;
- the organisation: a person from another one only with ``ALLOW_EXTERNAL_USERS``. The event or
  click names it (``user_team``/``team``); when it names none, Slack's ``users.info`` (``team_id``)
  is asked, and an organisation that cannot be told that way either counts as another;
- the conversation's profile ``users`` (when set, without ``*``): the person's id is listed, or
  they are in a listed ``@usergroup``; a group that cannot be listed admits nobody;
- guests (Slack's single- and multi-channel guests) only where allowed: the profile's ``guests``,
  else ``ALLOW_GUESTS``; a person whose account cannot be looked up is not admitted while guests
  are not, and neither is a deactivated one.

:meth:`Admission.refusal` answers None (admitted) or the reason, which goes to the log, never to
the person (nothing is posted for them; an external person gets the one-time note of
``app.intake.external`` from the router instead).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from app.settings import Settings
from channel.directory import Directory

from .profiles import Profile, Profiles

log = logging.getLogger(__name__)

__all__ = ["Admission"]


@dataclass(kw_only=True)
class Admission:
    """The access rules of one install (see the module doc)."""

    profiles: Profiles = field(default_factory=Profiles)
    #: Where guests, groups and conversation names are looked up; None: nobody is a guest, groups
    #: are empty, and conversations are chosen by id (and ``D…`` as a direct message) only.
    directory: Directory | None = None
    allowed_users: frozenset[str] = frozenset()
    allow_external_users: bool = False
    allow_guests: bool = False
    #: ``APPROVERS``: may click approval cards wherever the profile lets the requester click.
    approvers: frozenset[str] = frozenset()
    #: The install's organisation (``auth.test`` ``team_id``); ``""``: unknown, nobody is external.
    team: str = ""

    @classmethod
    def of(cls, settings: Settings, profiles: Profiles, directory: Directory | None, team: str) -> Admission:
        return cls(
            profiles=profiles,
            directory=directory,
            allowed_users=frozenset(settings.allowed_users),
            allow_external_users=settings.allow_external_users,
            allow_guests=settings.allow_guests,
            approvers=frozenset(settings.approvers),
            team=team,
        )

    async def profile(self, channel: str) -> Profile:
        """The profile of the conversation ``channel`` (``app.agent.profiles`` precedence)."""
        if not self.profiles.named or not channel:  # no conversation (the App Home): the default
            return self.profiles.default
        if self.directory is None or not self.profiles.needs_names:
            return self.profiles.choose(channel, is_dm=channel.startswith("D"))
        found = await self.directory.conversation(channel)
        return self.profiles.choose(channel, found.name, is_dm=found.is_dm)

    async def refusal(
        self,
        channel: str,
        user: str,
        *,
        team: str | None = None,
        profile: Profile | None = None,
        approving: bool = False,
    ) -> str | None:
        """None when ``user`` may use the bot in ``channel``, else why not. ``team``: the
        organisation the event or click named (``""``: none named, so ``users.info`` is asked and
        one it cannot tell either counts as another; None: checked already, by the router).
        ``approving``: a click on an approval card, which the profile's
        ``approvers`` and ``APPROVERS`` may make even when its ``users`` leave them out."""
        if not user:
            return "nobody (no person is named)"
        if self.allowed_users and user not in self.allowed_users:
            return "not in ALLOWED_USERS"
        if team is not None and self.team and not self.allow_external_users:
            told = team or await self._organisation(user)
            if told != self.team:
                why = "another organisation" if told else "an organisation that cannot be told"
                return f"from {why} (ALLOW_EXTERNAL_USERS is off)"
        profile = profile or await self.profile(channel)
        extra = (*profile.approvers, *self.approvers) if approving else ()
        if profile.users is not None and not await self._listed(user, (*profile.users, *extra)):
            return f"not among the users of profile {profile.name}"
        guests = profile.guests if profile.guests is not None else self.allow_guests
        if not guests and self.directory is not None:
            person = await self.directory.person(user)
            if not person.known:
                return "unknown (the account could not be looked up, and guests are not served here)"
            if person.guest:
                return f"a guest (guests are not served in profile {profile.name})"
            if not person.active:
                return "a deactivated account"
        return None

    async def _organisation(self, user: str) -> str:
        """The person's organisation as Slack's ``users.info`` says (``""``: it cannot tell)."""
        if self.directory is None:
            return ""
        person = await self.directory.person(user)
        return person.team if person.known else ""

    async def _listed(self, user: str, entries: Iterable[str]) -> bool:
        entries = tuple(entries)
        if "*" in entries or user in entries:
            return True
        groups = [e[1:] for e in entries if e.startswith("@")]
        if not groups or self.directory is None:
            return False
        found = await asyncio.gather(*(self.directory.group_members(g) for g in groups))
        return any(members is not None and user in members for members in found)

    async def deciders(self, channel: str) -> frozenset[str]:
        """The profile's ``approvers`` of ``channel`` as user ids (groups listed)."""
        profile = await self.profile(channel)
        ids = {a for a in profile.approvers if not a.startswith("@")}
        if self.directory is not None:
            for group in (a[1:] for a in profile.approvers if a.startswith("@")):
                ids |= await self.directory.group_members(group) or frozenset()
        return frozenset(ids)
