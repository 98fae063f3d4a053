"""The follow-up tools: ``channel_follow_up``, ``channel_follow_ups``, ``channel_cancel_follow_up``.

They act on this task's conversation only: the follow-up's channel and thread are the session's
origin, its requester the person whose message led to this run (the host sets :attr:`requester`).
"""

from __future__ import annotations

from typing import cast

from storage.base import FollowUpRecord

from .. import follow_ups as fu
from ..errors import ChannelError
from ..tools import CancelFollowUpArgs, FollowUpArgs, NoArgs
from .state import Result, SessionState


class FollowUpTools(SessionState):
    def _follow_up_store(self) -> fu.FollowUpStore:
        if not hasattr(self.store, "schedule_follow_up"):
            raise ChannelError("unsupported", "Follow-ups are not available here.")
        return cast(fu.FollowUpStore, self.store)

    async def _follow_up(self, args: FollowUpArgs) -> Result:
        store = self._follow_up_store()
        now = self.follow_up_clock()
        due = fu.due_time(at=args.at, after=args.after, now=now)
        record = FollowUpRecord(
            follow_up=fu.new_follow_up_handle(),
            task_id=self.task.task_id,
            requester=self.requester,
            channel=self.origin.channel,
            thread_ts=self.origin.thread,
            note=args.note,
            due_at=due,
            created_at=now,
        )
        outcome = await store.schedule_follow_up(
            record, payload=fu.payload(record), per_task=fu.PER_TASK, install_max=self.follow_ups_max
        )
        if outcome == "task_full":
            raise ChannelError(
                "invalid_arguments",
                f"this conversation already has {fu.PER_TASK} pending follow-ups; cancel one first.",
            )
        if outcome != "scheduled":
            raise ChannelError(
                "invalid_arguments",
                f"this install already has {self.follow_ups_max} pending follow-ups (FOLLOW_UPS_MAX).",
            )
        return {"follow_up": record.follow_up, "at": fu.utc_iso(due), "how_to_cancel": fu.HOW_TO_CANCEL}

    async def _follow_ups(self, args: NoArgs) -> Result:
        pending = await self._follow_up_store().task_follow_ups(self.task.task_id)
        return {
            "follow_ups": [
                {"follow_up": f.follow_up, "at": fu.utc_iso(f.due_at), "note": f.note} for f in pending
            ]
        }

    async def _cancel_follow_up(self, args: CancelFollowUpArgs) -> Result:
        store = self._follow_up_store()
        task_id = self.task.task_id
        if await store.cancel_follow_up(task_id, args.follow_up, now=self.clock()):
            return {"ok": True}
        found = await store.get_follow_up(task_id, args.follow_up)
        if found is None:
            raise ChannelError("invalid_handle", "no follow-up of this conversation has that handle.")
        raise ChannelError("not_found", f"that follow-up has already {found.state}; nothing to cancel.")
