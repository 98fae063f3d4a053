"""One person's usage, follow-ups and tasks (``app.intake.personal``) drawn as Block Kit, for the slash
command's private answers and the App Home tab alike; the cancel buttons' ``action_id``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from storage.base import FollowUpRecord, PersonTask

from .personal import Usage, cancel_value

#: ``action_id`` of a follow-up's cancel button (``app.intake.interactions`` routes its clicks).
CANCEL_FOLLOW_UP = "threadbound_cancel_follow_up"
#: A thread's link: ``(channel, thread_ts) → URL`` (None when it cannot be built).
Links = Callable[[str, str], str | None]
Block = dict[str, Any]
#: Characters of a follow-up's note shown beside it.
_NOTE_CHARS = 120


def when(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def section(markdown: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": markdown[:3000]}}


def header(text: str) -> Block:
    return {"type": "header", "text": {"type": "plain_text", "text": text[:150]}}


def _where(links: Links, channel: str, thread_ts: str, label: str) -> str:
    link = links(channel, thread_ts)
    return f"<{link}|{label}>" if link else label


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _task_where(links: Links, task: PersonTask) -> str:
    """A task as a link to its conversation: a thread in a channel, or a direct message."""
    if task.channel.startswith("D"):
        return _where(links, task.channel, task.thread_ts, "a direct message")
    return f"{_where(links, task.channel, task.thread_ts, 'a thread')} in <#{task.channel}>"


def usage_blocks(usage: Usage) -> list[Block]:
    return [section(usage.line())]


def follow_up_blocks(records: Sequence[FollowUpRecord], links: Links) -> list[Block]:
    """One section per pending follow-up (when, where, the note's first words) with a cancel button."""
    if not records:
        return [section("You have no pending follow-ups.")]
    blocks: list[Block] = []
    for record in records:
        note = record.note if len(record.note) <= _NOTE_CHARS else record.note[: _NOTE_CHARS - 1] + "…"
        where = _where(links, record.channel, record.thread_ts, "in its thread")
        blocks.append(
            {
                "type": "section",
                "block_id": f"follow_up {record.follow_up}",
                "text": {"type": "mrkdwn", "text": f"*{when(record.due_at)}* {where}: {_escape(note)}"},
                "accessory": {
                    "type": "button",
                    "action_id": CANCEL_FOLLOW_UP,
                    "text": {"type": "plain_text", "text": "Cancel"},
                    "value": cancel_value(record),
                    "style": "danger",
                },
            }
        )
    return blocks


def task_blocks(tasks: Sequence[PersonTask], links: Links) -> list[Block]:
    if not tasks:
        return [section("No tasks of yours in the last 7 days. Mention the app or message it to start one.")]
    lines = [f"• {_task_where(links, t)} — last asked {when(t.last_at)}" for t in tasks]
    return [section("\n".join(lines))]
