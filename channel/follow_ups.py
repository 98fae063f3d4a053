"""Follow-ups: what ``channel_follow_up`` schedules, and how its time and bounds are read.

A follow-up belongs to the conversation it was scheduled in (no tool names another one). Its handle
(``fu_…``) is opaque and task-scoped like ``msg_…``; the store keeps it with its task, its note, when
it is due and the person whose message led to it. When it is due the host appends its payload to the
task's inbox like a message (``app.runs.follow_ups``), and the task resumes with it.

This module is provider-neutral and pure: times in, times or a :class:`ChannelError` out.
"""

from __future__ import annotations

import json
import re
import secrets
from datetime import UTC, datetime
from typing import Any, Protocol

from storage.base import FollowUpRecord

from .errors import ChannelError

#: ``kind`` of the inbox payload a follow-up becomes when it fires.
KIND = "follow_up"
#: Bounds: at least a minute ahead, at most 30 days; pending ones per task; the install's default.
MIN_AHEAD = 60.0
MAX_AHEAD = 30 * 86_400.0
PER_TASK = 10
DEFAULT_INSTALL_MAX = 1000
#: Defaults of ``FOLLOW_UPS_PER_PERSON_MAX`` (pending per person) and ``FOLLOW_UPS_UNATTENDED_MAX``
#: (follow-ups scheduled in a row by runs no person's message started).
DEFAULT_PER_PERSON_MAX = 50
DEFAULT_UNATTENDED_MAX = 1
#: What the tool's result tells the model to pass on: how people cancel one.
HOW_TO_CANCEL = (
    "Tell the people here when you will follow up; anyone can cancel it by asking in this thread "
    "(a reply to you is enough), and you cancel it with channel_cancel_follow_up."
)

_AFTER = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?$")


class FollowUpStore(Protocol):
    """The store methods the follow-up tools use (``storage.base.Store`` has them)."""

    async def schedule_follow_up(
        self, record: FollowUpRecord, *, payload: str, per_task: int, install_max: int, per_person: int
    ) -> str: ...

    async def task_follow_ups(self, task_id: str) -> list[FollowUpRecord]: ...

    async def get_follow_up(self, task_id: str, follow_up: str) -> FollowUpRecord | None: ...

    async def cancel_follow_up(self, task_id: str, follow_up: str, *, now: float) -> bool: ...


def new_follow_up_handle() -> str:
    return "fu_" + secrets.token_urlsafe(16)


def after_seconds(after: str) -> float:
    """``20m``, ``3h``, ``2d``, ``1h30m`` as seconds."""
    match = _AFTER.match(after)
    if match is None or not after:
        raise ChannelError("invalid_arguments", "after must look like 20m, 3h, 2d or 1h30m.")
    days, hours, minutes = (int(g or 0) for g in match.groups())
    return days * 86_400.0 + hours * 3600.0 + minutes * 60.0


def due_time(*, at: str | None, after: str | None, now: float) -> float:
    """When a follow-up asked for with ``at`` or ``after`` is due (epoch seconds), within the bounds."""
    if after:
        due = now + after_seconds(after)
    else:
        try:
            when = datetime.fromisoformat(at or "")
        except ValueError:
            raise ChannelError(
                "invalid_arguments", "at must be an ISO 8601 time such as 2026-03-02T09:00:00+01:00."
            ) from None
        if when.tzinfo is None:
            raise ChannelError(
                "invalid_arguments",
                "at needs a UTC offset (2026-03-02T09:00:00+01:00 or …Z): use the person's time zone.",
            )
        due = when.timestamp()
    if due < now + MIN_AHEAD:
        raise ChannelError("invalid_arguments", "a follow-up must be at least 1 minute ahead.")
    if due > now + MAX_AHEAD:
        raise ChannelError("invalid_arguments", "a follow-up can be at most 30 days ahead.")
    return due


def utc_iso(at: float) -> str:
    """``2026-12-01T15:00:00Z``."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def payload(record: FollowUpRecord, unattended: int = 0) -> str:
    """The inbox item a follow-up becomes: ``user`` is its requester (budgets, approvals, streaming);
    ``unattended`` how many follow-ups in a row, this one included, runs no person's message started
    scheduled (0: a person's message led to it), which bounds the chain it may start."""
    body: dict[str, Any] = {
        "kind": KIND,
        "follow_up": record.follow_up,
        "user": record.requester,
        "note": record.note,
        "at": record.due_at,
        "scheduled_at": record.created_at,
        "unattended": unattended,
    }
    return json.dumps(body, ensure_ascii=False)


def unattended_of(raw: str) -> int:
    """The ``unattended`` count of a fired follow-up's inbox payload (0 for one from before it existed)."""
    found = parse(raw) or {}
    value = found.get("unattended")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def parse(raw: str) -> dict[str, Any] | None:
    """A follow-up's inbox payload, or None when ``raw`` is something else (a message, a decision)."""
    try:
        found = json.loads(raw)
    except ValueError:
        return None
    return found if isinstance(found, dict) and found.get("kind") == KIND else None
