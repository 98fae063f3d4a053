"""Slack's answers to the host's access questions (``channel.directory``): ``users.info`` (guests:
``is_restricted`` / ``is_ultra_restricted``; ``deleted``; ``team_id``), user groups by handle
(``usergroups.list``, ``usergroups.users.list``, scope ``usergroups:read``) and conversations
(``conversations.info``, through the adapter's cached look-ups).

Access facts are cached for ``ACCESS_TTL`` seconds (a guest promoted to member, or a person removed
from a group, counts within that); a failed look-up is remembered for ``FAILED_TTL`` seconds and
reported as unknown, never raised.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from channel.directory import Conversation, Person
from channel.errors import ChannelError

from .cache import TtlCache
from .link import SlackLink
from .lookups import Lookups

log = logging.getLogger(__name__)

__all__ = ["ACCESS_TTL", "SlackDirectory"]

#: Seconds a person's access facts or a group's members are trusted before they are asked again.
ACCESS_TTL = 300.0
#: Seconds a failed look-up is remembered (reported as unknown meanwhile).
FAILED_TTL = 30.0
_MAX = 10_000


class SlackDirectory:
    """The adapter's :class:`channel.directory.Directory` (see the module doc)."""

    def __init__(self, link: SlackLink, lookups: Lookups) -> None:
        self.link = link
        self.lookups = lookups
        self._people: TtlCache[str, Person] = TtlCache(_MAX, ACCESS_TTL)
        self._failed: TtlCache[str, Person] = TtlCache(_MAX, FAILED_TTL)
        self._groups: TtlCache[str, frozenset[str]] = TtlCache(1_000, ACCESS_TTL)
        self._failed_groups: TtlCache[str, bool] = TtlCache(1_000, FAILED_TTL)
        self._lock = asyncio.Lock()
        # One users.info answer serves both: a name looked up brings the access facts, and back.
        lookups.on_user_info = self._hear

    async def person(self, user_id: str) -> Person:
        found = self._people.get(user_id) or self._failed.get(user_id)
        if found is not None:
            return found
        try:
            async with self.link.call("users.info"):
                response = await self.link.read_client.users_info(user=user_id)
        except ChannelError as exc:
            if exc.provider_code == "user_not_found":
                # Not an account of this workspace, so not its guest either; whether they are from
                # another organisation is the event's to tell (its team), not this look-up's.
                return self._remember(Person(user_id))
            log.warning("could not look up a person's access facts: %s", exc.message)
            unknown = Person(user_id, known=False)
            self._failed[user_id] = unknown
            return unknown
        info = response.get("user") or {}
        self.lookups.remember_user(user_id, info)
        return self._heard(user_id, info)

    def _hear(self, user_id: str, info: Mapping[str, Any]) -> None:
        self._heard(user_id, info)

    def _heard(self, user_id: str, info: Mapping[str, Any]) -> Person:
        person = Person(
            user_id,
            guest=bool(info.get("is_restricted") or info.get("is_ultra_restricted")),
            active=not info.get("deleted"),
            team=str(info.get("team_id") or ""),
        )
        return self._remember(person)

    def _remember(self, person: Person) -> Person:
        self._people[person.id] = person
        return person

    async def group_members(self, handle: str) -> frozenset[str] | None:
        handle = handle.lstrip("@").lower()
        async with self._lock:  # one listing for many handles asked at once
            if self._failed_groups.get(handle):
                return None
            found = self._groups.get(handle)
            if found is not None:
                return found
            members = await self._members(handle)
            if members is None:
                self._failed_groups[handle] = True
            else:
                self._groups[handle] = members
            return members

    async def _members(self, handle: str) -> frozenset[str] | None:
        try:
            async with self.link.call("usergroups.list"):
                listing = await self.link.read_client.usergroups_list()
            group = next(
                (g for g in listing.get("usergroups") or [] if str(g.get("handle") or "").lower() == handle),
                None,
            )
            if group is None:
                log.warning("user group @%s does not exist in this workspace: nobody is in it", handle)
                return frozenset()
            async with self.link.call("usergroups.users.list"):
                response = await self.link.read_client.usergroups_users_list(usergroup=str(group["id"]))
        except ChannelError as exc:
            log.warning("could not list user group @%s: %s", handle, exc.message)
            return None
        return frozenset(str(u) for u in response.get("users") or [])

    async def conversation(self, channel: str) -> Conversation:
        if channel.startswith("D"):
            return Conversation(channel, "", True)
        info = await self.lookups.channel_info(channel)
        is_dm = bool(info.get("is_im") or info.get("is_mpim"))
        if not is_dm and not info.get("name"):
            log.warning(
                "the name of conversation %s cannot be told: its profile is chosen without it", channel
            )
        return Conversation(channel, "" if is_dm else str(info.get("name") or ""), is_dm)
