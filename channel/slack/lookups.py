"""Trusted look-ups the adapter caches: user names, channel info and names, file info of stubs.

A lookup runs in a task of its own, owned here, so concurrent lookups of one id share one
call and a cancelled caller never strands the others. Names are cosmetic: a failed lookup
degrades ("someone", "#a-channel") instead of failing the read.

Look-ups are bounded, since a message's mentions are whatever its author typed (a thousand fake
``<@U…>`` cost nothing to write): at most ``LOOKUP_CONCURRENCY`` ``users.info`` or
``conversations.info`` calls at once, at most ``LOOKUPS_PER_MESSAGE`` new IDs looked up per
message (the message's author always; names already known are free) and ``LOOKUPS_PER_READ`` per
read; the rest show as "someone" (or the label the text gives). A failed ``users.info`` is
remembered for ``FAILED_LOOKUP_TTL`` seconds, so the same unknown ID is not asked again at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from channel.errors import ChannelError

from .cache import TtlCache
from .content import References, references
from .file_access import FileInfos
from .link import SlackLink
from .render import Names, display_name

log = logging.getLogger(__name__)

#: ``users.info``/``conversations.info`` calls in flight at once, per adapter.
LOOKUP_CONCURRENCY = 4
#: IDs not known yet that one message may have looked up (its author aside).
LOOKUPS_PER_MESSAGE = 20
#: IDs not known yet that one read (a thread, a page of history) may have looked up.
LOOKUPS_PER_READ = 100
#: Users and channels whose names (and info) are cached at most; the least recently used leave first.
MAX_USERS = 10_000
MAX_CHANNELS = 5_000
#: Seconds a failed ``users.info`` is remembered (the ID shows as "someone" meanwhile).
FAILED_LOOKUP_TTL = 60.0


class Lookups:
    """The adapter's cached look-ups, made over its ``link``."""

    def __init__(self, link: SlackLink) -> None:
        self.link = link
        # Bounded and refreshed (cache.TtlCache): a long-lived process forgets whom it no longer
        # sees, and a renamed person's new name shows within LOOKUP_TTL.
        self._user_names: TtlCache[str, tuple[str, bool]] = TtlCache(MAX_USERS)
        # Time zones (``tz``) from the same users.info answers, for follow-ups' "tomorrow at 9".
        self._user_zones: TtlCache[str, str] = TtlCache(MAX_USERS)
        self._user_lookups: dict[str, asyncio.Task[tuple[str, bool]]] = {}
        # Failed users.info look-ups: user id -> monotonic time until which it is not asked again.
        self._user_failures: dict[str, float] = {}
        self._lookup_slots = asyncio.Semaphore(LOOKUP_CONCURRENCY)
        #: Hears of every ``users.info`` answer (the access facts of ``.directory`` come with it).
        self.on_user_info: Callable[[str, Mapping[str, Any]], None] | None = None
        self._channels: TtlCache[str, dict[str, Any]] = TtlCache(MAX_CHANNELS)
        # Names of channels a message refers to; "" when Slack would not say (another
        # workspace, a private channel): cosmetic, so a failed lookup is not retried.
        self._channel_names: TtlCache[str, str] = TtlCache(MAX_CHANNELS)
        # files.info answers for file stubs and forwarded files, and which of them get a handle.
        self.file_infos = FileInfos(self.files_info)
        identity = link.identity
        if identity.user_id and identity.bot_name:
            # auth.test already named the bot: mentions of it cost no users.info call.
            self._user_names[identity.user_id] = (identity.bot_name, True)

    async def close(self) -> None:
        """Cancel the look-ups in flight."""
        lookups = list(self._user_lookups.values())
        for lookup in lookups:
            lookup.cancel()
        await asyncio.gather(*lookups, return_exceptions=True)

    async def user(self, user_id: str) -> tuple[str, bool]:
        """``(display name, is_bot)`` of a user; one ``users.info`` per user per process."""
        known = self._user_names.get(user_id)
        if known is not None:
            return known
        if self._user_failures.get(user_id, 0.0) > time.monotonic():
            return ("someone", False)
        # Shielded: a cancelled caller leaves; the lookup (bounded by the HTTP timeout) finishes for the rest.
        return await asyncio.shield(self._lookup_task(user_id))

    async def time_zone(self, user_id: str) -> str:
        """The user's IANA time zone (``users.info`` ``tz``, cached with their name); ``""`` if unknown."""
        found = self._user_zones.get(user_id)
        if found is None:
            self._user_names.pop(user_id, None)  # looked up before zones were kept: once more
            await self.user(user_id)
            found = self._user_zones.get(user_id)
        return found or ""

    def _lookup_task(self, user_id: str) -> asyncio.Task[tuple[str, bool]]:
        lookup = self._user_lookups.get(user_id)
        if lookup is None:
            lookup = asyncio.create_task(self._look_up_user(user_id), name=f"users.info:{user_id}")
            self._user_lookups[user_id] = lookup
            lookup.add_done_callback(lambda done: self._lookup_done(user_id, done))
        return lookup

    def known_user(self, user_id: str) -> str:
        """The user's display name if it is known now ("" if not); when it is not, a lookup starts in
        the background (owned here) so it is known next time. Makes no call itself: for click
        handlers, which answer Slack before calling it."""
        known = self._user_names.get(user_id)
        if known is not None:
            return known[0]
        if user_id and self._user_failures.get(user_id, 0.0) <= time.monotonic():
            self._lookup_task(user_id)
        return ""

    async def _look_up_user(self, user_id: str) -> tuple[str, bool]:
        try:
            async with self._lookup_slots, self.link.call("users.info"):
                response = await self.link.read_client.users_info(user=user_id)
        except ChannelError:
            # Remembered briefly: a later lookup may succeed. A name is cosmetic, so degrade, never fail.
            self._user_failures[user_id] = time.monotonic() + FAILED_LOOKUP_TTL
            if len(self._user_failures) > 10_000:
                now = time.monotonic()
                self._user_failures = {u: t for u, t in self._user_failures.items() if t > now}
            return ("someone", False)
        info = response.get("user") or {}
        if self.on_user_info is not None:
            self.on_user_info(user_id, info)
        return self.remember_user(user_id, info)

    def remember_user(self, user_id: str, info: Mapping[str, Any]) -> tuple[str, bool]:
        """Keep what a ``users.info`` answer says of a name and time zone (whoever asked)."""
        found = (display_name(info), bool(info.get("is_bot")))
        self._user_names[user_id] = found
        self._user_zones[user_id] = str(info.get("tz") or "")
        return found

    def _lookup_done(self, user_id: str, lookup: asyncio.Task[tuple[str, bool]]) -> None:
        if self._user_lookups.get(user_id) is lookup:
            del self._user_lookups[user_id]
        if not lookup.cancelled() and lookup.exception() is not None:
            log.error("looking up user %s failed", user_id, exc_info=lookup.exception())

    def bounded_references(self, raw: Sequence[Mapping[str, Any]]) -> References:
        """Every reference of the ``raw`` messages, with at most ``LOOKUPS_PER_MESSAGE`` IDs to
        look up per message and ``LOOKUPS_PER_READ`` in all; authors and known names are free."""
        out = References()
        budget = LOOKUPS_PER_READ
        for message in raw:
            refs = references(message)
            author = str(message.get("user") or "")
            unknown = sorted(
                ident
                for ident in refs.users | refs.channels
                if ident != author
                and ident not in self._user_names
                and ident not in self._channel_names
                and ident not in out.users
                and ident not in out.channels
            )
            keep = max(0, min(LOOKUPS_PER_MESSAGE, budget))
            for ident in unknown[keep:]:
                refs.users.discard(ident)
                refs.channels.discard(ident)
            budget -= min(len(unknown), keep)
            out.add(refs)
        return out

    async def _names(self, user_ids: set[str]) -> dict[str, str]:
        ids = sorted(user_ids)
        found = await asyncio.gather(*(self.user(u) for u in ids))
        return {u: name for u, (name, _) in zip(ids, found, strict=True)}

    async def channel_info(self, channel: str) -> dict[str, Any]:
        cached = self._channels.get(channel)
        if cached is not None:
            return cached
        try:
            async with self.link.call("conversations.info"):
                response = await self.link.read_client.conversations_info(channel=channel)
        except ChannelError:
            return {"id": channel}
        info = dict(response.get("channel") or {})
        self._channels[channel] = info
        return info

    async def files_info(self, file_id: str) -> Mapping[str, Any]:
        async with self.link.call("files.info"):
            response = await self.link.read_client.files_info(file=file_id)
        return {"file": response.get("file")}

    async def resolve(self, refs: References) -> Names:
        """Names for every reference, looked up (cached) where the message gave no label."""
        users = await self._names(refs.users)
        lookups = sorted(refs.channels)
        found = await asyncio.gather(*(self._channel_name(c) for c in lookups))
        channels = {c: n for c, n in zip(lookups, found, strict=True) if n}
        channels.update(refs.channel_labels)
        return Names(users=users, channels=channels, groups=refs.group_labels)

    async def _channel_name(self, channel: str) -> str:
        if channel in self._channel_names:
            return self._channel_names[channel]
        info = self._channels.get(channel)
        if info is None:
            try:
                async with self._lookup_slots, self.link.call("conversations.info"):
                    response = await self.link.read_client.conversations_info(channel=channel)
                info = dict(response.get("channel") or {})
                self._channels[channel] = info
            except ChannelError:
                info = {}
        # A DM has no name worth showing; "#a-channel" is what the model sees for it.
        name = "" if info.get("is_im") else str(info.get("name") or "")
        self._channel_names[channel] = name
        return name
