"""What the workspace sends the app: Events API envelopes and interactions, signed as Slack signs them.

Slack POSTs events as JSON and clicks as form-encoded ``payload=<json>`` to the
app's request URL, each with ``X-Slack-Request-Timestamp`` and a ``v0=`` HMAC-SHA256
signature of ``v0:{timestamp}:{body}`` under the app's signing secret. In Socket Mode
the same bodies go over the app's WebSocket instead (:func:`over_socket`). The
playground builds its deliveries here from the workspace's stored messages, so the
app sees what Slack would send for the same message.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from typing import Literal
from urllib.parse import urlencode

from .socket_mode import Envelope, SocketMode
from .wire import JSON
from .workspace import Workspace

ChannelType = Literal["channel", "im", "group", "mpim"]


def sign(body: bytes, secret: str, timestamp: int | None = None) -> dict[str, str]:
    """The signature headers Slack sends with ``body``."""
    ts = int(time.time()) if timestamp is None else int(timestamp)
    digest = hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": str(ts), "X-Slack-Signature": f"v0={digest}"}


def event_body(envelope: JSON, secret: str) -> tuple[bytes, dict[str, str]]:
    """An event envelope as Slack POSTs it: JSON body and signed headers."""
    body = json.dumps(envelope).encode()
    return body, {**sign(body, secret), "Content-Type": "application/json"}


def command_body(payload: JSON, secret: str) -> tuple[bytes, dict[str, str]]:
    """A slash command as Slack POSTs it: its fields form-encoded (no ``payload=``), signed."""
    body = urlencode({k: str(v) for k, v in payload.items()}).encode()
    return body, {**sign(body, secret), "Content-Type": "application/x-www-form-urlencoded"}


def interaction_body(payload: JSON, secret: str) -> tuple[bytes, dict[str, str]]:
    """An interaction payload as Slack POSTs it: form-encoded ``payload=<json>`` and signed headers."""
    body = urlencode({"payload": json.dumps(payload)}).encode()
    return body, {**sign(body, secret), "Content-Type": "application/x-www-form-urlencoded"}


def over_socket(socket: SocketMode, body: JSON) -> Envelope:
    """``body`` delivered over Socket Mode instead of HTTP: an ``event_callback`` (:func:`envelope`,
    :func:`message_events`) as an ``events_api`` envelope, a :func:`slash_command` as a
    ``slash_commands`` one, anything else (:func:`block_actions`, :func:`message_action`) as an
    ``interactive`` one. Await ``socket.wait_acked(envelope)`` for the app's acknowledgement."""
    if body.get("type") == "event_callback":
        return socket.event(body)
    if "command" in body:  # a slash command (:func:`slash_command`): its answer comes in the ack
        return socket.send("slash_commands", body, accepts_response_payload=True)
    return socket.interaction(body)


def channel_type(ws: Workspace, channel: str) -> ChannelType:
    chan = ws.channels[channel]
    if chan.is_im:
        return "im"
    if chan.is_mpim:
        return "mpim"
    return "group" if chan.is_private else "channel"


def envelope(ws: Workspace, event: JSON) -> JSON:
    """``event`` wrapped in the ``event_callback`` envelope of this workspace's app."""
    return {
        "token": "verification-token",
        "team_id": ws.team_id,
        "context_team_id": ws.team_id,
        "api_app_id": ws.app_id,
        "event": event,
        "type": "event_callback",
        "event_id": f"Ev{uuid.uuid4().hex[:10].upper()}",
        "event_time": int(time.time()),
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": ws.team_id,
                "user_id": ws.bot_user_id,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": False,
        "event_context": f"4-{uuid.uuid4().hex}",
    }


def message_events(ws: Workspace, channel: str, ts: str) -> list[JSON]:
    """The envelopes Slack sends for a person's stored message: ``app_mention`` when it mentions the
    bot outside a DM, then the ``message`` event (the app subscribes to both; it dedupes them)."""
    message = ws.find(channel, ts)
    if message is None:
        raise ValueError(f"no message {ts} in {channel}")
    kind = channel_type(ws, channel)
    event: JSON = {
        "type": "message",
        "channel": channel,
        "user": message["user"],
        "text": message.get("text", ""),
        "ts": ts,
        "event_ts": ts,
        "channel_type": kind,
        "team": ws.team_id,
        "client_msg_id": str(uuid.uuid4()),
    }
    if ws.is_reply(message):
        event["thread_ts"] = message["thread_ts"]
    if message.get("files"):
        event["subtype"] = "file_share"
        event["files"] = ws.render(message, False)["files"]
        event["upload"] = False
    out = []
    if kind != "im" and f"<@{ws.bot_user_id}>" in event["text"]:
        mention = {k: v for k, v in event.items() if k not in ("channel_type", "subtype", "upload")}
        mention["type"] = "app_mention"
        out.append(envelope(ws, mention))
    out.append(envelope(ws, event))
    return out


