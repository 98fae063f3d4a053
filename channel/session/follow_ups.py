"""The follow-up tools: ``channel_follow_up``, ``channel_follow_ups``, ``channel_cancel_follow_up``.

They act on this task's conversation only: the follow-up's channel and thread are the session's
origin, its requester the person whose message led to this run (``SessionState.requester``).

Scheduling is journalled (:data:`FOLLOW_UP_EFFECT`, the new follow-up's handle in its arguments)
before the store writes it: a run killed after the write leaves an entry the resumed run settles
(:meth:`FollowUpTools.settle`: the follow-up looked up), so the call's result is known and the
model does not schedule the same follow-up twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import cast

from storage.base import EffectRecord, FollowUpRecord

from .. import follow_ups as fu
from ..errors import ChannelError
from ..tools import CancelFollowUpArgs, FollowUpArgs, NoArgs
from .state import Result, SessionState

#: The journal's name for a follow-up being scheduled.
FOLLOW_UP_EFFECT = "channel_follow_up"
#: The result of a call a crash interrupted before its follow-up was written.
_NOT_SCHEDULED = ChannelError(
    "not_found", "your run was interrupted before this follow-up was scheduled; schedule it again if needed"
)


class FollowUpTools:
    """This conversation's follow-ups: scheduled, listed and cancelled."""

    def __init__(self, state: SessionState, *, clock: Callable[[], float], install_max: int) -> None:
        """``clock``: what follow-ups are scheduled by (the host's follow-up sweep's: the
        playground's demo clock, which fast-forward moves); ``install_max``: the install's pending
        follow-ups at most (``FOLLOW_UPS_MAX``)."""
        self._state = state
        self.clock = clock
        self.install_max = install_max
        #: Pending follow-ups one person may have across the install (``FOLLOW_UPS_PER_PERSON_MAX``).
        self.per_person_max = fu.DEFAULT_PER_PERSON_MAX
        #: Follow-ups runs no person started may schedule in a row (``FOLLOW_UPS_UNATTENDED_MAX``).
        self.unattended_max = fu.DEFAULT_UNATTENDED_MAX
        #: None when a person's message (or answer, or decision) started this run; else how many
        #: follow-ups runs no person started have scheduled in a row so far (the host sets it).
        self.unattended: int | None = None

    def _ceiling(self) -> int:
        """The ``unattended`` count the next follow-up gets (0: a person asked); refused past the ceiling."""
        if self.unattended is None:
            return 0
        if self.unattended + 1 > self.unattended_max:
            raise ChannelError(
                "denied",
                "No follow-up was scheduled: this run was not started by a person (a follow-up fired, "
                f"or nobody decided in time), and {self.unattended} follow-up(s) were already scheduled "
                f"in a row with nobody writing here (FOLLOW_UPS_UNATTENDED_MAX={self.unattended_max}). "
                "Say what you would have followed up on instead; a person's next message here lets you "
                "schedule again.",
            )
        return self.unattended + 1

    def _follow_up_store(self) -> fu.FollowUpStore:
        if not hasattr(self._state.store, "schedule_follow_up"):
            raise ChannelError("unsupported", "Follow-ups are not available here.")
        return cast(fu.FollowUpStore, self._state.store)

    async def follow_up(self, args: FollowUpArgs) -> Result:
        store = self._follow_up_store()
        now = self.clock()
        due = fu.due_time(at=args.at, after=args.after, now=now)
        unattended = self._ceiling()
        record = FollowUpRecord(
            follow_up=fu.new_follow_up_handle(),
            task_id=self._state.task.task_id,
            requester=self._state.requester,
            channel=self._state.origin.channel,
            thread_ts=self._state.origin.thread,
            note=args.note,
            due_at=due,
            created_at=now,
        )
        journal = self._state.journal
        effect_id = await journal.open(FOLLOW_UP_EFFECT, {"follow_up": record.follow_up})  # module doc
        outcome = await store.schedule_follow_up(
            record,
            payload=fu.payload(record, unattended),
            per_task=fu.PER_TASK,
            install_max=self.install_max,
            per_person=self.per_person_max,
        )
        if outcome == "task_full":
            raise ChannelError(
                "invalid_arguments",
                f"this conversation already has {fu.PER_TASK} pending follow-ups; cancel one first.",
            )
        if outcome == "person_full":
            raise ChannelError(
                "invalid_arguments",
                f"the person this is for already has {self.per_person_max} pending follow-ups across "
                "this install (FOLLOW_UPS_PER_PERSON_MAX); cancel one first.",
            )
        if outcome == "scheduled" and self.unattended is not None:
            self.unattended = unattended
        if outcome != "scheduled":
            full = (
                f"this conversation already has {fu.PER_TASK} pending follow-ups; cancel one first."
                if outcome == "task_full"
                else f"this install already has {self.install_max} pending follow-ups (FOLLOW_UPS_MAX)."
            )
            error = ChannelError("invalid_arguments", full)
            await journal.close(effect_id, error.as_result())
            raise error
        result = _scheduled(record)
        await journal.close(effect_id, result)
        return result

    async def settle(self, effects: Sequence[EffectRecord]) -> list[EffectRecord]:
        """Close the follow-up entries among ``effects`` a crash left open with the call's result
        (the follow-up found in the store, else not scheduled); the others."""
        rest = []
        for effect in effects:
            if effect.tool != FOLLOW_UP_EFFECT:
                rest.append(effect)
                continue
            handle = str(json.loads(effect.args).get("follow_up") or "")
            found = await self._follow_up_store().get_follow_up(self._state.task.task_id, handle)
            result = _scheduled(found) if found is not None else _NOT_SCHEDULED.as_result()
            await self._state.journal.close(effect.effect_id, result)
        return rest

    async def follow_ups(self, args: NoArgs) -> Result:
        pending = await self._follow_up_store().task_follow_ups(self._state.task.task_id)
        return {
            "follow_ups": [
                {"follow_up": f.follow_up, "at": fu.utc_iso(f.due_at), "note": f.note} for f in pending
            ]
        }

    async def cancel_follow_up(self, args: CancelFollowUpArgs) -> Result:
        store = self._follow_up_store()
        task_id = self._state.task.task_id
        if await store.cancel_follow_up(task_id, args.follow_up, now=self._state.clock()):
            return {"ok": True}
        found = await store.get_follow_up(task_id, args.follow_up)
        if found is None:
            raise ChannelError("invalid_handle", "no follow-up of this conversation has that handle.")
        raise ChannelError("not_found", f"that follow-up has already {found.state}; nothing to cancel.")


def _scheduled(record: FollowUpRecord) -> Result:
    """``channel_follow_up``'s result for a scheduled follow-up."""
    return {"follow_up": record.follow_up, "at": fu.utc_iso(record.due_at), "how_to_cancel": fu.HOW_TO_CANCEL}
