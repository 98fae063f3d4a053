"""The workspace as the page shows it: conversations, threads and messages as JSON, Markdown as HTML.

Rendering happens here, server-side, so the page needs no Markdown library:
Slack's ``<@U…>``/``<url|label>``/``<!here>`` constructs become readable Markdown,
then markdown-it (raw HTML off, so nothing a message says can inject markup)
turns it into HTML. Block Kit buttons are described generically — any element of
an ``actions`` or ``context_actions`` block with an ``action_id`` — so a click on
any of them becomes the ``block_actions`` interaction Slack would send.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from markdown_it import MarkdownIt

from threadbound_emulator import Workspace
from threadbound_emulator.wire import JSON, ts_key

_md = MarkdownIt("commonmark", {"html": False, "breaks": True}).enable(["table", "strikethrough"])


def _image_as_link(self: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
    """``![alt](url)`` as a link, never an ``<img>``: showing a message fetches nothing remote
    (an image URL can carry data out, as Slack's unfurler would fetch it)."""
    token = tokens[idx]
    src = html.escape(str(token.attrGet("src") or ""))
    alt = html.escape(self.renderInlineAsText(token.children or [], options, env) or "image")
    return f'<a href="{src}" rel="noreferrer">🖼 {alt}</a>'


_md.add_render_rule("image", _image_as_link)
_CONSTRUCT = re.compile(r"<([^<>]*)>|&(lt|gt|amp);")
_ENTITIES = {"lt": "<", "gt": ">", "amp": "&"}
#: Emoji by shortcode: every one the app writes itself (a test keeps it so) and the common ones a
#: model uses; others show as ``:name:``, as Slack's fallback does.
EMOJI = {
    "grey_question": "❔",
    "grey_exclamation": "❕",
    "heavy_minus_sign": "➖",
    "heavy_plus_sign": "➕",
    "large_green_circle": "🟢",
    "large_yellow_circle": "🟡",
    "red_circle": "🔴",
    "arrow_right": "➡️",
    "point_right": "👉",
    "star": "⭐",
    "zap": "⚡",
    "clap": "👏",
    "muscle": "💪",
    "100": "💯",
    "package": "📦",
    "chart_with_upwards_trend": "📈",
    "hammer_and_wrench": "🛠️",
    "gear": "⚙️",
    "construction": "🚧",
    "checkered_flag": "🏁",
    "pushpin": "📌",
    "envelope": "✉️",
    "alarm_clock": "⏰",
    "see_no_evil": "🙈",
    "joy": "😂",
    "grinning": "😀",
    "confused": "😕",
    "eyes": "👀",
    "white_check_mark": "✅",
    "heavy_check_mark": "✔️",
    "x": "❌",
    "thumbsup": "👍",
    "+1": "👍",
    "thumbsdown": "👎",
    "-1": "👎",
    "tada": "🎉",
    "rocket": "🚀",
    "warning": "⚠️",
    "hourglass_flowing_sand": "⏳",
    "hourglass": "⌛",
    "thinking_face": "🤔",
    "memo": "📝",
    "bulb": "💡",
    "fire": "🔥",
    "heart": "❤️",
    "wave": "👋",
    "pray": "🙏",
    "raised_hands": "🙌",
    "ok_hand": "👌",
    "question": "❓",
    "exclamation": "❗",
    "sparkles": "✨",
    "robot_face": "🤖",
    "mag": "🔍",
    "books": "📚",
    "calendar": "📆",
    "bug": "🐛",
    "smile": "😄",
    "slightly_smiling_face": "🙂",
    "raised_hand": "✋",
    "no_entry": "⛔",
    "no_entry_sign": "🚫",
    "stopwatch": "⏱️",
    "lock": "🔒",
    "clipboard": "📋",
    "link": "🔗",
    "speech_balloon": "💬",
    "page_facing_up": "📄",
}


@dataclass
class Retraction:
    """A bot message the app deleted: the page keeps a greyed trace of what it said."""

    channel: str
    ts: str
    thread_ts: str
    text: str


@dataclass
class ViewState:
    """What the page adds to the workspace: retractions seen, and the people one can type as."""

    people: list[str]
    retractions: list[Retraction] = field(default_factory=list)
    #: (conversation, thread) → how many statuses had been set when the bot last posted there: as in
    #: Slack, the bot's post clears the thread's status ("is thinking…" never outlives the answer).
    posts: dict[tuple[str, str], int] = field(default_factory=dict)
    #: (from this ts on, the demo clock's offset) for each fast-forward: messages are shown at the
    #: demo clock's time, so their stamps agree with it.
    shifts: list[tuple[float, float]] = field(default_factory=list)
    #: Conversation → the agent file profile it runs under (``app.agent.profiles``).
    profiles: dict[str, str] = field(default_factory=dict)

    def shown_at(self, ts: str) -> float:
        """When a message of ``ts`` was posted by the demo clock (its real time plus the offset then)."""
        at = float(ts)
        offset = next((o for since, o in reversed(self.shifts) if at >= since), 0.0)
        return at + offset


def _date(target: str, fallback: str) -> str:
    """``<!date^TS^FORMAT|fallback>`` as Slack shows it, its time (UTC here) rather than the fallback,
    which only clients that cannot render dates show (a card's "open until in a while")."""
    try:
        when = datetime.fromtimestamp(int(target.split("^")[1]), UTC)
    except (IndexError, ValueError, OverflowError, OSError):
        return fallback
    return f"{when:%b} {when.day}, {when:%Y} at {when:%H:%M} UTC"


def slack_to_markdown(text: str, names: Mapping[str, str]) -> str:
    """Slack's ``<…>`` constructs as Markdown people read (``@name``, ``[label](url)``), entities
    unescaped in the same pass so an escaped ``&lt;@U1&gt;`` stays literal."""

    def replace(match: re.Match[str]) -> str:
        if match.group(2):
            return _ENTITIES[match.group(2)]
        body = match.group(1)
        target, _, label = body.partition("|")
        if target.startswith("@"):
            return f"@{names.get(target[1:], label or target[1:])}"
        if target.startswith("#"):
            return f"#{label or target[1:]}"
        if target.startswith("!"):
            special = target[1:].split("^")[0]
            if special in ("here", "channel", "everyone", "subteam"):
                return f"@{label or special}"
            if special == "date":
                return _date(target, label)
            return label or special
        if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", target):
            return f"[{label}]({target})" if label else f"<{target}>"
        return match.group(0)

    return _CONSTRUCT.sub(replace, text)


_SHORTCODE = re.compile(r":([a-z0-9_+'-]+):")
_CODE = re.compile(r"```(.*?)```|(`[^`\n]+`)", re.DOTALL)
_BOLD = re.compile(r"(?<![*\w])\*(?![\s*])([^*\n]+?)(?<!\s)\*(?![*\w])")
_ITALIC = re.compile(r"(?<![\w_])_(?![\s_])([^_\n]+?)(?<!\s)_(?![\w_])")
_STRIKE = re.compile(r"(?<![~\w])~(?![\s~])([^~\n]+?)(?<!\s)~(?![~\w])")


def _emoji(text: str) -> str:
    return _SHORTCODE.sub(lambda m: EMOJI.get(m.group(1), m.group(0)), text)


def mrkdwn_to_markdown(text: str, names: Mapping[str, str]) -> str:
    """Slack's mrkdwn (``*bold*``, ``_italic_``, ``~strike~``, ```` ```code``` ```` anywhere on a
    line, ``:emoji:``) as Markdown; code is left as it is."""
    out: list[str] = []
    last = 0
    plain = slack_to_markdown(text, names)
    for match in _CODE.finditer(plain):
        out.append(_mrkdwn_span(plain[last : match.start()]))
        if match.group(1) is not None:
            out.append("\n\n```\n" + match.group(1).strip("\n") + "\n```\n\n")
        else:
            out.append(match.group(2))
        last = match.end()
    out.append(_mrkdwn_span(plain[last:]))
    return "".join(out)


def _mrkdwn_span(text: str) -> str:
    text = _BOLD.sub(r"**\1**", text)
    text = _ITALIC.sub(r"*\1*", text)
    return _emoji(_STRIKE.sub(r"~~\1~~", text))


def markdown_html(text: str, names: Mapping[str, str]) -> str:
    """Markdown (a ``markdown`` block, ``markdown_text``, a canvas) as HTML."""
    return _md.render(_emoji(slack_to_markdown(text, names)))


def mrkdwn_html(text: str, names: Mapping[str, str]) -> str:
    """Slack mrkdwn (a person's message, ``text``, ``mrkdwn`` text objects) as HTML."""
    return _md.render(mrkdwn_to_markdown(text, names))


def _text_html(obj: Any, names: Mapping[str, str]) -> str:
    """A Block Kit text object as HTML: ``plain_text`` literally, ``mrkdwn`` as mrkdwn."""
    if not isinstance(obj, Mapping):
        return ""
    text = str(obj.get("text") or "")
    if obj.get("type") == "plain_text":
        return html.escape(text)
    return mrkdwn_html(text, names)


def _text_of(element: Any) -> str:
    if isinstance(element, Mapping):
        return str(element.get("text") or "")
    return ""


def _buttons(block: Mapping[str, Any]) -> list[JSON]:
    """The clickable elements of one block, each with what its click sends."""
    out: list[JSON] = []
    block_id = str(block.get("block_id") or "")
    for element in block.get("elements") or []:
        if not isinstance(element, Mapping) or not element.get("action_id"):
            continue
        kind = str(element.get("type") or "")
        base = {"action_id": str(element["action_id"]), "block_id": block_id, "type": kind}
        if kind == "feedback_buttons":
            for side, icon in (("positive_button", "👍"), ("negative_button", "👎")):
                button = element.get(side)
                if isinstance(button, Mapping):
                    label = _text_of(button.get("text")) or side
                    out.append({**base, "value": str(button.get("value") or ""), "label": f"{icon} {label}"})
            continue
        label = _text_of(element.get("text")) or kind
        out.append(
            {**base, "value": str(element.get("value") or ""), "label": label, "style": element.get("style")}
        )
    return out


def _input(block: Mapping[str, Any]) -> JSON | None:
    """One ``input`` block as the page draws a field of a card (an MCP server's form)."""
    element = block.get("element")
    if not isinstance(element, Mapping):
        return None
    kind = {
        "plain_text_input": "text",
        "number_input": "number",
        "static_select": "select",
        "multi_static_select": "multiselect",
    }.get(str(element.get("type") or ""))
    if kind is None:
        return None
    options = [
        {"value": str(o.get("value") or ""), "label": _text_of(o.get("text"))}
        for o in element.get("options") or []
        if isinstance(o, Mapping)
    ]
    initial = element.get("initial_value")
    if isinstance(element.get("initial_option"), Mapping):
        initial = element["initial_option"].get("value")
    if isinstance(element.get("initial_options"), list):
        initial = "\n".join(str(o.get("value")) for o in element["initial_options"] if isinstance(o, Mapping))
    return {
        "block_id": str(block.get("block_id") or ""),
        "label": _text_of(block.get("label")),
        "hint": _text_of(block.get("hint")),
        "kind": kind,
        "options": options,
        "initial": str(initial or ""),
        "optional": bool(block.get("optional")),
    }


def _inputs(message: Mapping[str, Any]) -> list[JSON]:
    """The fields of the message's ``input`` blocks, in order (a click sends what they hold)."""
    blocks = [b for b in message.get("blocks") or [] if isinstance(b, Mapping) and b.get("type") == "input"]
    return [field for b in blocks if (field := _input(b)) is not None]


def _body(message: Mapping[str, Any], names: Mapping[str, str]) -> tuple[str, list[JSON]]:
    """The message's HTML and its buttons, from its blocks when it has renderable ones."""
    parts: list[str] = []
    buttons: list[JSON] = []
    for block in message.get("blocks") or []:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "markdown":
            parts.append(markdown_html(str(block.get("text") or ""), names))
        elif kind == "header":
            parts.append(f"<h3>{_text_html(block.get('text'), names)}</h3>")
        elif kind == "section":
            parts.append(_text_html(block.get("text"), names))
            for fld in block.get("fields") or []:
                parts.append(_text_html(fld, names))
        elif kind == "context":
            small = "".join(_text_html(e, names) for e in block.get("elements") or [])
            if small:
                parts.append(f'<div class="context">{small}</div>')
        elif kind == "divider":
            parts.append("<hr>")
        if kind in ("actions", "context_actions"):
            buttons += _buttons(block)
    if not parts:
        parts.append(mrkdwn_html(str(message.get("text") or ""), names))
    return "".join(parts), buttons


def message_view(ws: Workspace, channel: str, message: Mapping[str, Any], names: Mapping[str, str]) -> JSON:
    user = str(message.get("user") or "")
    bot = ws.is_bots(dict(message))
    html, buttons = _body(message, names)
    stream = ws.streams.get((channel, str(message["ts"])))
    files: list[JSON] = []
    for f in message.get("files") or []:
        fid = str(f.get("id") or "")
        if fid in ws.canvases:
            files.append({"id": fid, "name": ws.canvases[fid].title, "canvas": True})
        elif fid in ws.files:
            stored = ws.files[fid]
            files.append(
                {
                    "id": fid,
                    "name": stored.name,
                    "url": f"/files/{fid}/{quote(stored.name)}",
                    "image": stored.mimetype.startswith("image/"),
                    "size": stored.size,
                }
            )
    reactions = [
        {
            "name": r["name"],
            "emoji": EMOJI.get(r["name"], f":{r['name']}:"),
            "count": r["count"],
            "who": [names.get(u, u) for u in r["users"]],
        }
        for r in message.get("reactions") or []
    ]
    return {
        "ts": message["ts"],
        "thread_ts": message.get("thread_ts") or "",
        "user": user,
        "name": ws.bot_name if bot else names.get(user, user),
        "bot": bot,
        "html": html,
        "buttons": buttons,
        "inputs": _inputs(message),
        "files": files,
        "reactions": reactions,
        "edited": "edited" in message,
        "deleted": message.get("subtype") == "tombstone",
        "streaming": stream is not None and stream.state == "streaming",
        # The run's tool steps shown in its streamed answer (chat.appendStream task updates), in order.
        "steps": [{"title": title, "status": status} for title, status in stream.tasks.values()]
        if stream is not None
        else [],
        "retracted": False,
    }


def _statuses(ws: Workspace, state: ViewState, channel: str) -> dict[str, str]:
    """The progress status showing under each thread now: the last one set, unless it was cleared
    (an empty one) or the bot posted in the thread since (Slack clears it then)."""
    out: dict[str, str] = {}
    for index, status in enumerate(ws.statuses):
        if status.channel_id != channel:
            continue
        thread = ws.thread(channel, status.thread_ts)
        root = thread[0]["ts"] if thread else status.thread_ts
        if status.status and state.posts.get((channel, status.thread_ts), 0) <= index:
            out[root] = status.status
        else:
            out.pop(root, None)
    return out


def snapshot(ws: Workspace, state: ViewState, version: int) -> JSON:
    """Everything the page shows, in one JSON document."""
    names = {uid: (u.display_name or u.real_name or u.name) for uid, u in ws.users.items()}
    conversations: list[JSON] = []
    for chan in ws.channels.values():
        views = [message_view(ws, chan.id, m, names) for m in ws.stored(chan.id)]
        for gone in state.retractions:
            # An empty one was a placeholder (a stream that never got text): nothing was ever shown.
            if gone.channel == chan.id and gone.text.strip():
                views.append(
                    {
                        "ts": gone.ts,
                        "thread_ts": gone.thread_ts,
                        "user": ws.bot_user_id,
                        "name": ws.bot_name,
                        "bot": True,
                        "html": markdown_html(gone.text, names),
                        "buttons": [],
                        "files": [],
                        "reactions": [],
                        "edited": False,
                        "deleted": False,
                        "streaming": False,
                        "steps": [],
                        "retracted": True,
                    }
                )
        views.sort(key=lambda v: ts_key(v["ts"]))
        for v in views:
            v["shown_at"] = state.shown_at(v["ts"])
        roots = [v for v in views if not v["thread_ts"] or v["thread_ts"] == v["ts"]]
        for root in roots:
            root["replies"] = [v for v in views if v["thread_ts"] == root["ts"] and v is not root]
        canvases = [
            {"id": c.id, "title": c.title, "html": markdown_html(c.markdown, names)}
            for c in ws.canvases.values()
            if c.channel_id == chan.id or any(chan.id in a.get("channel_ids", []) for a in c.access)
        ]
        # Notes only one person sees (chat.postEphemeral): the page shows each to its person only.
        ephemerals = [
            {"user": user, "thread_ts": thread_ts, "html": markdown_html(text, names)} | _links(text)
            for channel, user, thread_ts, text in ws.ephemerals
            if channel == chan.id
        ]
        conversations.append(
            {
                "id": chan.id,
                "ephemerals": ephemerals,
                "name": chan.name,
                "dm": chan.is_im,
                "person": chan.user or "",
                "messages": roots,
                "statuses": _statuses(ws, state, chan.id),
                # assistant.threads.setTitle (the agent view titles a DM thread): the latest per thread.
                "titles": {ts: title for channel, ts, title in ws.titles if channel == chan.id},
                # agents.sessions.*: each thread's agent session (its status; Stop while processing).
                "sessions": {
                    ts: {"status": s.status, "title": s.title}
                    for (channel, ts), s in ws.sessions.items()
                    if channel == chan.id
                },
                "canvases": canvases,
                "profile": state.profiles.get(chan.id, ""),
            }
        )
    return {
        "version": version,
        "bot": {"id": ws.bot_user_id, "name": ws.bot_name},
        "people": [{"id": uid, "name": names[uid]} for uid in state.people],
        "conversations": conversations,
    }


__all__ = [
    "EMOJI",
    "Retraction",
    "ViewState",
    "markdown_html",
    "message_view",
    "slack_to_markdown",
    "snapshot",
]


def _links(text: str) -> dict[str, list[str]]:
    """``{"links": […]}``: the links in a private note, which the page offers to open as its person
    (the emulator's browser); empty when it has none."""
    links = re.findall(r"https?://[^\s<>|]+", text)
    return {"links": links} if links else {}
