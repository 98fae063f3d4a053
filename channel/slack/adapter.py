"""The Slack adapter: the channel contract over Slack's Web API.

It knows Slack and nothing about the agent. Author names and permalinks are
resolved here, in trusted code, and cached; message refs are ``CHANNEL:TS`` and
file refs are file ids — the session turns both into opaque handles. Outgoing
text loses Slack's mass-mention syntax here (``render.strip_mass_mentions``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient

from channel.contract import (
    AdapterBase,
    Author,
    ChannelFeatures,
    Document,
    Fetched,
    FileMeta,
    MessageView,
    Origin,
    OriginInfo,
    Posted,
    Uploaded,
)
from channel.errors import ChannelError
from channel.markdown import plain_fallback

from .canvases import create_canvas
from .downloads import download, http_session
from .errors import SlackCallObserver, slack_call
from .file_meta import file_meta
from .render import display_name, render_text, strip_mass_mentions, user_ids_in
from .scopes import features_from_scopes
from .transport import read_client, write_client
from .uploads import upload

#: Metadata event type that carries the effect id of a post (see the effect journal).
EFFECT_EVENT = "threadbound_effect"
# conversations.replies allows 1,000 per call, history 999: the fewest calls for a whole thread.
REPLIES_PAGE = 1000
HISTORY_PAGE = 999
# A DM's top level can be long; the model sees the most recent messages only.
HISTORY_CAP = 1000
# Comfortably under Slack's ~12,000-character limit for markdown blocks in one message.
MAX_POST_CHARS = 8000


@dataclass(frozen=True, slots=True)
class SlackIdentity:
    """What ``auth.test`` says about the installed bot."""

    user_id: str
    bot_id: str
    team_id: str
    team_url: str
    scopes: tuple[str, ...]
    bot_name: str = ""


class SlackAdapter(AdapterBase):
    provider = "slack"
    max_post_chars = MAX_POST_CHARS

    def __init__(
        self,
        *,
        token: str,
        api_url: str,
        identity: SlackIdentity,
        file_origins: Sequence[str],
        features: ChannelFeatures | None = None,
        on_call: SlackCallObserver | None = None,
    ) -> None:
        self._token = token
        #: Told of every Slack call this adapter makes (method, outcome, seconds); the host's metrics.
        self.on_call = on_call
        self.reads: AsyncWebClient = read_client(token, api_url)
        self.writes: AsyncWebClient = write_client(token, api_url)
        self.identity = identity
        self.features = features if features is not None else features_from_scopes(identity.scopes)
        self.file_origins = tuple(o.rstrip("/") for o in file_origins)
        # Caches of trusted lookups; the futures coalesce concurrent lookups of one id into one call.
        self._user_names: dict[str, tuple[str, bool]] = {}
        self._user_lookups: dict[str, asyncio.Future[tuple[str, bool]]] = {}
        self._channels: dict[str, dict[str, Any]] = {}
        # Downloads share one HTTP session, made on first use (it needs the running loop).
        self._file_http: aiohttp.ClientSession | None = None
        if identity.user_id and identity.bot_name:
            # auth.test already named the bot: mentions of it cost no users.info call.
            self._user_names[identity.user_id] = (identity.bot_name, True)

    @classmethod
    async def connect(
        cls,
        *,
        token: str,
        api_url: str,
        file_origins: Sequence[str],
        on_call: SlackCallObserver | None = None,
    ) -> SlackAdapter:
        """Call ``auth.test`` once, learn the bot's identity and granted scopes, derive features."""
        identity = await fetch_identity(token, api_url, on_call=on_call)
        return cls(
            token=token, api_url=api_url, identity=identity, file_origins=file_origins, on_call=on_call
        )

    def _call(self, method: str) -> AbstractAsyncContextManager[None]:
        """:func:`slack_call` reporting to this adapter's ``on_call``."""
        return slack_call(method, self.on_call)

    async def close(self) -> None:
        if self._file_http is not None:
            await self._file_http.close()
        for client in (self.reads, self.writes):
            session = getattr(client, "session", None)
            if session is not None and not session.closed:
                await session.close()

    # -- names, cached ---------------------------------------------------------------------
    async def user(self, user_id: str) -> tuple[str, bool]:
        """``(display name, is_bot)`` of a user; one ``users.info`` per user per process."""
        known = self._user_names.get(user_id)
        if known is not None:
            return known
        pending = self._user_lookups.get(user_id)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[tuple[str, bool]] = asyncio.get_running_loop().create_future()
        self._user_lookups[user_id] = future
        try:
            async with self._call("users.info"):
                response = await self.reads.users_info(user=user_id)
            info = response.get("user") or {}
            found = (display_name(info), bool(info.get("is_bot")))
            self._user_names[user_id] = found
        except ChannelError:
            # Not cached: the next lookup may succeed. A name is cosmetic, so degrade instead of failing.
            found = ("someone", False)
        finally:
            del self._user_lookups[user_id]
        future.set_result(found)
        return found

    async def _names(self, user_ids: set[str]) -> dict[str, str]:
        ids = sorted(user_ids)
        found = await asyncio.gather(*(self.user(u) for u in ids))
        return {u: name for u, (name, _) in zip(ids, found, strict=True)}

    async def channel_info(self, channel: str) -> dict[str, Any]:
        cached = self._channels.get(channel)
        if cached is not None:
            return cached
        try:
            async with self._call("conversations.info"):
                response = await self.reads.conversations_info(channel=channel)
        except ChannelError:
            return {"id": channel}
        info = dict(response.get("channel") or {})
        self._channels[channel] = info
        return info

    def permalink(self, channel: str, ts: str, thread_ts: str = "") -> str | None:
        # Slack's permalink format, built locally: chat.getPermalink per post would cost a call each.
        if not self.identity.team_url:
            return None
        link = f"{self.identity.team_url.rstrip('/')}/archives/{channel}/p{ts.replace('.', '')}"
        if thread_ts and thread_ts != ts:
            link += f"?thread_ts={thread_ts}&cid={channel}"
        return link

    # -- describing the origin -------------------------------------------------------------
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
        if origin.thread_ts:
            link = self.permalink(origin.channel, origin.thread_ts)
        elif self.identity.team_url:
            link = f"{self.identity.team_url.rstrip('/')}/archives/{origin.channel}"
        else:
            link = None
        return OriginInfo("slack", name, link, bool(origin.thread_ts), is_direct)

    # -- reading ------------------------------------------------------------------------------
    async def read(self, origin: Origin) -> list[MessageView]:
        raw = await (self._replies(origin) if origin.thread_ts else self._history(origin))
        return await self._views(origin.channel, raw)

    async def _replies(self, origin: Origin, *, metadata: bool = False) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            async with self._call("conversations.replies"):
                response = await self.reads.conversations_replies(
                    channel=origin.channel,
                    ts=origin.thread_ts,
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
        ids: set[str] = set()
        for message in raw:
            if message.get("user"):
                ids.add(str(message["user"]))
            ids |= user_ids_in(str(message.get("text") or ""))
        names = await self._names(ids)
        return [self._view(channel, m, names) for m in raw]

    def _view(self, channel: str, message: Mapping[str, Any], names: Mapping[str, str]) -> MessageView:
        user = str(message.get("user") or "")
        bot_id = message.get("bot_id")
        is_you = user == self.identity.user_id or (bool(bot_id) and bot_id == self.identity.bot_id)
        if user:
            name = names.get(user, "someone")
        else:
            profile = message.get("bot_profile") or {}
            name = str(message.get("username") or profile.get("name") or "a bot")
        author = Author(display_name=name, is_bot=bool(bot_id) or is_you, is_you=is_you)
        reactions = {str(r.get("name")): int(r.get("count") or 0) for r in message.get("reactions") or []}
        ts = str(message.get("ts") or "")
        return MessageView(
            ref=f"{channel}:{ts}",
            author=author,
            text=render_text(_message_text(message), names),
            time=_iso(ts),
            files=tuple(file_meta(f) for f in message.get("files") or [] if f.get("id")),
            reactions=reactions,
        )

    async def view(self, raw: Mapping[str, Any]) -> MessageView:
        channel = str(raw.get("channel") or "")
        return (await self._views(channel, [raw]))[0]

    # -- writing --------------------------------------------------------------------------------
    async def post(self, origin: Origin, markdown: str, *, effect_id: str) -> Posted:
        markdown = strip_mass_mentions(markdown)
        kwargs: dict[str, Any] = {
            "channel": origin.channel,
            "text": fallback_text(markdown),
            "blocks": [{"type": "markdown", "text": markdown}],
            "metadata": {"event_type": EFFECT_EVENT, "event_payload": {"effect_id": effect_id}},
            "unfurl_links": False,
        }
        if origin.thread_ts:
            kwargs["thread_ts"] = origin.thread_ts
        async with self._call("chat.postMessage"):
            response = await self.writes.chat_postMessage(**kwargs)
        ts = str(response["ts"])
        return Posted(
            ref=f"{origin.channel}:{ts}",
            new_root="" if origin.thread_ts else ts,
            permalink=self.permalink(origin.channel, ts, origin.thread_ts),
        )

    async def find_posted(self, origin: Origin, effect_id: str) -> list[Posted]:
        if origin.thread_ts:
            raw = await self._replies(origin, metadata=True)
        else:
            raw = await self._history(origin, cap=200, metadata=True)
        found = []
        for message in raw:
            meta = message.get("metadata") or {}
            payload = meta.get("event_payload") or {}
            if meta.get("event_type") == EFFECT_EVENT and payload.get("effect_id") == effect_id:
                ts = str(message.get("ts"))
                found.append(
                    Posted(
                        ref=f"{origin.channel}:{ts}",
                        new_root="" if origin.thread_ts else ts,
                        permalink=self.permalink(origin.channel, ts, origin.thread_ts),
                    )
                )
        return found

    async def react(self, ref: str, emoji: str, *, add: bool) -> None:
        channel, ts = _split_ref(ref)
        method = "reactions.add" if add else "reactions.remove"
        async with self._call(method):
            if add:
                await self.writes.reactions_add(channel=channel, timestamp=ts, name=emoji)
            else:
                await self.writes.reactions_remove(channel=channel, timestamp=ts, name=emoji)

    async def edit(self, ref: str, markdown: str) -> None:
        markdown = strip_mass_mentions(markdown)
        channel, ts = _split_ref(ref)
        async with self._call("chat.update"):
            await self.writes.chat_update(
                channel=channel,
                ts=ts,
                text=fallback_text(markdown),
                blocks=[{"type": "markdown", "text": markdown}],
            )

    async def retract(self, ref: str) -> None:
        channel, ts = _split_ref(ref)
        async with self._call("chat.delete"):
            await self.writes.chat_delete(channel=channel, ts=ts)

    async def set_status(self, origin: Origin, status: str) -> None:
        async with self._call("assistant.threads.setStatus"):
            await self.writes.assistant_threads_setStatus(
                channel_id=origin.channel, thread_ts=origin.thread_ts, status=status
            )

    # -- files and documents --------------------------------------------------------------------
    async def file_info(self, ref: str) -> FileMeta:
        async with self._call("files.info"):
            response = await self.reads.files_info(file=ref)
        return file_meta(response.get("file") or {"id": ref})

    async def fetch_file(self, meta: FileMeta, dest_dir: Path, *, variant: str | None) -> Fetched:
        if self._file_http is None or self._file_http.closed:
            self._file_http = http_session()
        return await download(
            meta,
            dest_dir,
            variant=variant,
            token=self._token,
            origins=self.file_origins,
            session=self._file_http,
        )

    async def attach(self, origin: Origin, path: Path, *, title: str | None, comment: str | None) -> Uploaded:
        comment = strip_mass_mentions(comment) if comment else comment
        return await upload(self.writes, origin, path, title=title, comment=comment, observer=self.on_call)

    async def post_document(self, origin: Origin, title: str, markdown: str) -> Document:
        markdown = strip_mass_mentions(markdown)
        return await create_canvas(
            self.writes, origin, title, markdown, permalink_of=self._file_permalink, observer=self.on_call
        )

    async def _file_permalink(self, file_id: str) -> str | None:
        async with self._call("files.info"):
            info = await self.reads.files_info(file=file_id)
        return str((info.get("file") or {}).get("permalink") or "") or None


async def fetch_identity(
    token: str, api_url: str, *, on_call: SlackCallObserver | None = None
) -> SlackIdentity:
    client = read_client(token, api_url)
    try:
        async with slack_call("auth.test", on_call):
            response = await client.auth_test()
    finally:
        session = getattr(client, "session", None)
        if session is not None and not session.closed:
            await session.close()
    headers = {k.lower(): v for k, v in (response.headers or {}).items()}
    raw_scopes = headers.get("x-oauth-scopes", "")
    if isinstance(raw_scopes, list):
        raw_scopes = ",".join(raw_scopes)
    scopes = tuple(s.strip() for s in str(raw_scopes).split(",") if s.strip())
    return SlackIdentity(
        user_id=str(response.get("user_id") or ""),
        bot_id=str(response.get("bot_id") or ""),
        team_id=str(response.get("team_id") or ""),
        team_url=str(response.get("url") or ""),
        scopes=scopes,
        bot_name=str(response.get("user") or ""),
    )


def _message_text(message: Mapping[str, Any]) -> str:
    # The bot posts Markdown in `markdown` blocks; `text` is only its shortened plain fallback.
    markdown = [
        str(b.get("text") or "")
        for b in message.get("blocks") or []
        if isinstance(b, Mapping) and b.get("type") == "markdown"
    ]
    return "\n\n".join(markdown) if markdown else str(message.get("text") or "")


def fallback_text(markdown: str) -> str:
    """The plain-text notification fallback, escaped so it cannot form a mention or link."""
    plain = plain_fallback(markdown)
    return plain.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _split_ref(ref: str) -> tuple[str, str]:
    channel, sep, ts = ref.partition(":")
    if not sep or not channel or not ts:
        raise ChannelError("invalid_handle", "that handle does not name a Slack message")
    return channel, ts


def _iso(ts: str) -> str:
    try:
        return datetime.fromtimestamp(float(ts), tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    except ValueError:
        return ""
