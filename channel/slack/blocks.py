"""Slack Block Kit → Markdown for the model: what a person sees of a message's blocks.

Slack clients draw a message's ``blocks``; its ``text`` is only the notification
fallback. Rich text (what people type) keeps structure the fallback flattens or
loses: code blocks, quotes, lists, link labels, dates. App messages (``section``,
``header``, ``context`` blocks) often say much more than their fallback.

References are rendered from :class:`~channel.slack.render.Names` (resolved in
trusted code): users ``@Name``, channels ``#name``, user groups ``@handle``. An
unknown ID becomes a neutral placeholder, never the ID itself. Interactive
elements (buttons, menus) carry no content for the reader and are skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from .render import Names, render_text, unlabelled_channels_in, user_ids_in

__all__ = ["block_refs", "render_blocks"]

# Blocks whose content is text a person reads; the rest (actions, inputs, dividers) is layout.
_TEXT_BLOCKS = frozenset({"rich_text", "section", "header", "context", "markdown", "image", "video"})
_BROADCASTS = frozenset({"here", "channel", "everyone"})
# Nesting bound for hostile or broken payloads (Slack nests lists a few levels at most).
_MAX_DEPTH = 8


def render_blocks(blocks: Any, names: Names) -> str:
    """The Markdown a person would read in ``blocks``; ``""`` when they hold no text."""
    if not isinstance(blocks, list):
        return ""
    parts = [_block(b, names) for b in blocks if isinstance(b, Mapping) and _kind(b) in _TEXT_BLOCKS]
    return "\n".join(p for p in parts if p.strip()).strip("\n")


def block_refs(blocks: Any) -> tuple[set[str], set[str]]:
    """``(user IDs, channel IDs)`` referenced in ``blocks``, to resolve before rendering."""
    users: set[str] = set()
    channels: set[str] = set()
    for element in _walk(blocks, 0):
        kind = element.get("type")
        if kind == "user" and isinstance(element.get("user_id"), str):
            users.add(element["user_id"])
        elif kind in ("channel", "message_mention") and isinstance(element.get("channel_id"), str):
            channels.add(element["channel_id"])
        if kind == "mrkdwn" and isinstance(element.get("text"), str):
            users |= user_ids_in(element["text"])
            channels |= unlabelled_channels_in(element["text"])
    return users, channels


def _kind(node: Mapping[str, Any]) -> str:
    """A block's or element's ``type``; ``""`` when it is missing or not a string (broken payloads)."""
    kind = node.get("type")
    return kind if isinstance(kind, str) else ""


def _walk(node: Any, depth: int) -> Iterable[Mapping[str, Any]]:
    if depth > _MAX_DEPTH:
        return
    if isinstance(node, list):
        for item in node:
            yield from _walk(item, depth + 1)
    elif isinstance(node, Mapping):
        yield node
        for key in ("elements", "fields"):
            if key in node:
                yield from _walk(node[key], depth + 1)
        if isinstance(node.get("text"), Mapping):
            yield node["text"]


# -- layout blocks ------------------------------------------------------------------------------


def _block(block: Mapping[str, Any], names: Names) -> str:
    kind = block.get("type")
    if kind == "rich_text":
        return _rich_text(block.get("elements"), names, 0)
    if kind == "markdown":
        # The bot's own posts: read back the way they always were (mentions named, entities unescaped).
        return render_text(str(block.get("text") or ""), names)
    if kind == "header":
        title = _text_object(block.get("text"), names)
        return f"**{title}**" if title else ""
    if kind == "section":
        lines = [_text_object(block.get("text"), names)]
        fields = block.get("fields")
        if isinstance(fields, list):
            lines += [_text_object(f, names) for f in fields]
        return "\n".join(line for line in lines if line)
    if kind == "context":
        elements = block.get("elements")
        if not isinstance(elements, list):
            return ""
        return " ".join(t for t in (_text_object(e, names) for e in elements) if t)
    if kind in ("image", "video"):
        title = _text_object(block.get("title"), names) or str(block.get("alt_text") or "").strip()
        return f"[{kind}: {title}]" if title else f"[{kind}]"
    return ""


def _text_object(value: Any, names: Names) -> str:
    """A composition text object (``mrkdwn`` or ``plain_text``); image elements and the like give ``""``."""
    if not isinstance(value, Mapping):
        return ""
    text = value.get("text")
    if not isinstance(text, str):
        return ""
    if value.get("type") == "mrkdwn":
        return render_text(text, names).strip()
    if value.get("type") == "plain_text":
        return text.strip()
    return ""


# -- rich text -------------------------------------------------------------------------------------


def _rich_text(elements: Any, names: Names, depth: int) -> str:
    if not isinstance(elements, list) or depth > _MAX_DEPTH:
        return ""
    parts: list[str] = []
    for element in elements:
        if not isinstance(element, Mapping):
            continue
        kind = element.get("type")
        if kind == "rich_text_section":
            parts.append(_inline(element.get("elements"), names))
        elif kind == "rich_text_preformatted":
            code = _inline(element.get("elements"), names, code=True).strip("\n")
            parts.append(f"```\n{code}\n```")
        elif kind == "rich_text_quote":
            quoted = _inline(element.get("elements"), names).strip("\n")
            parts.append("\n".join("> " + line if line else ">" for line in quoted.split("\n")))
        elif kind == "rich_text_list":
            parts.append(_list(element, names, depth))
        else:
            parts.append(_inline([element], names))
    return "\n".join(p.rstrip("\n") for p in parts if p.strip())


def _list(element: Mapping[str, Any], names: Names, depth: int) -> str:
    items = element.get("elements")
    if not isinstance(items, list):
        return ""
    indent = "  " * _int(element.get("indent"))
    ordered = element.get("style") == "ordered"
    start = _int(element.get("offset"))
    lines = []
    for number, item in enumerate(items, start=start + 1):
        marker = f"{number}." if ordered else "-"
        body = _rich_text([item], names, depth + 1) if isinstance(item, Mapping) else ""
        body = body.replace("\n", "\n" + indent + "  ")
        lines.append(f"{indent}{marker} {body}")
    return "\n".join(lines)


def _inline(elements: Any, names: Names, *, code: bool = False) -> str:
    if not isinstance(elements, list):
        return ""
    return "".join(_element(e, names, code=code) for e in elements if isinstance(e, Mapping))


def _element(element: Mapping[str, Any], names: Names, *, code: bool) -> str:
    kind = element.get("type")
    if kind == "text":
        text = str(element.get("text") or "")
        return text if code else _styled(text, element.get("style"))
    if kind == "link":
        url = str(element.get("url") or "")
        label = str(element.get("text") or "").strip()
        shown = url if not label or label == url else f"[{label}]({url})"
        return shown if code else _styled(shown, element.get("style"), link=True)
    if kind == "user":
        return "@" + (names.users.get(str(element.get("user_id")), "").strip() or "someone")
    if kind == "usergroup":
        return "@" + (names.groups.get(str(element.get("usergroup_id")), "").strip() or "a-group")
    if kind == "channel":
        return "#" + (names.channels.get(str(element.get("channel_id")), "").strip() or "a-channel")
    if kind == "message_mention":
        channel = names.channels.get(str(element.get("channel_id")), "").strip() or "a-channel"
        return f"(a message in #{channel})"
    if kind == "broadcast":
        scope = str(element.get("range") or "")
        return "@" + scope if scope in _BROADCASTS else "@here"
    if kind == "emoji":
        name = str(element.get("name") or "").strip()
        return f":{name}:" if name else ""
    if kind == "date":
        return _date(element)
    if kind == "color":
        return str(element.get("value") or "")
    # Unknown inline element (team, canvas, …): its visible text if it has one, never its IDs.
    visible = element.get("text")
    return visible if isinstance(visible, str) else ""


def _styled(text: str, style: Any, *, link: bool = False) -> str:
    if not isinstance(style, Mapping) or not text.strip():
        return text
    # Markers hug the words: "**bold **" is not bold in Markdown.
    lead = text[: len(text) - len(text.lstrip())]
    trail = text[len(text.rstrip()) :]
    core = text.strip()
    if style.get("code") and not link:
        core = f"`{core}`"
    if style.get("bold"):
        core = f"**{core}**"
    if style.get("italic"):
        core = f"_{core}_"
    if style.get("strike"):
        core = f"~~{core}~~"
    return lead + core + trail


def _date(element: Mapping[str, Any]) -> str:
    fallback = element.get("fallback")
    if isinstance(fallback, str) and fallback.strip():
        return fallback.strip()
    stamp = element.get("timestamp")
    try:
        moment = datetime.fromtimestamp(float(stamp), tz=UTC)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError, OSError):
        return "a date"
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def _int(value: Any) -> int:
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0
