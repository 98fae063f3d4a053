"""Rows → records, shared by both backends.

A row is whatever the driver returns (``sqlite3.Row``, ``asyncpg.Record``): both are read by
column name. Each converter reads the matching ``*_COLUMNS`` list of ``statements.py``.
"""

from __future__ import annotations

import json

from .base import (
    ApprovalRecord,
    ClaimOutcome,
    EffectRecord,
    FollowUpRecord,
    HandleRecord,
    InboxItem,
    LeaseRecord,
    StoreStats,
    TaskRecord,
    UsageRecord,
)
from .sql import Row


def task_from_row(row: Row) -> TaskRecord:
    tools = row["enabled_tools"]
    return TaskRecord(
        task_id=row["task_id"],
        channel=row["channel"],
        thread_ts=row["thread_ts"],
        transcript=bytes(row["transcript"]),
        enabled_tools=tuple(json.loads(tools) if isinstance(tools, str) else tools),
        created_at=float(row["created_at"]),
        summary=str(row["summary"]),
        run_open=bool(row["run_open"]),
    )


def usage_from_row(row: Row) -> UsageRecord:
    return UsageRecord(
        day=str(row["day"]),
        person=str(row["person"]),
        channel=str(row["channel"]),
        input_tokens=int(row["input_tokens"]),
        output_tokens=int(row["output_tokens"]),
        cache_read_tokens=int(row["cache_read_tokens"]),
        cache_write_tokens=int(row["cache_write_tokens"]),
        requests=int(row["requests"]),
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
        call_id=str(row["call_id"]),
    )


def claim_from_row(row: Row) -> ClaimOutcome:
    item_id = row["item_id"]
    return ClaimOutcome(
        row["status"],
        task_id=row["task_id"],
        item_id=None if item_id is None else int(item_id),
        created=bool(row["created"]),
    )


def stats_from_row(row: Row) -> StoreStats:
    values = {key: int(row[key]) for key in row.keys()}
    return StoreStats(tasks=values.pop("tasks"), pending_inbox=values.pop("pending_inbox"), extra=values)


def approval_from_row(row: Row) -> ApprovalRecord:
    decided_at, executed_at = row["decided_at"], row["executed_at"]
    return ApprovalRecord(
        approval_id=row["approval_id"],
        task_id=row["task_id"],
        tool_call_id=row["tool_call_id"],
        tool=row["tool"],
        args=row["args"],
        requester=row["requester"],
        channel=row["channel"],
        thread_ts=row["thread_ts"],
        card_effect=row["card_effect"],
        card_ts=row["card_ts"],
        created_at=float(row["created_at"]),
        decision=row["decision"],
        decided_by=row["decided_by"],
        decided_at=None if decided_at is None else float(decided_at),
        executed_at=None if executed_at is None else float(executed_at),
    )


def follow_up_from_row(row: Row) -> FollowUpRecord:
    fired_at = row["fired_at"]
    return FollowUpRecord(
        follow_up=row["follow_up"],
        task_id=row["task_id"],
        requester=row["requester"],
        channel=row["channel"],
        thread_ts=row["thread_ts"],
        note=row["note"],
        due_at=float(row["due_at"]),
        created_at=float(row["created_at"]),
        state=row["state"],
        fired_at=None if fired_at is None else float(fired_at),
    )
