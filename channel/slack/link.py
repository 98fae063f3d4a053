"""What every part of the Slack adapter shares: its clients, outbound path and identity.

:class:`SlackLink` is the base of the adapter's parts (:mod:`.lookups`, :mod:`.reads`,
:mod:`.writes`) and what a streamed message (:mod:`.stream`) writes through, so none of
them imports the adapter. Message refs are ``CHANNEL:TS``.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from typing import Any

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient

from channel.contract import Origin, Posted
from channel.errors import ChannelError

from .errors import SlackCallObserver, slack_call
from .identity import SlackIdentity
from .outbound import Outbound

#: Metadata event type that carries the effect id of a post (see the effect journal).
EFFECT_EVENT = "threadbound_effect"


class SlackLink:
    """The adapter's shared state (set by ``SlackAdapter.__init__``) and the helpers over it."""

    reads: AsyncWebClient
    writes: AsyncWebClient
    outbound: Outbound
    identity: SlackIdentity
    http: aiohttp.ClientSession
    #: Told of every Slack call this adapter makes (method, outcome, seconds); the host's metrics.
    on_call: SlackCallObserver | None

    def _call(self, method: str) -> AbstractAsyncContextManager[None]:
        """:func:`slack_call` reporting to this adapter's ``on_call``."""
        return slack_call(method, self.on_call)

    def permalink(self, channel: str, ts: str, thread_ts: str = "") -> str | None:
        # Slack's permalink format, built locally: chat.getPermalink per post would cost a call each.
        if not self.identity.team_url:
            return None
        link = f"{self.identity.team_url.rstrip('/')}/archives/{channel}/p{ts.replace('.', '')}"
        if thread_ts and thread_ts != ts:
            link += f"?thread_ts={thread_ts}&cid={channel}"
        return link

    @staticmethod
    def inbound_ref(channel: str, ts: str) -> str:
        """The ref of message ``ts`` in ``channel``, as every view and post of it carries."""
        return f"{channel}:{ts}"

    def posted(self, origin: Origin, ts: str) -> Posted:
        """The :class:`Posted` of message ``ts`` in ``origin``."""
        return Posted(
            ref=self.inbound_ref(origin.channel, ts),
            new_root="" if origin.thread else ts,
            permalink=self.permalink(origin.channel, ts, origin.thread),
        )

    @staticmethod
    def effect_metadata(effect_id: str) -> dict[str, Any]:
        """The message metadata that marks a post (or stream) with its effect id."""
        return {"event_type": EFFECT_EVENT, "event_payload": {"effect_id": effect_id}}


def effect_id_of(message: dict[str, Any]) -> str:
    """The effect id a message's metadata carries ("" when none)."""
    meta = message.get("metadata") or {}
    payload = meta.get("event_payload") or {}
    if meta.get("event_type") != EFFECT_EVENT:
        return ""
    return str(payload.get("effect_id") or "")


def split_ref(ref: str) -> tuple[str, str]:
    channel, sep, ts = ref.partition(":")
    if not sep or not channel or not ts:
        raise ChannelError("invalid_handle", "that handle does not name a Slack message")
    return channel, ts


def iso_time(ts: str) -> str:
    try:
        return datetime.fromtimestamp(float(ts), tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    except ValueError:
        return ""
