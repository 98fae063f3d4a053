"""Slack mrkdwn from the Web API → text for the model, with no raw Slack IDs.

Slack sends mentions, channel links, special mentions, dates and links as
``<…>`` constructs and escapes literal ``&``, ``<`` and ``>`` as entities.
:func:`render_text` replaces every construct with readable text (names come
from a ``users`` map resolved in trusted code) and unescapes entities in the
same single pass, so an escaped ``&lt;@U1&gt;`` in a message stays literal text
and is never mistaken for a mention.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from channel import markdown

__all__ = [
    "NO_UNFURL",
    "Names",
    "display_name",
    "fallback_text",
    "labels_in",
    "render_text",
    "strip_mass_mentions",
    "unlabelled_channels_in",
    "user_ids_in",
]

# Slack IDs are upper-case letters and digits; W… IDs are Enterprise Grid users.
_USER_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")
# A construct (never contains a raw < or >: Slack escapes those) or an entity.
_TOKEN = re.compile(r"<([^<>]*)>|&(lt|gt|amp);")
_ENTITIES = {"lt": "<", "gt": ">", "amp": "&"}
_SPECIAL = frozenset({"here", "channel", "everyone"})
_URL_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
# Labelled references whose labels name things blocks only give by ID.
_CHANNEL_LABEL = re.compile(r"<#([CGD][A-Z0-9]+)\|([^<>|]+)>")
_GROUP_LABEL = re.compile(r"<!subteam\^([A-Z0-9]+)\|([^<>|]+)>")
_CHANNEL_REF = re.compile(r"<#([CGD][A-Z0-9]+)(?:\|([^<>]*))?>")


@dataclass(frozen=True, slots=True)
class Names:
    """Names resolved in trusted code, by Slack ID: users (display names), channels (without
    ``#``) and user groups (handles, without ``@``). An ID missing here renders as a neutral
    placeholder, never as itself."""

    users: Mapping[str, str] = field(default_factory=dict)
    channels: Mapping[str, str] = field(default_factory=dict)
    groups: Mapping[str, str] = field(default_factory=dict)


#: On every write that carries text the model wrote (posts, streams, edits, a canvas's link): Slack
#: fetches no link or media preview, so a URL the model was talked into writing (one carrying data
#: in its query, say) is never fetched by Slack's unfurler.
NO_UNFURL: Mapping[str, Any] = {"unfurl_links": False, "unfurl_media": False}

_SPECIAL_MENTION = re.compile(r"<!(channel|here|everyone|subteam\^[^>|]*)(?:\|([^>]*))?>", re.IGNORECASE)


def strip_mass_mentions(text: str) -> str:
    """Neutralise everything in outgoing text that could make Slack notify a whole channel or group.

    ``<!here>``, ``<!channel>``, ``<!everyone>`` (with or without a ``|label``) and, as
    :func:`channel.markdown.strip_mass_mentions` does, bare ``@here``/``@channel``/``@everyone``
    become ``@`` + ZERO WIDTH SPACE + the word, which reads the same but pings nobody;
    ``<!subteam^ID|@team>`` becomes ``@``+ZWSP+``team`` (``group`` without a label), dropping
    the ID. Applied everywhere, code included, because a ping is never wanted. Idempotent.
    """
    return markdown.strip_mass_mentions(_SPECIAL_MENTION.sub(_neutral_special, text))


def _neutral_special(match: re.Match[str]) -> str:
    keyword, label = match.group(1), match.group(2)
    if keyword.lower().startswith("subteam"):
        name = (label or "").strip().lstrip("@").strip() or "group"
        return "@" + markdown.ZWSP + name
    return "@" + markdown.ZWSP + keyword.lower()


def user_ids_in(text: str) -> set[str]:
    """The user IDs mentioned in ``text`` as ``<@U…>``/``<@W…>`` (with or without ``|label``)."""
    return set(_USER_MENTION.findall(text))


def labels_in(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """``(channel names, group handles)`` by ID, from labelled ``<#C…|name>`` and
    ``<!subteam^S…|@handle>`` references in ``text``; rich-text blocks name neither."""
    channels = {cid: name.strip().lstrip("#") for cid, name in _CHANNEL_LABEL.findall(text) if name.strip()}
    groups = {gid: name.strip().lstrip("@") for gid, name in _GROUP_LABEL.findall(text) if name.strip()}
    return channels, groups


def unlabelled_channels_in(text: str) -> set[str]:
    """Channel IDs referenced as ``<#C…>`` or ``<#C…|>``: their names must be looked up."""
    return {cid for cid, label in _CHANNEL_REF.findall(text) if not label.strip()}


def render_text(text: str, users: Mapping[str, str] | Names) -> str:
    """Render Slack message text for the model.

    ``users`` maps user ID → display name (or is a :class:`Names` with channels and
    groups too). Mentions become ``@Name`` (``@label`` or ``@someone`` when the ID is
    unknown), channels ``#name`` (``#a-channel`` without a name), user groups
    ``@handle`` (``@a-group``), ``<!here>`` and friends ``@here``, dates their
    fallback text, links ``[label](url)`` or the bare URL, mail links the address;
    then ``&lt;``/``&gt;``/``&amp;`` are unescaped.
    """
    names = users if isinstance(users, Names) else Names(users=users)

    def replace(match: re.Match[str]) -> str:
        entity = match.group(2)
        if entity is not None:
            return _ENTITIES[entity]
        return _render_construct(match.group(1), names)

    return _TOKEN.sub(replace, text)


def display_name(user: Mapping[str, Any]) -> str:
    """The name to show for a ``users.info`` ``user`` object: the profile's display
    name, else its real name (profile, then top level), else the username, else
    ``"someone"``."""
    profile: Mapping[str, Any] = user.get("profile") or {}
    if not isinstance(profile, Mapping):
        profile = {}
    for value in (
        profile.get("display_name"),
        profile.get("real_name"),
        user.get("real_name"),
        user.get("name"),
    ):
        if isinstance(value, str) and value.strip():
            return value.strip()
    return "someone"


def _unescape(text: str) -> str:
    # One pass, so "&amp;lt;" becomes "&lt;" and not "<".
    return re.sub(r"&(lt|gt|amp);", lambda m: _ENTITIES[m.group(1)], text)


def _render_construct(inner: str, names: Names) -> str:
    target, bar, raw_label = inner.partition("|")
    label = _unescape(raw_label).strip() if bar else ""
    if target.startswith("@"):
        name = names.users.get(target[1:], "").strip()
        return "@" + (name or label.lstrip("@").strip() or "someone")
    if target.startswith("#"):
        known = names.channels.get(target[1:], "").strip()
        return "#" + (label.lstrip("#").strip() or known or "a-channel")
    if target.startswith("!"):
        return _render_special(target[1:], label, names)
    url = _unescape(target)
    if url.lower().startswith("mailto:"):
        address = url[len("mailto:") :]
        return address if not label or label == address else f"{label} ({address})"
    if _URL_SCHEME.match(url):
        return url if not label or label == url else f"[{label}]({url})"
    # Not a construct Slack documents: show its label, else its text, never an ID-shaped target.
    return label or url


def _render_special(command: str, label: str, names: Names) -> str:
    keyword, _, argument = command.partition("^")
    keyword = keyword.lower()
    if keyword in _SPECIAL:
        return "@" + keyword
    if keyword == "subteam":
        known = names.groups.get(argument.split("^", 1)[0], "").strip()
        return "@" + (label.lstrip("@").strip() or known or "a-group")
    if keyword == "date":
        return label or "a date"
    # Unknown special command (its arguments may hold IDs): the label only.
    return label


def fallback_text(text: str) -> str:
    """The plain-text notification fallback of Markdown ``text``, escaped so it cannot form a
    mention or link."""
    plain = markdown.plain_fallback(text)
    return plain.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
