"""Feedback on answers: the buttons under each answer, stored and counted, shown to the model next turn.

Every answer's last message carries feedback buttons (the adapter draws them for a post's
``feedback`` key, here the task id; their action is ``channel.cards.FEEDBACK_ACTION``) whose values
are ``positive:<task id>`` / ``negative:<task id>``. A click arrives as an action
(``app.intake.interactions``); :meth:`Feedback.click` stores it with its
task, message and person (a second click by the same person on the same answer replaces the
first), counts it in ``threadbound_feedback_total{kind}``, and starts nothing: the task's next run
shows it to the model as a note (:func:`feedback_notes`), once.

A click counts only on a message the task itself posted, in the task's own conversation: the
clicked message's channel and ts (the payload's ``container``) must be one of the task's authored
message handles. Anything else — a container pointing at another channel's message, a message the
bot did not post for this task — is ignored with a log line, and no handle is minted for it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from app.clicks import Action
from channel.cards import FEEDBACK_ACTION
from channel.session import ChannelSession
from storage.base import FeedbackRecord, Store

log = logging.getLogger(__name__)

KINDS = {"positive": "helpful", "negative": "not helpful"}

#: ``(user id) -> display name`` if known now, else "" (the adapter's cache; it makes no call, so a
#: click is answered before any Slack call: ``SlackAdapter.known_user``).
NameOf = Callable[[str], str]
#: ``(channel, key) -> ref`` of the clicked message (``ChannelAdapter.clicked_ref``).
RefOf = Callable[[str, str], str]


class Feedback:
    """The click handler for :data:`FEEDBACK_ACTION`."""

    def __init__(
        self,
        store: Store,
        *,
        ref_of: RefOf,
        name_of: NameOf | None = None,
        on_feedback: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self._ref_of = ref_of
        self._name_of = name_of
        self._on_feedback = on_feedback
        self._clock = clock

    action_id = FEEDBACK_ACTION

    async def click(self, action: Action) -> None:
        kind, _, task_id = action.value.partition(":")
        if kind not in KINDS or not task_id or not action.user_id or not action.message_ts:
            log.info("ignoring a malformed feedback click", extra={"fields": {"value": action.value[:80]}})
            return
        task = await self.store.get_task(task_id)
        if task is None:
            log.info("ignoring feedback on an unknown task", extra={"fields": {"task": task_id[:40]}})
            return
        message = self._ref_of(action.channel, action.message_ts)
        posted = (
            await self.store.find_handle(task_id, "msg", message) if action.channel == task.channel else None
        )
        if posted is None or not posted.authored:
            log.info(
                "ignoring feedback on a message the task did not post",
                extra={"fields": {"task": task_id, "channel": action.channel[:40]}},
            )
            return
        name = (self._name_of(action.user_id) if self._name_of is not None else "") or action.user_name
        await self.store.record_feedback(
            task_id=task_id,
            message=message,
            user_id=action.user_id,
            user_name=name or "someone",
            kind=kind,
            now=self._clock(),
        )
        if self._on_feedback is not None:
            self._on_feedback(kind)
        log.info("feedback", extra={"fields": {"task": task_id, "kind": kind}})


async def feedback_notes(
    store: Store, session: ChannelSession, pending: Sequence[FeedbackRecord] | None = None
) -> tuple[list[str], float | None]:
    """One line per click on the task's answers not shown yet ("Alice marked your answer msg_… as
    not helpful"), and the newest click's time: the run marks them shown with the first checkpoint
    or save that holds the prompt showing them (``feedback_upto``), so a crash before loses none.
    ``pending``: those clicks as the run's start read them (else read here); a later click waits
    for the next run, as one made just after this read would."""
    if pending is None:
        pending = await store.pending_feedback(session.task.task_id)
    if not pending:
        return [], None
    lines = []
    for record in pending:
        posted = await store.find_handle(session.task.task_id, "msg", record.message)
        if posted is None or not posted.authored:
            continue  # only the task's own answers (checked on click too): never a handle to anything else
        handle = posted.handle
        name = " ".join(record.user_name.split()) or "someone"  # one line, whatever the name holds
        lines.append(f"{name} marked your answer {handle} as {KINDS[record.kind]}.")
    return lines, max(r.clicked_at for r in pending)
