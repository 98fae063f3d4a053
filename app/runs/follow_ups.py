"""Follow-ups come back: the sweep that fires due ones, and how a fired one reaches the model.

**Firing.** Every instance runs :meth:`FollowUpSweep.run_forever`: about once a second it asks the
store when the next follow-up is due (a read) and, once one is, fires what is due
(``Store.fire_follow_ups``): each due follow-up whose task holds no live lease is marked fired and
appended to its task's inbox in one transaction, exactly once across instances and restarts (it is
claimed like a message). The task is then woken like for a message and runs on whichever instance
takes its lease. A follow-up of a task that is running waits for the run to end (it never joins a
run as a steering message). One due while the app was down fires at the next start, late, and the
model is told how late (:func:`follow_up_row`).

**Who it runs for.** Its inbox item carries its requester as ``user`` (the person whose message led
to scheduling it), so the run is theirs for budgets, approvals and streaming like any message of
theirs. Before firing, the sweep checks the access lists (``ALLOWED_USERS``, ``ALLOWED_CHANNELS``,
``ALLOW_DMS``): a follow-up whose person or conversation is no longer allowed fires as a refusal,
which the run turns into one short note in the thread and no model call (:func:`follow_up_row`).
When the run takes it up, the person is checked again as the provider sees them now
(:func:`recheck_follow_ups`: active, not a guest unless ``ALLOW_GUESTS``, not from another
organisation unless ``ALLOW_EXTERNAL_USERS``, still in the conversation); one who no longer passes
gets the same kind of note instead of the run.

**Ceilings** (invariant "Nothing runs away", docs/architecture.md). A run that no person's message,
answer or click started — a follow-up firing, an approval nobody decided in time — may schedule at
most ``FOLLOW_UPS_UNATTENDED_MAX`` follow-ups in a row before a person writes in the thread again
(:func:`unattended_chain`; each follow-up's payload carries its place in the chain); one person may
have at most ``FOLLOW_UPS_PER_PERSON_MAX`` pending (``channel.session.follow_ups``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from app.agent.approvals import DECISION_KIND
from app.agent.asks import ASK_KIND
from app.settings import Settings
from channel import follow_ups as fu
from channel import inbound
from channel.contract import Standing
from channel.errors import ChannelError
from channel.session import ChannelSession
from storage.base import FollowUpRecord, InboxItem, Store

log = logging.getLogger(__name__)

#: Seconds between the sweep's looks for due follow-ups.
POLL_INTERVAL = 1.0
#: Seconds between prunes of fired and cancelled follow-ups, and how long they are kept.
PRUNE_INTERVAL = 3600.0
KEEP_DONE = 30 * 86_400.0
#: Polls between counts of the pending follow-ups (for ``/metrics``).
PENDING_EVERY = 10
#: Most follow-ups one fire call moves (a backlog goes in several short transactions).
FIRE_BATCH = 500
#: Most due follow-ups the access check reads at once (far above any FOLLOW_UPS_MAX in use).
CHECK_LIMIT = 1_000_000
#: A follow-up fired more than this many seconds after it was due counts (and is shown) as late.
LATE_AFTER = 60.0

__all__ = [
    "Access",
    "FollowUpSweep",
    "Recheck",
    "by_person",
    "follow_up_row",
    "is_follow_up",
    "lateness",
    "recheck_follow_ups",
    "unattended_chain",
]

#: Inbox kinds a person's click or answer appends (an approval's decision, an ask's answer), whose
#: ``by`` names them (``""`` for an expiry).
_DECIDED_BY = (DECISION_KIND, ASK_KIND)


def is_follow_up(item: InboxItem) -> bool:
    """The inbox item is a fired follow-up, not a Slack message."""
    return fu.parse(item.payload) is not None


def lateness(item: InboxItem) -> float:
    """Seconds between when a fired follow-up was due and when it fired."""
    found = fu.parse(item.payload) or {}
    return max(0.0, item.created_at - float(found.get("at") or item.created_at))


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _duration(seconds: float) -> str:
    minutes = int(seconds // 60)
    days, rest = divmod(minutes, 1440)
    hours, minutes = divmod(rest, 60)
    parts = [f"{days} d" if days else "", f"{hours} h" if hours else "", f"{minutes} min" if minutes else ""]
    return " ".join(p for p in parts if p) or "less than a minute"


async def follow_up_row(session: ChannelSession, item: InboxItem) -> dict[str, Any] | None:
    """What the prompt shows of a fired follow-up; None when there is nothing to show (it was
    refused: the short note is posted in the thread here instead, and no model call follows for it)."""
    found = fu.parse(item.payload) or {}
    if found.get("refused"):
        try:  # by the follow-up's own effect id: a crash after it does not post it twice
            await session.post_note_once(f"note_{found.get('follow_up')}", str(found["refused"]))
        except ChannelError as exc:
            log.warning("could not post the note of a refused follow-up: %s", exc.message)
        return None
    due, scheduled = float(found.get("at") or 0.0), float(found.get("scheduled_at") or 0.0)
    row: dict[str, Any] = {
        "follow_up": str(found.get("follow_up") or ""),
        "text": f"Follow-up you scheduled at {_when(scheduled)} for {_when(due)}: {found.get('note') or ''}",
    }
    late = lateness(item)
    if late > LATE_AFTER:
        row["late"] = (
            f"This follow-up is {_duration(late)} late: the app was not running (or this conversation "
            "was busy) when it was due. Say so if the delay matters."
        )
    return row


def by_person(item: InboxItem) -> bool:
    """The inbox item is something a person did: a message, an answer to an ask, a click on an
    approval card (not a follow-up, an expiry, a withdrawal or another bot's message)."""
    message = inbound.stored(item.payload)
    if message is not None:
        return not message.author.bot  # another bot's message (ALLOW_BOTS) is nobody writing
    try:
        found = json.loads(item.payload)
    except ValueError:
        return False
    return isinstance(found, dict) and found.get("kind") in _DECIDED_BY and bool(found.get("by"))


def unattended_chain(items: Sequence[InboxItem], ceiling: int) -> int | None:
    """None when a person started the run (or nothing did: the ``run`` command); else how many
    follow-ups runs no person started have scheduled in a row before it — the most its fired
    follow-ups carry, or ``ceiling`` for a run only expiries started (whose chain is not known, so
    it schedules none)."""
    if not items or any(by_person(item) for item in items):
        return None
    counts = [fu.unattended_of(item.payload) for item in items if is_follow_up(item)]
    return max(counts) if counts else ceiling


@dataclass(frozen=True, slots=True)
class Recheck:
    """Who a firing follow-up may still run for, as the provider sees its person now."""

    allow_guests: bool = False
    allow_external: bool = False

    @classmethod
    def of(cls, settings: Settings) -> Recheck:
        return cls(settings.allow_guests, settings.allow_external_users)

    def refusal(self, standing: Standing, *, guests: bool | None = None) -> str | None:
        """Why the follow-up may no longer run for its person (the note), or None when it may.
        ``guests``: whether the conversation's profile serves guests (None: as ``ALLOW_GUESTS``)."""
        if not standing.active:
            why = "the person it was for no longer has an active account"
        elif standing.guest and not (self.allow_guests if guests is None else guests):
            why = "the person it was for is a guest, and this app does not serve guests"
        elif standing.external and not self.allow_external:
            why = "the person it was for is from another organisation, and this app does not serve them"
        elif not standing.member:
            why = "the person it was for is no longer in this conversation"
        else:
            return None
        return f"A follow-up scheduled here did not run: {why}."


async def recheck_follow_ups(
    session: ChannelSession,
    items: Sequence[InboxItem],
    recheck: Recheck,
    admitted: Callable[[str, str | None], Awaitable[str | None]] | None = None,
    guests: bool | None = None,
) -> list[InboxItem]:
    """``items`` with each fired follow-up whose person no longer passes :class:`Recheck` (asked of
    the provider now), or whom the conversation's profile no longer admits (``admitted``: why not,
    else None), turned into a refusal: :func:`follow_up_row` posts its note, no model call."""
    checked: list[InboxItem] = []
    for item in items:
        found = fu.parse(item.payload)
        person = inbound.person(item.payload) if found is not None else ""
        if found is None or found.get("refused") or not person:
            checked.append(item)
            continue
        standing = await session.adapter.standing(session.origin, person)
        why = recheck.refusal(standing, guests=guests)
        if why is None and admitted is not None and (reason := await admitted(person, None)) is not None:
            why = f"A follow-up scheduled here did not run: {reason}"
        if why is not None:
            log.info("a follow-up was refused when it fired: %s", why)
            refused = {
                "kind": fu.KIND,
                "follow_up": found.get("follow_up"),
                "refused": why,
                "at": found.get("at"),
            }
            item = replace(item, payload=json.dumps(refused))
        checked.append(item)
    return checked


@dataclass(frozen=True, slots=True)
class Access:
    """The access lists a follow-up's person and conversation are checked against when it fires."""

    allowed_users: frozenset[str] = frozenset()
    allowed_channels: frozenset[str] = frozenset()
    allow_dms: bool = True

    @classmethod
    def of(cls, settings: Settings) -> Access:
        return cls(
            frozenset(settings.allowed_users), frozenset(settings.allowed_channels), settings.allow_dms
        )

    @property
    def restricted(self) -> bool:
        return bool(self.allowed_users or self.allowed_channels or not self.allow_dms)

    def refusal(self, record: FollowUpRecord) -> str | None:
        """Why the follow-up may no longer run (the note posted instead), or None when it may."""
        if self.allowed_users and record.requester and record.requester not in self.allowed_users:
            return (
                "A follow-up scheduled here did not run: the person it was for is no longer allowed "
                "to use this app."
            )
        direct = record.channel.startswith("D")
        if (direct and not self.allow_dms) or (
            not direct and self.allowed_channels and record.channel not in self.allowed_channels
        ):
            return "A follow-up scheduled here did not run: this app no longer works in this conversation."
        return None


class FollowUpSweep:
    """Fires due follow-ups into their tasks' inboxes and wakes the tasks (module doc)."""

    def __init__(
        self,
        store: Store,
        *,
        wake: Callable[[str], None] = lambda task_id: None,
        clock: Callable[[], float] = time.time,
        access: Access | None = None,
        on_fired: Callable[[Sequence[FollowUpRecord]], None] | None = None,
        on_pending: Callable[[int], None] | None = None,
        poll_interval: float = POLL_INTERVAL,
    ) -> None:
        self.store = store
        self.wake = wake
        #: The sweep's notion of now (the playground's demo clock moves it forward).
        self.clock = clock
        self.access = access or Access()
        self.on_fired = on_fired
        #: Told the install's pending count every PENDING_EVERY polls (the ``/metrics`` gauge).
        self.on_pending = on_pending
        self.poll_interval = poll_interval
        self._nudged = asyncio.Event()

    def nudge(self) -> None:
        """Look again now rather than at the next poll (the clock moved)."""
        self._nudged.set()

    async def fire(self, now: float | None = None) -> list[FollowUpRecord]:
        """Fire every follow-up due at ``now`` whose task is free; the ones this call fired."""
        now = self.clock() if now is None else now
        if self.access.restricted:
            # Every due one is checked before any fires: a batch skips tasks that are running.
            for record in await self.store.pending_follow_ups(before=now, limit=CHECK_LIMIT):
                why = self.access.refusal(record)
                if why is not None:
                    refused = {
                        "kind": fu.KIND,
                        "follow_up": record.follow_up,
                        "refused": why,
                        "at": record.due_at,
                    }
                    await self.store.refuse_follow_up(record.follow_up, payload=json.dumps(refused))
        fired: list[FollowUpRecord] = []
        while True:
            batch = await self.store.fire_follow_ups(now=now, limit=FIRE_BATCH)
            fired += batch
            for task_id in dict.fromkeys(r.task_id for r in batch):
                self.wake(task_id)
            if len(batch) < FIRE_BATCH:
                break
        if fired:
            late = sum(1 for r in fired if (r.fired_at or now) - r.due_at > LATE_AFTER)
            log.info("fired %d follow-ups (%d late)", len(fired), late)
            if self.on_fired is not None:
                self.on_fired(fired)
        return fired

    async def due(self) -> bool:
        """Some pending follow-up is due now (a read, so an idle install writes nothing)."""
        soonest = await self.store.next_follow_up_due()
        return soonest is not None and soonest <= self.clock()

    async def run_forever(self) -> None:
        polls = 0
        while True:
            try:
                if await self.due():
                    await self.fire()
                if self.on_pending is not None and polls % PENDING_EVERY == 0:
                    self.on_pending(await self.store.pending_follow_up_count())
                if (
                    polls % max(1, round(PRUNE_INTERVAL / self.poll_interval)) == 0
                ):  # hourly, the first poll too
                    await self.store.prune_follow_ups(older_than=time.time() - KEEP_DONE)
            except Exception:
                log.exception("firing follow-ups failed")
            polls += 1
            self._nudged.clear()
            try:
                await asyncio.wait_for(self._nudged.wait(), self.poll_interval)
            except TimeoutError:
                pass