def block_actions(
    ws: Workspace, channel: str, ts: str, user: str, action: JSON, values: dict[str, str] | None = None
) -> JSON:
    """The ``block_actions`` payload Slack posts when ``user`` clicks ``action`` (an element's
    ``action_id``, ``block_id``, ``type`` and ``value``) on the stored message ``ts``; ``values``
    fills the message's ``input`` blocks (by block id) and comes back as the payload's ``state``."""
    message = ws.find(channel, ts)
    if message is None:
        raise ValueError(f"no message {ts} in {channel}")
    person = ws.users.get(user)
    name = person.name if person is not None else user.lower()
    container: JSON = {"type": "message", "message_ts": ts, "channel_id": channel, "is_ephemeral": False}
    if ws.is_reply(message) or message.get("thread_ts"):
        container["thread_ts"] = message["thread_ts"]
    payload: JSON = {
        "type": "block_actions",
        "token": "verification-token",
        "api_app_id": ws.app_id,
        "trigger_id": f"{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex[:12]}",
        "team": {"id": ws.team_id, "domain": "playground"},
        "user": {"id": user, "username": name, "name": name, "team_id": ws.team_id},
        "container": container,
        "channel": {"id": channel, "name": ws.channels[channel].name},
        "message": ws.render(message, True),
        "response_url": f"https://hooks.slack.com/actions/{ws.team_id}/1/{uuid.uuid4().hex}",
        "actions": [{**action, "action_ts": f"{time.time():.6f}"}],
    }
    state = input_state(message.get("blocks") or [], values or {})
    if state is not None:
        payload["state"] = state
    return payload


def _initial(element: JSON) -> str | None:
    if isinstance(element.get("initial_option"), dict):
        return str(element["initial_option"].get("value"))
    if isinstance(element.get("initial_options"), list):
        return "\n".join(str(o.get("value")) for o in element["initial_options"])
    initial = element.get("initial_value")
    return None if initial is None else str(initial)


def input_state(blocks: list[JSON], values: dict[str, str]) -> JSON | None:
    """The ``state`` Slack sends with a click on a message holding ``input`` blocks: each input's
    element by block and action id, with its value from ``values`` (empty when not given);
    ``None`` when the message has no inputs. A value that is not one of a select's options is
    refused as Slack's client would not offer it (ValueError)."""
    state: dict[str, JSON] = {}
    for block in blocks:
        if block.get("type") != "input":
            continue
        element = block.get("element") or {}
        value = values.get(block.get("block_id", ""))
        if value is None:
            value = _initial(element)  # untouched: the field still holds what it started with
        entry: JSON = {"type": element.get("type")}
        if element.get("type") in ("static_select", "multi_static_select"):
            options = {o["value"]: o for o in element.get("options") or []}
            picked = value.split("\n") if value else []
            unknown = [v for v in picked if v not in options]
            if unknown:
                raise ValueError(f"{unknown[0]!r} is not an option of input {block.get('block_id')}")
            if element["type"] == "multi_static_select":
                entry["selected_options"] = [options[v] for v in picked]
            else:
                entry["selected_option"] = options[picked[0]] if picked else None
        else:
            entry["value"] = value
        state[block.get("block_id", "")] = {element.get("action_id", ""): entry}
    return {"values": state} if state else None


def _trigger_id() -> str:
    return f"{uuid.uuid4().int % 10**12}.{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex}"


def message_action(
    ws: Workspace, channel: str, ts: str, user: str, *, callback_id: str, response_url: str = ""
) -> JSON:
    """The ``message_action`` payload Slack posts when ``user`` picks the message shortcut
    ``callback_id`` on the stored message ``ts`` (its ⋮ menu)."""
    message = ws.find(channel, ts)
    if message is None:
        raise ValueError(f"no message {ts} in {channel}")
    person = ws.users.get(user)
    name = person.name if person is not None else user.lower()
    return {
        "type": "message_action",
        "token": "verification-token",
        "action_ts": f"{time.time():.6f}",
        "team": {"id": ws.team_id, "domain": "playground"},
        "user": {"id": user, "username": name, "name": name, "team_id": ws.team_id},
        "channel": {"id": channel, "name": ws.channels[channel].name},
        "is_enterprise_install": False,
        "callback_id": callback_id,
        "trigger_id": _trigger_id(),
        "response_url": response_url or f"https://hooks.slack.com/app/{ws.team_id}/1/{uuid.uuid4().hex}",
        "message_ts": ts,
        "message": ws.render(message, True),
    }


def slash_command(
    ws: Workspace,
    channel: str,
    user: str,
    text: str,
    *,
    command: str = "/threadbound",
    response_url: str = "",
) -> JSON:
    """The fields of a slash command ``user`` typed in ``channel`` (``command text``)."""
    person = ws.users.get(user)
    chan = ws.channels.get(channel)
    return {
        "token": "verification-token",
        "team_id": ws.team_id,
        "team_domain": "playground",
        "channel_id": channel,
        "channel_name": chan.name if chan is not None else "directmessage",
        "user_id": user,
        "user_name": person.name if person is not None else user.lower(),
        "command": command,
        "text": text,
        "api_app_id": ws.app_id,
        "is_enterprise_install": "false",
        "response_url": response_url or f"https://hooks.slack.com/commands/{ws.team_id}/1/{uuid.uuid4().hex}",
        "trigger_id": _trigger_id(),
    }


def app_home_opened(ws: Workspace, user: str, *, tab: str = "home") -> JSON:
    """The ``event_callback`` Slack sends when ``user`` opens the app's ``tab`` (``home``, ``messages``)."""
    event: JSON = {
        "type": "app_home_opened",
        "user": user,
        "channel": f"D{user[1:]}",
        "tab": tab,
        "event_ts": f"{time.time():.6f}",
    }
    view = ws.home_views.get(user)
    if view is not None and tab == "home":
        event["view"] = {"type": "home", **view}
    return envelope(ws, event)


__all__ = [
    "app_home_opened",
    "block_actions",
    "channel_type",
    "command_body",
    "envelope",
    "event_body",
    "interaction_body",
    "message_action",
    "message_events",
    "over_socket",
    "sign",
    "slash_command",
]
