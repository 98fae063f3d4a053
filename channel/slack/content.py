"""One Slack message's full content for the model: what a person reading it sees.

- The body: the message's blocks when they hold text (Slack clients draw blocks;
  ``text`` is the notification fallback), else its ``text``.
- Forwarded and shared messages (attachments with ``is_share``, or a message link
  Slack expanded, ``is_msg_unfurl``): who wrote the original, where, when, and its
  content (``message_blocks``, else the attachment's ``text``, else ``fallback``),
  quoted. Their files join the message's files. Nested shares stop at a few levels.
- Link previews (unfurls): title, link and a short excerpt.
- Other attachments (integrations): pretext, title, text and fields.

Names come from :class:`~channel.slack.render.Names`; the permalink of a shared
message (``from_url``) is left out, since it addresses another conversation.
:func:`references` lists the IDs to resolve first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .blocks import block_refs, render_blocks
from .render import Names, labels_in, render_text, unlabelled_channels_in, user_ids_in

__all__ = [
    "References",
    "file_stubs",
    "message_files",
    "references",
    "render_message",
    "shared_file_ids",
    "shared_in",
    "with_files",
]

#: Characters of a link preview's text shown ("briefly").
UNFURL_CHARS = 280
#: A share inside a share inside a share is shown; deeper ones are summarised.
_MAX_SHARE_DEPTH = 3


@dataclass(slots=True)
class References:
    """IDs a message refers to: users and channels to look up, labels the text already gives."""

    users: set[str] = field(default_factory=set)
    channels: set[str] = field(default_factory=set)
    channel_labels: dict[str, str] = field(default_factory=dict)
    group_labels: dict[str, str] = field(default_factory=dict)

    def add(self, other: References) -> None:
        self.users |= other.users
        self.channels |= other.channels
        self.channel_labels.update(other.channel_labels)
        self.group_labels.update(other.group_labels)


def references(message: Mapping[str, Any]) -> References:
    """Every user and channel ``message`` shows, so names can be resolved before rendering.
    Channels named by a label somewhere in the message need no lookup."""
    refs = References()
    if isinstance(message.get("user"), str) and message["user"]:
        refs.users.add(message["user"])
    _collect(message, refs, 0)
    refs.channels -= set(refs.channel_labels)
    return refs


def _collect(message: Mapping[str, Any], refs: References, depth: int) -> None:
    _collect_text(str(message.get("text") or ""), refs)
    users, channels = block_refs(message.get("blocks"))
    refs.users |= users
    refs.channels |= channels
    if depth >= _MAX_SHARE_DEPTH:
        return
    for att in _attachments(message):
        for key in ("text", "pretext", "title", "fallback"):
            _collect_text(str(att.get(key) or ""), refs)
        for item in _fields(att):
            _collect_text(str(item.get("value") or ""), refs)
        if isinstance(att.get("author_id"), str) and att["author_id"] and not _author_label(att):
            refs.users.add(att["author_id"])
        channel_id = att.get("channel_id")
        if isinstance(channel_id, str) and channel_id:
            name = att.get("channel_name")
            if isinstance(name, str) and name.strip():
                refs.channel_labels[channel_id] = name.strip().lstrip("#")
            else:
                refs.channels.add(channel_id)
        users, channels = block_refs(att.get("blocks"))
        refs.users |= users
        refs.channels |= channels
        for inner in _shared_messages(att):
            _collect(inner, refs, depth + 1)


def _collect_text(text: str, refs: References) -> None:
    if not text:
        return
    refs.users |= user_ids_in(text)
    refs.channels |= unlabelled_channels_in(text)
    channels, groups = labels_in(text)
    refs.channel_labels.update(channels)
    refs.group_labels.update(groups)


def render_message(message: Mapping[str, Any], names: Names) -> str:
    """The message as Markdown for the model: body, then shared messages and link previews."""
    return _render(message, names, 0)


def _render(message: Mapping[str, Any], names: Names, depth: int) -> str:
    parts = [_body(message, names)]
    for att in _attachments(message):
        parts.append(_attachment(att, names, depth))
    return "\n\n".join(p for p in parts if p.strip())


def _body(message: Mapping[str, Any], names: Names) -> str:
    shown = render_blocks(message.get("blocks"), names)
    if shown.strip():
        return shown
    return render_text(str(message.get("text") or ""), names)


def message_files(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The message's own files, then those of the messages it shares, once each (by ``id``)."""
    seen: set[str] = set()
    found: list[Mapping[str, Any]] = []
    for file in _files_of(message, 0):
        file_id = file.get("id")
        if isinstance(file_id, str) and file_id and file_id not in seen:
            seen.add(file_id)
            found.append(file)
    return found


