"""The Slack adapter: the channel contract over Slack's Web API.

It knows Slack and nothing about the agent. Author names and permalinks are
resolved here, in trusted code, and cached; message refs are ``CHANNEL:TS`` and
file refs are file ids — the session turns both into opaque handles. Outgoing
text loses Slack's mass-mention syntax here (``render.strip_mass_mentions``).

The adapter is assembled from parts, one concern each: :mod:`.lookups` (cached
names, channel and file info), :mod:`.reads` (threads, history, effect look-ups),
:mod:`.lookback` (what Slack holds after an ambiguous answer), :mod:`.writes` (posts,
edits, reactions, statuses, streams), over :mod:`.link`
(the clients and outbound path they share); files and documents are here.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import aiohttp

from channel.cards import Card
from channel.contract import (
    AdapterBase,
    ChannelFeatures,
    Document,
    Fetched,
    FileMeta,
    Origin,
    Posted,
    Uploaded,
)
from channel.errors import ChannelError, bounded

from . import cards
from .canvases import create_canvas
from .downloads import download
from .errors import SlackCallObserver
from .file_meta import file_meta
from .identity import SlackIdentity, fetch_identity
from .link import EFFECT_EVENT
from .outbound import DEFAULT_DEADLINE, Outbound
from .render import fallback_text, strip_mass_mentions
from .scopes import features_from_scopes
from .transport import http_session, read_client, write_client
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


class SlackAdapter(Writes, AdapterBase):
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
        self.on_call = on_call
        # One session (made here, so inside the running loop) for API calls, uploads and downloads.
        self.http = http if http is not None else http_session()
        self.reads = read_client(token, api_url, self.http)
        self.writes = write_client(token, api_url, self.http)
        #: Every write goes through it: paced per channel, 429s waited out until ``write_deadline``.
        self.outbound = Outbound(deadline=write_deadline, observer=on_call)
        self.identity = identity
        self.features = features if features is not None else features_from_scopes(identity.scopes)
        self.file_origins = tuple(o.rstrip("/") for o in file_origins)
        self._init_lookups()

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

    async def close(self) -> None:
        """Stop lookups in flight and close the HTTP session (its pooled connections with it)."""
        await self._close_lookups()
        await self.http.close()

    # -- files and documents --------------------------------------------------------------------
    # Cards are drawn as Block Kit by :mod:`.cards` and posted like any host message.
    async def post_card(self, origin: Origin, card: Card, *, effect_id: str) -> Posted:
        return await self.post_blocks(origin, *cards.blocks(card), effect_id=effect_id)

    async def update_card(self, ref: str, card: Card) -> None:
        await self.update_blocks(ref, *cards.blocks(card))

    click_key = staticmethod(cards.click_key)
    clicked_ref = staticmethod(cards.clicked_ref)

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
        with _maybe_done("attached"):
            return await upload(
                self.writes,
                origin,
                path,
                title=title,
                comment=comment,
                outbound=self.outbound,
                files_info=self._files_info,
            )

    async def post_document(self, origin: Origin, title: str, markdown: str) -> Document:
        markdown = strip_mass_mentions(markdown)
        with _maybe_done("posted"):
            return await create_canvas(
                self.writes,
                origin,
                title,
                markdown,
                permalink_of=self._file_permalink,
                outbound=self.outbound,
            )

    async def _file_permalink(self, file_id: str) -> str | None:
        async with self._call("files.info"):
            info = await self.reads.files_info(file=file_id)
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
