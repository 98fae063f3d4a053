"""Reading a conversation on Slack: a thread or a DM's top level as message views, and
finding the posts an effect id marks (the effect journal's look-up after a crash)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from channel.contract import Author, MessageView, Origin, OriginInfo, Posted

from .content import message_files, render_message, with_files
from .file_meta import file_meta
from .link import effect_id_of, iso_time
from .lookups import Lookups
from .render import Names

# conversations.replies allows 1,000 per call, history 999: the fewest calls for a whole thread.
REPLIES_PAGE = 1000
HISTORY_PAGE = 999
# A DM's top level can be long; the model sees the most recent messages only.
HISTORY_CAP = 1000


class Reads(Lookups):
    """The reading half of the adapter (mixed into ``SlackAdapter``)."""

    async def describe(self, origin: Origin) -> OriginInfo:
        info = await self.channel_info(origin.channel)
        is_direct = bool(info.get("is_im")) or origin.channel.startswith("D")
        if is_direct:
            other = str(info.get("user") or "")
            name = f"a direct message with {(await self.user(other))[0]}" if other else "a direct message"
        elif info.get("is_mpim"):
            name = "a group direct message"
        else:
            name = f"#{info.get('name') or 'a-channel'}"
        if origin.thread:
            link = self.permalink(origin.channel, origin.thread)
        elif self.identity.team_url:
            link = f"{self.identity.team_url.rstrip('/')}/archives/{origin.channel}"
        else:
            link = None
        return OriginInfo("slack", name, link, bool(origin.thread), is_direct)

    async def read(self, origin: Origin) -> list[MessageView]:
        raw = await (self._replies(origin) if origin.thread else self._history(origin))
        return await self._views(origin.channel, raw)

    async def _replies(self, origin: Origin, *, metadata: bool = False) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            async with self._call("conversations.replies"):
                response = await self.reads.conversations_replies(
                    channel=origin.channel,
                    ts=origin.thread,
                    limit=REPLIES_PAGE,
                    cursor=cursor,
                    include_all_metadata=metadata,
                )
            messages.extend(response.get("messages") or [])
            cursor = (response.get("response_metadata") or {}).get("next_cursor") or None
            if not cursor:
                return messages

    async def _history(
        self, origin: Origin, *, cap: int = HISTORY_CAP, metadata: bool = False
    ) -> list[dict[str, Any]]:
        newest_first: list[dict[str, Any]] = []
        cursor: str | None = None
        while len(newest_first) < cap:
            async with self._call("conversations.history"):
                response = await self.reads.conversations_history(
                    channel=origin.channel,
                    limit=min(HISTORY_PAGE, cap - len(newest_first)),
                    cursor=cursor,
                    include_all_metadata=metadata,
                )
            newest_first.extend(response.get("messages") or [])
            cursor = (response.get("response_metadata") or {}).get("next_cursor") or None
            if not cursor:
                break
        return list(reversed(newest_first[:cap]))

    async def _views(self, channel: str, raw: Sequence[Mapping[str, Any]]) -> list[MessageView]:
        names = await self._resolve(self.bounded_references(raw))
        files = await self._file_infos.resolve(channel, raw)
        return [self._view(channel, with_files(m, files), names) for m in raw]

    def _view(self, channel: str, message: Mapping[str, Any], names: Names) -> MessageView:
        user = str(message.get("user") or "")
        bot_id = message.get("bot_id")
        is_you = user == self.identity.user_id or (bool(bot_id) and bot_id == self.identity.bot_id)
        if user:
            name = names.users.get(user, "someone")
        else:
            profile = message.get("bot_profile")
            profile = profile if isinstance(profile, Mapping) else {}
            name = str(message.get("username") or profile.get("name") or "a bot")
        author = Author(display_name=name, is_bot=bool(bot_id) or is_you, is_you=is_you)
        reactions = {str(r.get("name")): int(r.get("count") or 0) for r in message.get("reactions") or []}
        ts = str(message.get("ts") or "")
        return MessageView(
            ref=self.inbound_ref(channel, ts),
            author=author,
            text=render_message(message, names),
            time=iso_time(ts),
            files=tuple(file_meta(f) for f in message_files(message)),
            reactions=reactions,
        )

    async def view(self, raw: Mapping[str, Any]) -> MessageView:
        channel = str(raw.get("channel") or "")
        return (await self._views(channel, [raw]))[0]

    async def find_posted(self, origin: Origin, effect_id: str) -> list[Posted]:
        if origin.thread:
            raw = await self._replies(origin, metadata=True)
        else:
            raw = await self._history(origin, cap=200, metadata=True)
        return [
            self.posted(origin, str(message.get("ts")))
            for message in raw
            if effect_id_of(message) == effect_id
        ]