def file_stubs(message: Mapping[str, Any]) -> set[str]:
    """IDs of the message's files (shared ones included) that Slack sent only as a stub
    (``file_access: "check_file_info"``, Slack Connect): ``files.info`` knows the rest."""
    return {
        str(f["id"])
        for f in message_files(message)
        if f.get("file_access") == "check_file_info" and isinstance(f.get("id"), str)
    }


def shared_file_ids(message: Mapping[str, Any]) -> set[str]:
    """IDs of the files ``message`` carries only inside forwarded or linked messages, not on itself.

    Anyone can post an attachment that claims to share a file, so such a file gets a handle only
    when ``files.info`` shows it shared in this conversation (see :func:`shared_in`)."""
    own = {str(f.get("id")) for f in _files_of({"files": message.get("files")}, _MAX_SHARE_DEPTH)}
    return {
        str(f["id"])
        for f in message_files(message)
        if isinstance(f.get("id"), str) and f["id"] and f["id"] not in own
    }


def shared_in(info: Mapping[str, Any], channel: str) -> bool:
    """Whether a ``files.info`` file object shows the file shared in ``channel``
    (``channels``/``groups``/``ims``, or a key of ``shares.public``/``shares.private``)."""
    if not channel:
        return False
    for key in ("channels", "groups", "ims"):
        listed = info.get(key)
        if isinstance(listed, list) and channel in listed:
            return True
    shares = info.get("shares")
    if isinstance(shares, Mapping):
        for bucket in ("public", "private"):
            where = shares.get(bucket)
            if isinstance(where, Mapping) and channel in where:
                return True
    return False


def with_files(message: Mapping[str, Any], resolved: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any]:
    """``message`` with every file object whose ID is in ``resolved`` replaced by that object,
    in shared messages too; the original is left untouched."""
    if not resolved:
        return message
    return _replace_files(message, resolved, 0)


def _replace_files(
    message: Mapping[str, Any], resolved: Mapping[str, Mapping[str, Any]], depth: int
) -> dict[str, Any]:
    out = dict(message)
    if isinstance(message.get("files"), list):
        out["files"] = [_resolved(f, resolved) for f in message["files"]]
    if depth < _MAX_SHARE_DEPTH and isinstance(message.get("attachments"), list):
        attachments: list[Any] = []
        for att in message["attachments"]:
            if isinstance(att, Mapping) and _is_share(att):
                att = dict(att)
                if isinstance(att.get("files"), list):
                    att["files"] = [_resolved(f, resolved) for f in att["files"]]
                if isinstance(att.get("message_blocks"), list):
                    att["message_blocks"] = [
                        {**e, "message": _replace_files(e["message"], resolved, depth + 1)}
                        if isinstance(e, Mapping) and isinstance(e.get("message"), Mapping)
                        else e
                        for e in att["message_blocks"]
                    ]
            attachments.append(att)
        out["attachments"] = attachments
    return out


def _resolved(file: Any, resolved: Mapping[str, Mapping[str, Any]]) -> Any:
    if isinstance(file, Mapping) and isinstance(file.get("id"), str):
        return resolved.get(file["id"], file)
    return file


def _files_of(message: Mapping[str, Any], depth: int) -> Iterable[Mapping[str, Any]]:
    files = message.get("files")
    if isinstance(files, list):
        yield from (f for f in files if isinstance(f, Mapping))
    if depth >= _MAX_SHARE_DEPTH:
        return
    for att in _attachments(message):
        if _is_share(att):
            att_files = att.get("files")
            if isinstance(att_files, list):
                yield from (f for f in att_files if isinstance(f, Mapping))
            for inner in _shared_messages(att):
                yield from _files_of(inner, depth + 1)


# -- attachments ---------------------------------------------------------------------------------


