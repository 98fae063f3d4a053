"""The Slack app manifest (JSON form) for an Events API or a Socket Mode install of threadbound.

``python -m app manifest --url https://HOST/slack/events`` prints it (``--socket-mode``:
deliveries over a WebSocket the app opens, no request URL); paste it at
api.slack.com/apps → Create New App → From a manifest. Scopes come from
:mod:`channel.slack.scopes`, so the manifest asks for exactly what the tools,
routing and progress use.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from app.intake.shortcuts import ASK
from channel.slack.scopes import wanted_scopes

#: The URL path the server answers Slack events on (see app/server.py).
EVENTS_PATH = "/slack/events"
#: The placeholder URL of the checked-in slack-manifest.json.
PLACEHOLDER_URL = "https://YOUR-APP-HOST/slack/events"
#: The checked-in manifests: Events API (with the placeholder URL) and Socket Mode.
MANIFEST_FILE = "slack-manifest.json"
SOCKET_MODE_MANIFEST_FILE = "slack-manifest.socket-mode.json"

#: Bot events → the scope Slack requires to deliver each.
BOT_EVENTS: dict[str, str] = {
    "app_mention": "app_mentions:read",
    "message.channels": "channels:history",
    "message.groups": "groups:history",
    "message.im": "im:history",
    "message.mpim": "mpim:history",
}

#: Bot events that need no scope of their own: the App Home tab opened (``app.intake.home``).
SCOPELESS_EVENTS: tuple[str, ...] = ("app_home_opened",)
#: The slash command's name when ``SLASH_COMMAND`` is not set.
DEFAULT_SLASH_COMMAND = "/threadbound"
_SLASH_COMMAND = re.compile(r"^/[a-z0-9_-]{1,31}$")
# Slack's limit on a shortcut's name.
_MAX_SHORTCUT_NAME = 24

#: Bot events the agent messaging experience adds (``--agent-view``); answered by ``app.intake.agent_view``.
AGENT_VIEW_EVENTS: tuple[str, ...] = ("app_home_opened", "assistant_thread_started")

_DEV_HOSTS = ("localhost", "127.0.0.1", "::1")
# Slack's limits: display_information.name ≤ 35 characters.
_MAX_NAME = 35
_DESCRIPTION = "An AI agent that works in the Slack thread it was called from."
_AGENT_DESCRIPTION = "Ask me anything; I answer in this thread and act only here."


def check_request_url(url: str) -> str:
    """``url`` if Slack can deliver events to it, else ``ValueError`` saying what is wrong."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise ValueError(f"--url {url!r} is not a URL: {exc}") from exc
    if parts.scheme == "https" and host:
        pass
    elif parts.scheme == "http" and host in _DEV_HOSTS:
        pass  # local development behind a tunnel or a fake; Slack itself only delivers to https
    else:
        raise ValueError(f"--url must be https://HOST{EVENTS_PATH} (http only for localhost), not {url!r}")
    if parts.username or parts.password:
        raise ValueError("--url must not carry a user or password")
    if not parts.path.endswith(EVENTS_PATH) or parts.query or parts.fragment:
        raise ValueError(f"--url must end with {EVENTS_PATH} (the server's events endpoint), not {url!r}")
    return url


def build_manifest(
    url: str | None,
    *,
    name: str = "threadbound",
    agent_view: bool = False,
    socket_mode: bool = False,
    slash_command: str = DEFAULT_SLASH_COMMAND,
) -> dict[str, Any]:
    """The manifest for an install whose events endpoint is ``url``; ``ValueError`` on a bad url or name.

    It installs on any Slack plan: nothing in it needs a paid one. ``agent_view`` adds Slack's agent
    messaging experience (``features.agent_view``), which Slack documents for paid plans only. The
    older ``assistant_view`` is never written: new apps can no longer use it. ``socket_mode`` (with
    ``url`` None) turns Socket Mode on and names no request URL: events and clicks arrive over the
    WebSocket the app opens with its app-level token. ``slash_command`` (``SLASH_COMMAND``) names the
    slash command; the App Home tab and the message shortcut "Ask <name>" are always declared."""
    if socket_mode and url is not None:
        raise ValueError("--url is not used with --socket-mode: Slack delivers over the app's WebSocket")
    if not socket_mode:
        if url is None:
            raise ValueError("--url is required (or --socket-mode for an install without a public URL)")
        check_request_url(url)
    name = name.strip()
    if not name or len(name) > _MAX_NAME:
        raise ValueError(f"--name must be 1 to {_MAX_NAME} characters")
    if not _SLASH_COMMAND.match(slash_command):
        raise ValueError("--slash-command must be / and 1 to 31 lowercase letters, digits, - or _")
    scopes = wanted_scopes()
    features: dict[str, Any] = {
        "app_home": {
            # Each person's tasks, follow-ups and budget (app_home_opened, app.intake.home).
            "home_tab_enabled": True,
            # The messages tab is how people DM the bot.
            "messages_tab_enabled": True,
            "messages_tab_read_only_enabled": False,
        },
        "bot_user": {"display_name": name, "always_online": True},
        # On any message's menu: ask the app about it, in its thread (app.intake.shortcuts).
        "shortcuts": [
            {
                "name": f"Ask {name}"[:_MAX_SHORTCUT_NAME].strip(),
                "type": "message",
                "callback_id": ASK,
                "description": "Ask about this message; the answer comes in its thread",
            }
        ],
        # help, usage, follow-ups: answered privately (app.intake.slash_command).
        "slash_commands": [
            {
                "command": slash_command,
                "description": "Your usage and follow-ups with this app",
                "usage_hint": "help | usage | follow-ups",
                "should_escape": False,
                **({} if url is None else {"url": url}),
            }
        ],
    }
    events = list(BOT_EVENTS) + list(SCOPELESS_EVENTS)
    if agent_view:
        features["agent_view"] = {"agent_description": _AGENT_DESCRIPTION}
        # A new conversation in the agent view gets the agent file's suggested prompts
        # (assistant_thread_started); the Messages tab reports being opened (app_home_opened).
        events += [e for e in AGENT_VIEW_EVENTS if e not in events]
    # Clicks (feedback, approval and Cancel buttons), shortcuts and the slash command are signed
    # posts to the same URL, or sent over the socket in Socket Mode.
    where = {} if url is None else {"request_url": url}
    return {
        "display_information": {"name": name, "description": _DESCRIPTION},
        "features": features,
        "oauth_config": {"scopes": {"bot": scopes}},
        "settings": {
            "event_subscriptions": {**where, "bot_events": events},
            "interactivity": {"is_enabled": True, **where},
            "org_deploy_enabled": False,
            "socket_mode_enabled": socket_mode,
            "token_rotation_enabled": False,
        },
    }


__all__ = [
    "BOT_EVENTS",
    "DEFAULT_SLASH_COMMAND",
    "EVENTS_PATH",
    "MANIFEST_FILE",
    "PLACEHOLDER_URL",
    "SCOPELESS_EVENTS",
    "SOCKET_MODE_MANIFEST_FILE",
    "build_manifest",
    "check_request_url",
]
