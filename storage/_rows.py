"""Rows → records, shared by both backends.

A row is whatever the driver returns (``sqlite3.Row``, ``asyncpg.Record``): both are read by
column name. Each ``*_COLUMNS`` list is what the matching converter reads.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from .base import EffectRecord, HandleRecord, InboxItem, LeaseRecord, TaskRecord

TASK_COLUMNS = "task_id, channel, thread_ts, transcript, enabled_tools, created_at"
INBOX_COLUMNS = "item_id, task_id, channel, ts, thread_ts, payload, created_at"
LEASE_COLUMNS = "task_id, owner, expires_at"
HANDLE_COLUMNS = "handle, task_id, kind, ref, authored, data"
EFFECT_COLUMNS = "effect_id, task_id, tool, args, state, result, created_at"


class Row(Protocol):
    def __getitem__(self, key: str, /) -> Any: ...


def tools_json(tools: Sequence[str]) -> str:
    """``tasks.enabled_tools`` as SQLite stores it (JSON text; Postgres stores a ``text[]``)."""
    return json.dumps(list(tools))


def task_from_row(row: Row) -> TaskRecord:
    tools = row["enabled_tools"]
    return TaskRecord(
        task_id=row["task_id"],
        channel=row["channel"],
        thread_ts=row["thread_ts"],
        transcript=bytes(row["transcript"]),
        enabled_tools=tuple(json.loads(tools) if isinstance(tools, str) else tools),
        created_at=float(row["created_at"]),
    )


def inbox_from_row(row: Row) -> InboxItem:
    return InboxItem(
        item_id=int(row["item_id"]),
        task_id=row["task_id"],
        channel=row["channel"],
        ts=row["ts"],
        thread_ts=row["thread_ts"],
        payload=row["payload"],
        created_at=float(row["created_at"]),
    )


def lease_from_row(row: Row) -> LeaseRecord:
    return LeaseRecord(task_id=row["task_id"], owner=row["owner"], expires_at=float(row["expires_at"]))


def handle_from_row(row: Row) -> HandleRecord:
    return HandleRecord(
        handle=row["handle"],
        task_id=row["task_id"],
        kind=row["kind"],
        ref=row["ref"],
        authored=bool(row["authored"]),
        data=row["data"],
    )


def effect_from_row(row: Row) -> EffectRecord:
    return EffectRecord(
        effect_id=row["effect_id"],
        task_id=row["task_id"],
        tool=row["tool"],
        args=row["args"],
        state=row["state"],
        result=row["result"],
        created_at=float(row["created_at"]),
    )
