"""Slack Events API deliveries for tests: signed envelopes, as Slack POSTs them.

Build an envelope (``app_mention``, ``message``, ``message_changed``,
``message_deleted``, ``url_verification``), then ``deliver`` it to the app's
``/slack/events`` with a valid signature (or ``sign`` a body yourself), or send it
(or a ``block_actions`` click) over the emulator's Socket Mode with ``over_socket``.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import time
import uuid
from typing import Any, Literal
from urllib.parse import urlencode

import aiohttp

from threadbound_emulator import FakeSlack
from threadbound_emulator.events import over_socket as _over_socket
from threadbound_emulator.socket_mode import Envelope

JSON = dict[str, Any]
ChannelType = Literal["channel", "im", "group", "mpim"]

TEAM_ID = "T1"
API_APP_ID = "A1"
BOT_USER_ID = "UBOT"
VERIFICATION_TOKEN = "verification-token"

_serial = itertools.count(1)


def new_event_id() -> str:
    """A fresh, unique ``event_id`` (``Ev…``)."""
    return f"Ev{next(_serial):06d}{uuid.uuid4().hex[:8].upper()}"


def sign(body: bytes, secret: str, timestamp: int | None = None) -> dict[str, str]:
    """Headers Slack sends with ``body``: timestamp, ``v0=`` HMAC-SHA256 signature, JSON content type."""
    ts = int(time.time()) if timestamp is None else int(timestamp)
    base = f"v0:{ts}:".encode() + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {
        "X-Slack-Request-Timestamp": str(ts),
        "X-Slack-Signature": f"v0={digest}",
        "Content-Type": "application/json",
    }


def _envelope(event: JSON, event_id: str | None, team_id: str = TEAM_ID) -> JSON:
    try:
        event_time = int(float(event.get("event_ts") or event.get("ts") or time.time()))
    except ValueError:
        event_time = int(time.time())
    return {
        "token": VERIFICATION_TOKEN,
        "team_id": team_id,
        "context_team_id": team_id,
        "api_app_id": API_APP_ID,
        "event": event,
        "type": "event_callback",
        "event_id": event_id or new_event_id(),
        "event_time": event_time,
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": team_id,
                "user_id": BOT_USER_ID,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": False,
        "event_context": f"4-{uuid.uuid4().hex}",
    }


def app_mention(
    channel: str,
    user: str,
    text: str,
    ts: str,
    thread_ts: str | None = None,
    files: list[JSON] | None = None,
    event_id: str | None = None,
) -> JSON:
    """An ``app_mention`` envelope (``text`` as given: include ``<@UBOT>`` yourself)."""
    event: JSON = {
        "type": "app_mention",
        "user": user,
        "text": text,
        "ts": ts,
        "channel": channel,
        "event_ts": ts,
        "team": TEAM_ID,
        "client_msg_id": str(uuid.uuid4()),
    }
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    if files:
        event["files"] = files
    return _envelope(event, event_id)


def message(
    channel: str,
    user: str,
    text: str,
    ts: str,
    thread_ts: str | None = None,
    channel_type: ChannelType = "channel",
    subtype: str | None = None,
    bot_id: str | None = None,
    files: list[JSON] | None = None,
    event_id: str | None = None,
    edited: JSON | None = None,
) -> JSON:
    """A ``message`` envelope. With ``files`` and no ``subtype`` the subtype is ``file_share``,
    as Slack sends it; ``edited`` (e.g. ``{"user": u, "ts": t}``) is copied onto the event."""
    event: JSON = {
        "type": "message",
        "channel": channel,
        "user": user,
        "text": text,
        "ts": ts,
        "event_ts": ts,
        "channel_type": channel_type,
        "team": TEAM_ID,
    }
    if subtype is None and files:
        subtype = "file_share"
    if subtype is not None:
        event["subtype"] = subtype
    if bot_id is not None:
        event["bot_id"] = bot_id
    else:
        event["client_msg_id"] = str(uuid.uuid4())
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    if files:
        event["files"] = files
        event["upload"] = False
    if edited is not None:
        event["edited"] = edited
    return _envelope(event, event_id)


def message_changed(
    channel: str,
    user: str,
    text: str,
    ts: str,
    previous_text: str = "",
    thread_ts: str | None = None,
    channel_type: ChannelType = "channel",
    event_id: str | None = None,
) -> JSON:
    """A ``message_changed`` envelope: the message at ``ts`` was edited to ``text``."""
    now = f"{time.time():.6f}"
    inner: JSON = {
        "type": "message",
        "user": user,
        "text": text,
        "ts": ts,
        "edited": {"user": user, "ts": now},
    }
    previous: JSON = {"type": "message", "user": user, "text": previous_text, "ts": ts}
    if thread_ts is not None:
        inner["thread_ts"] = previous["thread_ts"] = thread_ts
    event: JSON = {
        "type": "message",
        "subtype": "message_changed",
        "channel": channel,
        "channel_type": channel_type,
        "hidden": True,
        "message": inner,
        "previous_message": previous,
        "ts": now,
        "event_ts": now,
    }
    return _envelope(event, event_id)


def message_deleted(
    channel: str,
    ts: str,
    thread_ts: str | None = None,
    channel_type: ChannelType = "channel",
    event_id: str | None = None,
) -> JSON:
    """A ``message_deleted`` envelope for the message at ``ts``."""
    now = f"{time.time():.6f}"
    previous: JSON = {"type": "message", "ts": ts}
    if thread_ts is not None:
        previous["thread_ts"] = thread_ts
    event: JSON = {
        "type": "message",
        "subtype": "message_deleted",
        "channel": channel,
        "channel_type": channel_type,
        "hidden": True,
        "deleted_ts": ts,
        "previous_message": previous,
        "ts": now,
        "event_ts": now,
    }
    return _envelope(event, event_id)


def event_callback(event: JSON, event_id: str | None = None) -> JSON:
    """Any event (``assistant_thread_started``, ``app_home_opened``…) in its Events API envelope."""
    return _envelope(event, event_id)


def url_verification(challenge: str) -> JSON:
    """The ``url_verification`` request Slack sends when the request URL is set."""
    return {"token": VERIFICATION_TOKEN, "challenge": challenge, "type": "url_verification"}


def block_actions(
    *,
    channel: str,
    user: str,
    message_ts: str,
    action_id: str,
    value: str,
    thread_ts: str | None = None,
    element: str = "button",
    user_name: str = "",
    block_id: str = "actions",
    team_id: str = TEAM_ID,
    state: JSON | None = None,
) -> JSON:
    """A ``block_actions`` interaction payload: ``user`` clicked ``action_id`` (value ``value``)
    on the bot's message ``message_ts`` in ``channel``, as Slack posts it."""
    container: JSON = {
        "type": "message",
        "message_ts": message_ts,
        "channel_id": channel,
        "is_ephemeral": False,
    }
    message: JSON = {"type": "message", "ts": message_ts, "user": BOT_USER_ID, "bot_id": "BBOT"}
    if thread_ts:
        container["thread_ts"] = thread_ts
        message["thread_ts"] = thread_ts
    payload: JSON = {
        "type": "block_actions",
        "token": VERIFICATION_TOKEN,
        "api_app_id": API_APP_ID,
        "trigger_id": f"{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex[:12]}",
        "team": {"id": team_id, "domain": "fake"},
        "user": {
            "id": user,
            "username": user_name or user.lower(),
            "name": user_name or user.lower(),
            "team_id": team_id,
        },
        "container": container,
        "channel": {"id": channel, "name": channel.lower()},
        "message": message,
        "response_url": f"https://hooks.slack.com/actions/{team_id}/1/{uuid.uuid4().hex}",
        "actions": [
            {
                "type": element,
                "action_id": action_id,
                "block_id": block_id,
                "value": value,
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }
    if state is not None:
        payload["state"] = state  # a message with input blocks: their values at the click
    return payload


def over_socket(slack: FakeSlack, body: JSON) -> Envelope:
    """Send an envelope (``app_mention``…) or a click (``block_actions``) to the app over the
    emulator's Socket Mode instead of HTTP; ``await slack.socket.wait_acked(...)`` for its ack."""
    return _over_socket(slack.socket, body)


async def deliver_interaction(
    session: aiohttp.ClientSession,
    url: str,
    payload: JSON,
    secret: str,
    *,
    timestamp: int | None = None,
) -> aiohttp.ClientResponse:
    """POST an interaction payload the way Slack does: form-encoded ``payload=<json>``, signed."""
    body = urlencode({"payload": json.dumps(payload)}).encode()
    headers = sign(body, secret, timestamp)
    headers["Content-Type"] = "application/x-www-form-urlencoded"
    response = await session.post(url, data=body, headers=headers)
    await response.read()
    return response


async def deliver(
    session: aiohttp.ClientSession,
    url: str,
    envelope: JSON,
    secret: str,
    retry_num: int | None = None,
    *,
    timestamp: int | None = None,
    retry_reason: str = "http_timeout",
) -> aiohttp.ClientResponse:
    """POST ``envelope`` signed with ``secret``; adds Slack's retry headers when ``retry_num``
    is given. The body is read before returning, so ``await resp.text()`` / ``.json()`` work."""
    body = json.dumps(envelope).encode()
    headers = sign(body, secret, timestamp)
    if retry_num is not None:
        headers["X-Slack-Retry-Num"] = str(retry_num)
        headers["X-Slack-Retry-Reason"] = retry_reason
    response = await session.post(url, data=body, headers=headers)
    await response.read()
    return response


__all__ = [
    "API_APP_ID",
    "BOT_USER_ID",
    "TEAM_ID",
    "app_mention",
    "block_actions",
    "deliver",
    "deliver_interaction",
    "event_callback",
    "message",
    "message_changed",
    "message_deleted",
    "new_event_id",
    "over_socket",
    "sign",
    "url_verification",
]
