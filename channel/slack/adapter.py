"""The Slack adapter: the channel contract over Slack's Web API.

It knows Slack and nothing about the agent. Author names and permalinks are
resolved here, in trusted code, and cached; message refs are ``CHANNEL:TS`` and
file refs are file ids — the session turns both into opaque handles. Outgoing
text loses Slack's mass-mention syntax here (``render.strip_mass_mentions``).
"""

from __future__ import annotations

import asyncio
import logging
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
    LiveMessage,
    MessageView,
    Origin,
    OriginInfo,
    Posted,
    Step,
    Uploaded,
)
from channel.errors import ChannelError
from channel.markdown import plain_fallback

from .canvases import create_canvas
from .content import References, message_files, references, render_message, with_files
from .downloads import download
from .errors import SlackCallObserver, slack_call
from .file_access import FileInfos
from .file_meta import file_meta
from .outbound import DEFAULT_DEADLINE, Outbound
from .render import Names, display_name, strip_mass_mentions
from .scopes import features_from_scopes
from .stream import SlackLiveMessage, feedback_blocks
from .transport import http_session, read_client, write_client
from .uploads import upload

log = logging.getLogger(__name__)

#: Metadata event type that carries the effect id of a post (see the effect journal).
EFFECT_EVENT = "threadbound_effect"
# conversations.replies allows 1,000 per call, history 999: the fewest calls for a whole thread.
REPLIES_PAGE = 1000
HISTORY_PAGE = 999
# A DM's top level can be long; the model sees the most recent messages only.
HISTORY_CAP = 1000
# Comfortably under Slack's ~12,000-character limit for markdown blocks in one message.
MAX_POST_CHARS = 8000
#: Seconds a status line may wait out rate limits: shown minutes late it would be wrong.
STATUS_DEADLINE = 10.0


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
        write_deadline: float = DEFAULT_DEADLINE,
        http: aiohttp.ClientSession | None = None,
        on_call: SlackCallObserver | None = None,
    ) -> None:
        self._token = token
        #: Told of every Slack call this adapter makes (method, outcome, seconds); the host's metrics.
        self.on_call = on_call
        # One session (made here, so inside the running loop) for API calls, uploads and downloads.
        self.http = http if http is not None else http_session()
        self.reads: AsyncWebClient = read_client(token, api_url, self.http)
        self.writes: AsyncWebClient = write_client(token, api_url, self.http)
        #: Every write goes through it: paced per channel, 429s waited out until ``write_deadline``.
        self.outbound = Outbound(deadline=write_deadline, observer=on_call)
        self.identity = identity
        self.features = features if features is not None else features_from_scopes(identity.scopes)
        self.file_origins = tuple(o.rstrip("/") for o in file_origins)
        # Caches of trusted lookups. A lookup runs in a task of its own, owned here, so concurrent
        # lookups of one id share one call and a cancelled caller never strands the others.
        self._user_names: dict[str, tuple[str, bool]] = {}
        self._user_lookups: dict[str, asyncio.Task[tuple[str, bool]]] = {}
        self._channels: dict[str, dict[str, Any]] = {}
        # Names of channels a message refers to; "" when Slack would not say (another
        # workspace, a private channel): cosmetic, so a failed lookup is not retried.
        self._channel_names: dict[str, str] = {}
        # files.info answers for file stubs and forwarded files, and which of them get a handle.
        self._file_infos = FileInfos(self._files_info)
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
        write_deadline: float = DEFAULT_DEADLINE,
        on_call: SlackCallObserver | None = None,
    ) -> SlackAdapter:
        """Call ``auth.test`` once, learn the bot's identity and granted scopes, derive features."""
        http = http_session()
        try:
            identity = await fetch_identity(token, api_url, http=http, on_call=on_call)
        except BaseException:
            await http.close()
            raise
        return cls(
            token=token,
            api_url=api_url,
            identity=identity,
            file_origins=file_origins,
            write_deadline=write_deadline,
            http=http,
            on_call=on_call,
        )

    def _call(self, method: str) -> AbstractAsyncContextManager[None]:
        """:func:`slack_call` reporting to this adapter's ``on_call``."""
        return slack_call(method, self.on_call)

    async def close(self) -> None:
        """Stop lookups in flight and close the HTTP session (its pooled connections with it)."""
        lookups = list(self._user_lookups.values())
        for lookup in lookups:
            lookup.cancel()
        await asyncio.gather(*lookups, return_exceptions=True)
        await self.http.close()

    # -- names, cached ---------------------------------------------------------------------
    async def user(self, user_id: str) -> tuple[str, bool]:
        """``(display name, is_bot)`` of a user; one ``users.info`` per user per process."""
        known = self._user_names.get(user_id)
        if known is not None:
            return known
        lookup = self._user_lookups.get(user_id)
        if lookup is None:
            lookup = asyncio.create_task(self._look_up_user(user_id), name=f"users.info:{user_id}")
            self._user_lookups[user_id] = lookup
            lookup.add_done_callback(lambda done: self._lookup_done(user_id, done))
        # Shielded: a cancelled caller leaves; the lookup (bounded by the HTTP timeout) finishes for the rest.
        return await asyncio.shield(lookup)

    async def _look_up_user(self, user_id: str) -> tuple[str, bool]:
        try:
            async with self._call("users.info"):
                response = await self.reads.users_info(user=user_id)
        except ChannelError:
            # Not cached: the next lookup may succeed. A name is cosmetic, so degrade instead of failing.
            return ("someone", False)
        info = response.get("user") or {}
        found = (display_name(info), bool(info.get("is_bot")))
        self._user_names[user_id] = found
        return found

    def _lookup_done(self, user_id: str, lookup: asyncio.Task[tuple[str, bool]]) -> None:
        if self._user_lookups.get(user_id) is lookup:
            del self._user_lookups[user_id]
        if not lookup.cancelled() and lookup.exception() is not None:
            log.error("looking up user %s failed", user_id, exc_info=lookup.exception())

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
        refs = References()
        for message in raw:
            refs.add(references(message))
        names = await self._resolve(refs)
        files = await self._file_infos.resolve(channel, raw)
        return [self._view(channel, with_files(m, files), names) for m in raw]

    async def _files_info(self, file_id: str) -> Mapping[str, Any]:
        async with self._call("files.info"):
            response = await self.reads.files_info(file=file_id)
        return {"file": response.get("file")}

    async def _resolve(self, refs: References) -> Names:
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
                async with self._call("conversations.info"):
                    response = await self.reads.conversations_info(channel=channel)
                info = dict(response.get("channel") or {})
                self._channels[channel] = info
            except ChannelError:
                info = {}
        # A DM has no name worth showing; "#a-channel" is what the model sees for it.
        name = "" if info.get("is_im") else str(info.get("name") or "")
        self._channel_names[channel] = name
        return name

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
            ref=f"{channel}:{ts}",
            author=author,
            text=render_message(message, names),
            time=_iso(ts),
            files=tuple(file_meta(f) for f in message_files(message)),
            reactions=reactions,
        )

    async def view(self, raw: Mapping[str, Any]) -> MessageView:
        channel = str(raw.get("channel") or "")
        return (await self._views(channel, [raw]))[0]

    # -- writing --------------------------------------------------------------------------------
    @staticmethod
    def effect_metadata(effect_id: str) -> dict[str, Any]:
        """The message metadata that marks a post (or stream) with its effect id."""
        return {"event_type": EFFECT_EVENT, "event_payload": {"effect_id": effect_id}}

    async def post(self, origin: Origin, markdown: str, *, effect_id: str, feedback: str = "") -> Posted:
        markdown = strip_mass_mentions(markdown)
        blocks: list[dict[str, Any]] = [{"type": "markdown", "text": markdown}]
        if feedback:
            blocks += feedback_blocks(feedback)
        kwargs: dict[str, Any] = {
            "channel": origin.channel,
            "text": fallback_text(markdown),
            "blocks": blocks,
            "metadata": self.effect_metadata(effect_id),
            "unfurl_links": False,
        }
        if origin.thread_ts:
            kwargs["thread_ts"] = origin.thread_ts
        response = await self.outbound.write(
            "chat.postMessage",
            lambda: self.writes.chat_postMessage(**kwargs),
            channel=origin.channel,
            post=True,
        )
        ts = str(response["ts"])
        return Posted(
            ref=f"{origin.channel}:{ts}",
            new_root="" if origin.thread_ts else ts,
            permalink=self.permalink(origin.channel, ts, origin.thread_ts),
        )

    async def post_blocks(
        self, origin: Origin, text: str, blocks: Sequence[Mapping[str, Any]], *, effect_id: str
    ) -> Posted:
        """Post a host message built of Block Kit ``blocks`` (an approval card), marked with
        ``effect_id`` like :meth:`post` so :meth:`find_posted` finds it after a crash. Never retried."""
        kwargs: dict[str, Any] = {
            "channel": origin.channel,
            "text": text,
            "blocks": [dict(b) for b in blocks],
            "metadata": {"event_type": EFFECT_EVENT, "event_payload": {"effect_id": effect_id}},
            "unfurl_links": False,
        }
        if origin.thread_ts:
            kwargs["thread_ts"] = origin.thread_ts
        response = await self.outbound.write(
            "chat.postMessage",
            lambda: self.writes.chat_postMessage(**kwargs),
            channel=origin.channel,
            post=True,
        )
        ts = str(response["ts"])
        return Posted(
            ref=f"{origin.channel}:{ts}",
            new_root="" if origin.thread_ts else ts,
            permalink=self.permalink(origin.channel, ts, origin.thread_ts),
        )

    async def update_blocks(self, ref: str, text: str, blocks: Sequence[Mapping[str, Any]]) -> None:
        """Replace a host message's text and blocks (an approval card once decided)."""
        channel, ts = _split_ref(ref)
        await self.outbound.write(
            "chat.update",
            lambda: self.writes.chat_update(
                channel=channel, ts=ts, text=text, blocks=[dict(b) for b in blocks]
            ),
        )

    async def tell_privately(self, channel: str, user: str, text: str, *, thread_ts: str = "") -> None:
        """Show ``text`` to ``user`` only (``chat.postEphemeral``), in ``thread_ts`` when given."""
        kwargs: dict[str, Any] = {"channel": channel, "user": user, "text": text}
        if thread_ts:
            kwargs["thread_ts"] = thread_ts
        await self.outbound.write(
            "chat.postEphemeral", lambda: self.writes.chat_postEphemeral(**kwargs), channel=channel
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
        if add:
            await self.outbound.write(
                "reactions.add", lambda: self.writes.reactions_add(channel=channel, timestamp=ts, name=emoji)
            )
        else:
            await self.outbound.write(
                "reactions.remove",
                lambda: self.writes.reactions_remove(channel=channel, timestamp=ts, name=emoji),
            )

    async def edit(self, ref: str, markdown: str, *, feedback: str = "", footer: str = "") -> None:
        markdown = strip_mass_mentions(markdown)
        channel, ts = _split_ref(ref)
        blocks: list[dict[str, Any]] = [{"type": "markdown", "text": markdown}]
        if footer:
            blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": footer}]})
        if feedback:
            blocks += feedback_blocks(feedback)
        await self.outbound.write(
            "chat.update",
            lambda: self.writes.chat_update(
                channel=channel, ts=ts, text=fallback_text(markdown), blocks=blocks
            ),
        )

    async def retract(self, ref: str) -> None:
        channel, ts = _split_ref(ref)
        await self.outbound.write("chat.delete", lambda: self.writes.chat_delete(channel=channel, ts=ts))

    async def open_stream(
        self,
        origin: Origin,
        markdown: str,
        steps: tuple[Step, ...],
        *,
        effect_id: str,
        recipient: Mapping[str, Any] | None,
    ) -> LiveMessage:
        return await SlackLiveMessage.start(self, origin, markdown, steps, recipient)

    async def set_title(self, origin: Origin, title: str) -> None:
        """Name a DM thread in Slack's agent view (``assistant.threads.setTitle``)."""
        await self.outbound.write(
            "assistant.threads.setTitle",
            lambda: self.writes.assistant_threads_setTitle(
                channel_id=origin.channel, thread_ts=origin.thread_ts, title=title
            ),
            deadline=STATUS_DEADLINE,
        )

    async def suggest_prompts(self, origin: Origin, prompts: Sequence[str]) -> None:
        """Offer prompts in a new agent-view thread (``assistant.threads.setSuggestedPrompts``)."""
        entries = [{"title": p[:75], "message": p} for p in prompts]
        await self.outbound.write(
            "assistant.threads.setSuggestedPrompts",
            lambda: self.writes.assistant_threads_setSuggestedPrompts(
                channel_id=origin.channel, thread_ts=origin.thread_ts, prompts=entries
            ),
            deadline=STATUS_DEADLINE,
        )

    async def set_status(self, origin: Origin, status: str) -> None:
        await self.outbound.write(
            "assistant.threads.setStatus",
            lambda: self.writes.assistant_threads_setStatus(
                channel_id=origin.channel, thread_ts=origin.thread_ts, status=status
            ),
            deadline=STATUS_DEADLINE,
        )

    # -- files and documents --------------------------------------------------------------------
    async def file_info(self, ref: str) -> FileMeta:
        async with self._call("files.info"):
            response = await self.reads.files_info(file=ref)
        return file_meta(response.get("file") or {"id": ref})

    async def fetch_file(self, meta: FileMeta, dest_dir: Path, *, variant: str | None) -> Fetched:
        return await download(
            meta,
            dest_dir,
            variant=variant,
            token=self._token,
            origins=self.file_origins,
            session=self.http,
        )

    async def attach(self, origin: Origin, path: Path, *, title: str | None, comment: str | None) -> Uploaded:
        comment = strip_mass_mentions(comment) if comment else comment
        return await upload(self.writes, origin, path, title=title, comment=comment, outbound=self.outbound)

    async def post_document(self, origin: Origin, title: str, markdown: str) -> Document:
        markdown = strip_mass_mentions(markdown)
        return await create_canvas(
            self.writes, origin, title, markdown, permalink_of=self._file_permalink, outbound=self.outbound
        )

    async def _file_permalink(self, file_id: str) -> str | None:
        async with self._call("files.info"):
            info = await self.reads.files_info(file=file_id)
        return str((info.get("file") or {}).get("permalink") or "") or None


async def fetch_identity(
    token: str,
    api_url: str,
    *,
    http: aiohttp.ClientSession | None = None,
    on_call: SlackCallObserver | None = None,
) -> SlackIdentity:
    """``auth.test``, over ``http`` when given (the adapter's session), else a session of its own."""
    session = http if http is not None else http_session()
    try:
        async with slack_call("auth.test", on_call):
            response = await read_client(token, api_url, session).auth_test()
    finally:
        if http is None:
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
