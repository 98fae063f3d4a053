"""What a run starts from (:class:`RunState`), read in one trip by ``Store.run_state``."""

from __future__ import annotations

from dataclasses import dataclass

from .ask_records import AskRecord
from .records import EffectRecord, FeedbackRecord, InboxItem, StopRecord, TaskRecord

__all__ = ["RunState"]


@dataclass(frozen=True, slots=True)
class RunState:
    """A task as its next run starts from it, read together: its pending inbox, its open journal
    entries, its record (None: unknown task) and what the run's prompt needs before its first
    model request (whether an approval waits, its undecided asks, feedback not shown yet) and a
    person's Stop not settled yet.

    A snapshot: decisions and clicks made after it are seen by the run's later looks (a
    decision wakes the task again; answering an ask decides it in one winning transaction)."""

    items: list[InboxItem]
    effects: list[EffectRecord]
    task: TaskRecord | None
    open_approval: bool = False
    asks: tuple[AskRecord, ...] = ()
    feedback: tuple[FeedbackRecord, ...] = ()
    #: A person's Stop on the task's last run, not settled yet (that run crashed or lost its lease).
    stop: StopRecord | None = None
