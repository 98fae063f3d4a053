"""``python -m app follow-ups``: the install's pending follow-ups, for an operator.

One line per pending follow-up, soonest first: when (UTC), the task, the thread's permalink (looked
up in Slack; empty when Slack cannot be reached, which the command says) and the note's first
words. ``--json`` gives every field, for scripts.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from app.settings import Settings
from channel.contract import Origin
from channel.errors import ChannelError
from storage.base import FollowUpRecord

from .reports import read_store, slack_lookups

log = logging.getLogger(__name__)

#: Words of a note the listing shows.
FIRST_WORDS = 8


def first_words(note: str, words: int = FIRST_WORDS) -> str:
    parts = note.split()
    return " ".join(parts[:words]) + (" …" if len(parts) > words else "")


async def follow_ups_command(
    settings: Settings, *, as_json: bool, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    pending = await read_store(settings, lambda store: store.pending_follow_ups(limit=100_000), err)
    if pending is None:
        return 2
    links: dict[tuple[str, str], str] = {}
    async with slack_lookups(settings, err, "no permalinks", wanted=bool(pending)) as adapter:
        for record in pending:
            key = (record.channel, record.thread_ts)
            if adapter is not None and key not in links:
                try:
                    links[key] = (await adapter.describe(Origin(*key))).permalink or ""
                except ChannelError as exc:
                    log.debug("no permalink for a follow-up's thread: %s", exc.message)
                    links[key] = ""
    rows = [_row(r, links.get((r.channel, r.thread_ts), "")) for r in pending]
    if as_json:
        print(json.dumps({"pending": len(rows), "follow_ups": rows}, indent=2, ensure_ascii=False), file=out)
    else:
        print(_text(rows), file=out)
    return 0


def _row(record: FollowUpRecord, permalink: str) -> dict[str, Any]:
    return {
        "follow_up": record.follow_up,
        "task": record.task_id,
        "channel": record.channel,
        "thread_ts": record.thread_ts,
        "permalink": permalink,
        "at": datetime.fromtimestamp(record.due_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "requester": record.requester,
        "note": record.note,
    }


def _text(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "No pending follow-ups."
    lines = [f"{len(rows)} pending follow-up{'s' if len(rows) != 1 else ''} (soonest first, UTC):"]
    for row in rows:
        where = row["permalink"] or f"{row['channel']} {row['thread_ts']}".strip()
        lines.append(f"{row['at']}  task {row['task']}  {where}  {first_words(row['note'])}")
    return "\n".join(lines)
