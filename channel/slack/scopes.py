"""Which Slack bot scopes threadbound asks for, and what each one is for.

The one place scopes are named: the adapter derives its ``ChannelFeatures`` from
``FEATURE_SCOPES``, the manifest requests ``wanted_scopes()``, and
``python -m app check`` reports ``missing_scopes`` against what ``auth.test`` granted.
"""

from __future__ import annotations

from collections.abc import Iterable

from channel.contract import ChannelFeatures
from channel.tools import CATALOG

#: Scopes without which events are not received or nothing can be answered: a missing one is fatal.
BASE_SCOPES: dict[str, str] = {
    "app_mentions:read": "receive @mentions",
    "channels:history": "receive and read messages in public channels",
    "groups:history": "receive and read messages in private channels",
    "im:history": "receive and read direct messages",
    "mpim:history": "receive and read group direct messages",
    "channels:read": "name the public channel a task came from",
    "groups:read": "name the private channel a task came from",
    "im:read": "name the direct message a task came from",
    "mpim:read": "name the group direct message a task came from",
    "users:read": "show authors' names",
    "chat:write": "post, edit and delete replies",
}

#: ``ChannelFeatures`` flag → scopes; a flag is on when any one of its scopes was granted.
FEATURE_SCOPES: dict[str, tuple[str, ...]] = {
    "read": ("channels:history", "groups:history", "im:history", "mpim:history"),
    "react": ("reactions:write",),
    "edit": ("chat:write",),
    "retract": ("chat:write",),
    "fetch_file": ("files:read",),
    "attach": ("files:write",),
    "documents": ("canvases:write",),
    # assistant.threads.setStatus accepts chat:write since 2026-03-05 (assistant:write is being dropped).
    "status": ("chat:write",),
    "stream": ("chat:write",),
    "ask": ("chat:write",),
    # Declaring the app an agent (the manifest's agent setting) grants assistant:write: agent sessions.
    "sessions": ("assistant:write",),
}

#: Scopes no feature flag stands for, with what they are for.
EXTRA_SCOPES: dict[str, str] = {
    "reactions:read": "see the reactions on messages channel_read returns",
    "commands": "take the slash command (SLASH_COMMAND) and the message shortcut",
}

#: Scopes only the agent setting (``manifest --agent-view``) asks for, with what they are for.
AGENT_SCOPES: dict[str, str] = {
    "assistant:write": "agent sessions: a status, a title and Slack's Stop button while a run works",
}

#: Features used outside the tool catalog, with what they do.
RUNTIME_FEATURES: dict[str, str] = {
    "status": "show an 'is thinking…' status while a run works (progress falls back to a reaction)",
    "stream": "stream answers into the thread as they are written, with their steps",
}


def features_from_scopes(scopes: Iterable[str]) -> ChannelFeatures:
    granted = set(scopes)
    flags = {flag: any(s in granted for s in needs) for flag, needs in FEATURE_SCOPES.items()}
    return ChannelFeatures(**flags)


def _tools_for(flags: Iterable[str]) -> list[str]:
    wanted = set(flags)
    return [spec.name for spec in CATALOG.values() if spec.feature in wanted]


def _used_features() -> list[str]:
    used = {spec.feature for spec in CATALOG.values()} | set(RUNTIME_FEATURES)
    # The agent setting is opt-in (its scopes are AGENT_SCOPES): channel_set_title needs it, but the
    # default manifest must install on every plan without it.
    agent_only = {flag for flag, needs in FEATURE_SCOPES.items() if set(needs) <= set(AGENT_SCOPES)}
    return [flag for flag in FEATURE_SCOPES if flag in used - agent_only]


def wanted_scopes() -> list[str]:
    """Every scope the app requests, sorted: routing and replies, what a used feature needs, the extras."""
    wanted = set(BASE_SCOPES) | set(EXTRA_SCOPES)
    for flag in _used_features():
        wanted.update(FEATURE_SCOPES[flag])
    return sorted(wanted)


def missing_scopes(granted: Iterable[str]) -> dict[str, list[str]]:
    """Each wanted scope not in ``granted`` → the tools its absence disables (empty if none)."""
    have = set(granted)
    enabled = features_from_scopes(have).enabled()
    missing: dict[str, list[str]] = {}
    for scope in wanted_scopes():
        if scope not in have:
            lost = [f for f, needs in FEATURE_SCOPES.items() if scope in needs and f not in enabled]
            missing[scope] = _tools_for(lost)
    return missing


def purpose(scope: str) -> str:
    """What ``scope`` is for, in words: its base or extra purpose, else the tools and effects it enables."""
    if scope in BASE_SCOPES:
        return BASE_SCOPES[scope]
    if scope in EXTRA_SCOPES:
        return EXTRA_SCOPES[scope]
    if scope in AGENT_SCOPES:
        return AGENT_SCOPES[scope]
    flags = [f for f, needs in FEATURE_SCOPES.items() if scope in needs]
    parts = [*_tools_for(flags), *(RUNTIME_FEATURES[f] for f in flags if f in RUNTIME_FEATURES)]
    return ", ".join(parts)


__all__ = [
    "AGENT_SCOPES",
    "BASE_SCOPES",
    "EXTRA_SCOPES",
    "FEATURE_SCOPES",
    "RUNTIME_FEATURES",
    "features_from_scopes",
    "missing_scopes",
    "purpose",
    "wanted_scopes",
]
