"""The Slack adapter: the channel contract over Slack's Web API.

It knows Slack and nothing about the agent. Author names and permalinks are
resolved here, in trusted code, and cached; message refs are ``CHANNEL:TS`` and
file refs are file ids — the session turns both into opaque handles. Outgoing
text loses Slack's mass-mention syntax here (``render.strip_mass_mentions``).

The adapter owns its parts, one concern each, and hands every call to the one that
does it: :mod:`.lookups` (cached names, channel and file info), :mod:`.reads` (threads,
history, effect look-ups), :mod:`.lookback` (what Slack holds after an ambiguous answer;
over the reads), :mod:`.writes` (posts, edits, reactions, statuses, streams; settled by the
look-back), each given the :mod:`.link` (the clients, outbound path and identity they
share). Files and documents are here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp

from channel.cards import Card
from channel.contract import (
    AdapterBase,
    ChannelFeatures,
    Document,
    Fetched,
    FileMeta,
    InFlight,
    LiveMessage,
    MessageView,
    Origin,
    OriginInfo,
    Posted,
    SessionStatus,
    Standing,
    StreamStart,
    Uploaded,
)
from channel.errors import ChannelError, bounded

from . import cards
from .agent_sessions import AgentSessions
from .canvases import create_canvas
from .directory import SlackDirectory
from .downloads import download
from .errors import SlackCallObserver
from .file_meta import file_meta
from .identity import SlackIdentity, fetch_identity
from .link import EFFECT_EVENT, SlackLink
from .lookback import IN_FLIGHT_S, Lookback
from .lookups import Lookups
from .outbound import DEFAULT_DEADLINE
from .reads import Reads
from .render import fallback_text, strip_mass_mentions
from .scopes import features_from_scopes
from .standing import standing
from .transport import http_session
from .uploads import upload
from .writes import STATUS_DEADLINE, Writes

__all__ = [
    "EFFECT_EVENT",
    "MAX_POST_CHARS",
    "STATUS_DEADLINE",
    "SlackAdapter",
    "SlackIdentity",
    "fallback_text",
    "features_from_scopes",
    "fetch_identity",
]

# Comfortably under Slack's ~12,000-character limit for markdown blocks in one message.
MAX_POST_CHARS = 8000


class SlackAdapter(AdapterBase):
    """The channel contract over Slack, handed to the parts it owns: ``link`` (clients, outbound
    path, identity), ``lookups``, ``reads``, ``lookback`` and ``writes``."""

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
        in_flight: float = IN_FLIGHT_S,
    ) -> None:
        """``in_flight``: seconds after its attempt began that a write whose answer was lost may
        still land (``channel.slack.lookback``)."""
        self._token = token
        self.link = SlackLink(
            token=token,
            api_url=api_url,
            identity=identity,
            http=http if http is not None else http_session(),
            write_deadline=write_deadline,
            on_call=on_call,
        )
        self.lookups = Lookups(self.link)
        self.reads = Reads(self.link, self.lookups)
        self.lookback = Lookback(self.link, self.reads, window=in_flight)
        self.in_flight = InFlight(window=in_flight, deadline=write_deadline)
        self.writes = Writes(self.link, self.reads, self.lookback)
        #: Guests, groups and conversation kinds for the host's access rules (``channel.directory``).
        self.directory = SlackDirectory(self.link, self.lookups)
        self.agent_sessions = AgentSessions(self.link)
        self.features = features if features is not None else features_from_scopes(identity.scopes)
        self.file_origins = tuple(o.rstrip("/") for o in file_origins)

    @classmethod
    async def connect(
        cls,
        *,
        token: str,
        api_url: str,
        file_origins: Sequence[str],
        write_deadline: float = DEFAULT_DEADLINE,
        on_call: SlackCallObserver | None = None,
        in_flight: float = IN_FLIGHT_S,
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
            in_flight=in_flight,
        )

    async def close(self) -> None:
        """Stop lookups in flight and close the HTTP session (its pooled connections with it)."""
        await self.lookups.close()
        await self.link.http.close()

    @property
    def identity(self) -> SlackIdentity:
        """Who the bot is in this workspace (from ``auth.test``)."""
        return self.link.identity

    # -- names ----------------------------------------------------------------------------------
    async def user(self, user_id: str) -> tuple[str, bool]:
        """``(display name, is_bot)`` of a user (see :meth:`.lookups.Lookups.user`)."""
        return await self.lookups.user(user_id)

    async def time_zone(self, user_id: str) -> str:
        """The user's IANA time zone; ``""`` if unknown."""
        return await self.lookups.time_zone(user_id)

    def known_user(self, user_id: str) -> str:
        """The user's display name if known now, else ``""`` (see :meth:`.lookups.Lookups.known_user`)."""
        return self.lookups.known_user(user_id)

    async def standing(self, origin: Origin, user: str) -> Standing:
        """How Slack sees ``user`` now in ``origin`` (:mod:`.standing`): asked afresh, never cached."""
        return await standing(self.link, origin, user)

    # -- reading --------------------------------------------------------------------------------
    async def describe(self, origin: Origin) -> OriginInfo:
        return await self.reads.describe(origin)

    async def view(self, raw: Mapping[str, Any]) -> MessageView:
        return await self.reads.view(raw)

    def inbound_ref(self, channel: str, ts: str) -> str:
        return self.link.inbound_ref(channel, ts)

    async def read(self, origin: Origin) -> list[MessageView]:
        return await self.reads.read(origin)

    async def find_posted(self, origin: Origin, effect_id: str) -> list[Posted]:
        return await self.reads.find_posted(origin, effect_id)

    async def find_unfinished(self, origin: Origin, after: str) -> list[Posted]:
        return await self.lookback.find_unfinished(origin, after)

    # -- writing --------------------------------------------------------------------------------
    async def post(self, origin: Origin, markdown: str, *, effect_id: str, feedback: str = "") -> Posted:
        return await self.writes.post(origin, markdown, effect_id=effect_id, feedback=feedback)

    async def post_blocks(
        self, origin: Origin, text: str, blocks: Sequence[Mapping[str, Any]], *, effect_id: str
    ) -> Posted:
        """Post a card built of Block Kit ``blocks`` (see :meth:`.writes.Writes.post_blocks`)."""
        return await self.writes.post_blocks(origin, text, blocks, effect_id=effect_id)

    async def update_blocks(self, ref: str, text: str, blocks: Sequence[Mapping[str, Any]]) -> None:
        """Replace a card's text and blocks (an approval card once decided)."""
        await self.writes.update_blocks(ref, text, blocks)

    async def tell_privately(self, channel: str, user: str, text: str, *, thread_ts: str = "") -> None:
        """Show ``text`` to ``user`` only, in ``thread_ts`` when given."""
        await self.writes.tell_privately(channel, user, text, thread_ts=thread_ts)

    async def react(self, ref: str, emoji: str, *, add: bool) -> None:
        await self.writes.react(ref, emoji, add=add)

    async def edit(self, ref: str, markdown: str, *, feedback: str = "", footer: str = "") -> None:
        await self.writes.edit(ref, markdown, feedback=feedback, footer=footer)

    async def retract(self, ref: str) -> None:
        await self.writes.retract(ref)

    async def open_stream(self, origin: Origin, start: StreamStart) -> LiveMessage:
        return await self.writes.open_stream(origin, start)

    async def set_title(self, origin: Origin, title: str) -> None:
        """Name a DM thread in Slack's agent view."""
        await self.writes.set_title(origin, title)

    async def suggest_prompts(self, origin: Origin, prompts: Sequence[str]) -> None:
        """Offer prompts in a new agent-view thread."""
        await self.writes.suggest_prompts(origin, prompts)

    async def set_status(self, origin: Origin, status: str, loading_messages: Sequence[str] = ()) -> None:
        await self.writes.set_status(origin, status, loading_messages)

    async def set_session(
        self, origin: Origin, status: SessionStatus, *, title: str = "", initiator: str = ""
    ) -> None:
        await self.agent_sessions.set_status(origin, status, title=title, initiator=initiator)

    async def rename_session(self, origin: Origin, title: str) -> None:
        await self.agent_sessions.rename(origin, title)

    # -- files and documents --------------------------------------------------------------------
    # Cards are drawn as Block Kit by :mod:`.cards` and posted like any host message.
    async def post_card(self, origin: Origin, card: Card, *, effect_id: str) -> Posted:
        return await self.post_blocks(origin, *cards.blocks(card), effect_id=effect_id)

    async def update_card(self, ref: str, card: Card) -> None:
        await self.update_blocks(ref, *cards.blocks(card))

    click_key = staticmethod(cards.click_key)
    clicked_ref = staticmethod(cards.clicked_ref)

    async def file_info(self, ref: str) -> FileMeta:
        async with self.link.call("files.info"):
            response = await self.link.read_client.files_info(file=ref)
        return file_meta(response.get("file") or {"id": ref})

    async def fetch_file(self, meta: FileMeta, dest_dir: Path, *, variant: str | None) -> Fetched:
        return await download(
            meta,
            dest_dir,
            variant=variant,
            token=self._token,
            origins=self.file_origins,
            session=self.link.http,
        )

    async def attach(self, origin: Origin, path: Path, *, title: str | None, comment: str | None) -> Uploaded:
        comment = strip_mass_mentions(comment) if comment else comment
        with _maybe_done("attached"):
            return await upload(
                self.link.write_client,
                origin,
                path,
                title=title,
                comment=comment,
                outbound=self.link.outbound,
                files_info=self.lookups.files_info,
                in_flight=self.lookback.window,
            )

    async def post_document(self, origin: Origin, title: str, markdown: str) -> Document:
        markdown = strip_mass_mentions(markdown)
        with _maybe_done("posted"):
            return await create_canvas(
                self.link.write_client,
                origin,
                title,
                markdown,
                permalink_of=self._file_permalink,
                outbound=self.link.outbound,
            )

    async def _file_permalink(self, file_id: str) -> str | None:
        async with self.link.call("files.info"):
            info = await self.link.read_client.files_info(file=file_id)
        return str((info.get("file") or {}).get("permalink") or "") or None


@contextmanager
def _maybe_done(what: str) -> Iterator[None]:
    """An upload or canvas carries no effect id to look for: an ambiguous answer (a dropped
    connection, a 5xx) is reported as what it is, so the model looks before doing it again."""
    try:
        yield
    except ChannelError as exc:
        if exc.ambiguous:
            exc.message = bounded(
                f"{exc.message} It may have been {what} anyway: read the conversation before trying again."
            )
        raise
