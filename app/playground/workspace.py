"""The playground's workspace: who is in it, what the app's settings become, and how typed text is stored.

``GENERAL`` and ``PEOPLE`` are seeded into the emulator by ``seed``; ``playground_settings``
points the real app at the emulator; ``ignored_settings`` names what the user set that the
playground replaces; ``slack_text`` turns what a person typed into what Slack would store.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr

from threadbound_emulator import FakeSlack

from ..settings import Settings

#: The channel everyone is in.
GENERAL = "C0GENERAL"
#: The people one can type as: (user id, name, DM channel with the bot).
PEOPLE = (
    ("U0ALICE", "alice", "Alice Chen", "D0ALICE"),
    ("U0BOB", "bob", "Bob Okafor", "D0BOB"),
    ("U0CAROL", "carol", "Carol Díaz", "D0CAROL"),
)


@dataclass(frozen=True)
class Delivery:
    """What the app answered to one delivery."""

    status: int
    body: str


def seed(slack: FakeSlack) -> None:
    """Add ``GENERAL``, every person in ``PEOPLE`` and each one's DM with the bot to ``slack``."""
    slack.add_channel(GENERAL, "general")
    for uid, name, real_name, dm in PEOPLE:
        slack.add_user(uid, name, display_name=real_name.split()[0], real_name=real_name)
        slack.add_channel(dm, f"dm-{name}", is_im=True, user=uid)


def playground_settings(settings: Settings, slack: FakeSlack, secret: str) -> Settings:
    """``settings`` with Slack pointed at the emulator and the store in its own embedded SQLite."""
    return settings.model_copy(
        update={
            "slack_bot_token": SecretStr(slack.token),
            "slack_signing_secret": SecretStr(secret),
            # The playground delivers over signed HTTP, never over Socket Mode.
            "slack_app_token": SecretStr(""),
            "slack_http_events": None,
            "slack_api_url": slack.api_url,
            "slack_file_origins": (slack.files_origin,),
            "data_dir": settings.data_dir / "playground",
            "database_url": "",
            # Whoever can open the page may use it: the workspace is local, so no allow-lists.
            "allowed_channels": (),
            "allowed_users": (),
        }
    )


def free_local_port() -> int:
    """A port on 127.0.0.1 nobody listens on now (the app's, so ``PUBLIC_URL`` can name it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def personal_settings(settings: Settings, app_port: int) -> dict[str, Any]:
    """``PUBLIC_URL`` pointing at the app's local port, and ``MCP_TOKEN_KEY`` when none is set: a
    key for this session only (tokens stored under an earlier session's key are then not read, and
    the person is asked to connect again)."""
    from app.agent.mcp.vault import new_key

    update: dict[str, Any] = {"public_url": f"http://127.0.0.1:{app_port}"}
    if not settings.mcp_token_key.get_secret_value():
        update["mcp_token_key"] = SecretStr(new_key())
    return update


def ignored_settings(settings: Settings) -> list[str]:
    """The settings the user gave that the playground replaces (each is named in a note)."""
    defaults = Settings.model_fields
    names = []
    for name in (
        "slack_bot_token",
        "slack_signing_secret",
        "slack_app_token",
        "slack_api_url",
        "slack_file_origins",
        "database_url",
    ):
        value = getattr(settings, name)
        raw = value.get_secret_value() if isinstance(value, SecretStr) else value
        default = defaults[name].default
        default = default.get_secret_value() if isinstance(default, SecretStr) else default
        if raw != default:
            names.append(name.upper())
    return names


def slack_text(slack: FakeSlack, text: str) -> str:
    """What Slack stores for typed text: ``&<>`` escaped, ``@name`` as ``<@U…>`` for known names."""
    escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    by_name = {slack.bot_name.lower(): slack.bot_user_id}
    for uid, name, real_name, _ in PEOPLE:
        by_name[name] = uid
        by_name[real_name.split()[0].lower()] = uid

    def mention(match: re.Match[str]) -> str:
        uid = by_name.get(match.group(1).lower())
        return f"<@{uid}>" if uid else match.group(0)

    return re.sub(r"(?<![\w@])@([\w.-]+)", mention, escaped)


__all__ = [
    "GENERAL",
    "PEOPLE",
    "Delivery",
    "ignored_settings",
    "playground_settings",
    "seed",
    "slack_text",
]