def _attachments(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    attachments = message.get("attachments")
    if not isinstance(attachments, list):
        return []
    return [a for a in attachments if isinstance(a, Mapping)]


def _is_share(att: Mapping[str, Any]) -> bool:
    return bool(att.get("is_share") or att.get("is_msg_unfurl"))


def _shared_messages(att: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The original messages a share carries (``message_blocks[].message``)."""
    entries = att.get("message_blocks")
    found = []
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, Mapping) and isinstance(entry.get("message"), Mapping):
            found.append(entry["message"])
    return found


def _attachment(att: Mapping[str, Any], names: Names, depth: int) -> str:
    if _is_share(att):
        return _share(att, names, depth)
    if att.get("original_url") or att.get("from_url") or att.get("service_name"):
        return _unfurl(att, names)
    return _integration(att, names)


def _share(att: Mapping[str, Any], names: Names, depth: int) -> str:
    kind = "Forwarded message" if att.get("is_share") else "Linked message"
    # The name Slack draws on the share itself; looked up only when the share carries none.
    author_id = str(att.get("author_id") or "")
    author = _author_label(att) or (names.users.get(author_id, "").strip() if author_id else "") or "someone"
    header = f"{kind} from {author}"
    channel_id = str(att.get("channel_id") or "")
    channel = names.channels.get(channel_id, "").strip() if channel_id else ""
    channel = channel or _plain(att.get("channel_name")).lstrip("#")
    if channel:
        header += f" in #{channel}"
    when = _iso(att.get("ts"))
    if when:
        header += f", {when}"
    if depth >= _MAX_SHARE_DEPTH:
        return _quote(f"{header} (nested too deep to show)")
    originals = _shared_messages(att)
    body = "\n\n".join(b for b in (_render(m, names, depth + 1) for m in originals) if b.strip())
    if not body.strip():
        body = render_text(str(att.get("text") or ""), names).strip() or _plain(att.get("fallback"))
    files = [str(f.get("name") or f.get("title") or "a file") for f in _share_files(att)]
    if files:
        body += ("\n" if body else "") + "(attached: " + ", ".join(files) + ")"
    return _quote(f"{header}:\n{body}" if body else f"{header} (no text)")


def _author_label(att: Mapping[str, Any]) -> str:
    return _plain(att.get("author_name")) or _plain(att.get("author_subname"))


def _share_files(att: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    files = att.get("files")
    return [f for f in files if isinstance(f, Mapping)] if isinstance(files, list) else []


def _unfurl(att: Mapping[str, Any], names: Names) -> str:
    title = render_text(str(att.get("title") or ""), names).strip()
    link = str(att.get("title_link") or att.get("original_url") or att.get("from_url") or "")
    service = _plain(att.get("service_name"))
    text = render_text(str(att.get("text") or ""), names).strip()
    if not title and not text:
        return ""
    head = f"[{title}]({link})" if title and link else (title or link)
    header = f"Link preview ({service}): {head}" if service else f"Link preview: {head}"
    lines = [header]
    if text:
        lines.append(_brief(text))
    return _quote("\n".join(lines))


def _integration(att: Mapping[str, Any], names: Names) -> str:
    lines: list[str] = []
    for key in ("pretext", "author_name"):
        value = render_text(str(att.get(key) or ""), names).strip()
        if value:
            lines.append(value)
    title = render_text(str(att.get("title") or ""), names).strip()
    link = str(att.get("title_link") or "")
    if title:
        lines.append(f"**[{title}]({link})**" if link else f"**{title}**")
    text = render_text(str(att.get("text") or ""), names).strip()
    if text:
        lines.append(text)
    for item in _fields(att):
        name = _plain(item.get("title"))
        value = render_text(str(item.get("value") or ""), names).strip()
        if name or value:
            lines.append(f"{name}: {value}" if name else value)
    blocks = render_blocks(att.get("blocks"), names)
    if blocks.strip():
        lines.append(blocks)
    if not lines:
        fallback = _plain(att.get("fallback"))
        if fallback:
            lines.append(fallback)
    return _quote("\n".join(lines)) if lines else ""


def _fields(att: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    fields = att.get("fields")
    return [f for f in fields if isinstance(f, Mapping)] if isinstance(fields, list) else []


# -- helpers -------------------------------------------------------------------------------------


def _quote(text: str) -> str:
    return "\n".join("> " + line if line.strip() else ">" for line in text.strip("\n").split("\n"))


def _brief(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= UNFURL_CHARS else flat[: UNFURL_CHARS - 1].rstrip() + "…"


def _plain(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _iso(ts: Any) -> str:
    try:
        moment = datetime.fromtimestamp(float(ts), tz=UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return ""
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")
