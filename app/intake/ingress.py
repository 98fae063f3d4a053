"""Ingress: a verified Events API envelope becomes a durable inbox item, then a driver wake-up.

The 200 goes out only after the claim and the inbox append committed (an
acknowledged message is never lost) and before any model work starts. A store
failure answers 503 so Slack retries the delivery instead of losing it.

Every delivery logs one line (``event_id``, channel, outcome, reason, duration)
— except Slack's retries of a delivery already logged as ignored, so a message
outside the access rules is logged once with its reason. Over HTTP that line and the
delivery metrics come after the 200 (:meth:`Ingress.accept` hands them back as a
``finish`` callback): only the claim stands between a delivery and its acknowledgement.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Protocol

from app import logs, traces
from app.settings import Settings
from channel import inbound
from channel.slack.identity import SlackIdentity
from channel.slack.inbound import edited_message, inbound_message
from storage.base import Store, StoreError, retry_if_session_ended

from .router import Decision, classify

log = logging.getLogger(__name__)

# Ignored event ids already logged; Slack retries a delivery at most three times within minutes.
_RECENT_IGNORED = 1024


@dataclass(frozen=True, slots=True)
class IngressResult:
    status: int
    outcome: str  # "claimed" | "duplicate" | "ignored" | "invalid" | "unavailable"
    reason: str = ""
    task_id: str | None = None


class Wakes(Protocol):
    """Where a claimed delivery's wake-up goes: the scheduler, or the wire to the process running it
    (``app.intake.edge_child``)."""

    def notify(self, task_id: str, author: str | None = None, message: tuple[str, str] | None = None) -> None:
        """``message``: the claimed message's ``(channel, ts)``, whose handle the run mints with its
        lease (``app.runs.scheduler``)."""


def _now(fn: Callable[..., None], *args: Any) -> None:
    fn(*args)


@dataclass(eq=False, kw_only=True)
class Ingress:
    store: Store
    scheduler: Wakes
    #: Who the bot is (``auth.test``): its own posts, and the install's workspace, are told apart by it.
    bot: SlackIdentity
    settings: Settings
    clock: Callable[[], float] = time.time
    on_result: Callable[[IngressResult, dict[str, Any]], None] | None = None
    #: Hears of each message ignored because its author is from another organisation (the
    #: one-time private note, ``app.intake.external``).
    on_external: Callable[[Decision], None] | None = None
    #: Hears of each conversation a claim created, with its task, before the wake-up (the edge's
    #: process sets its thinking status, ``app.intake.edge_status``).
    on_created: Callable[[str, Decision], None] | None = None
    _ignored: OrderedDict[str, None] = field(default_factory=OrderedDict, init=False)
    #: Runs a wake-up or a note where the scheduler and the adapter live (``on_loop``).
    _soon: Callable[..., None] = field(init=False)

    def __post_init__(self) -> None:
        self._soon = _now  # an instance attribute: a function class default would bind as a method

    def on_loop(self, store: Store, soon: Callable[..., None]) -> Ingress:
        """This ingress for another event loop (the HTTP edge's thread): claims through ``store``
        (one made for that loop), wake-ups and external-user notes handed to ``soon(fn, *args)``,
        which runs them on the loop of the scheduler and the adapter."""
        other = replace(self, store=store)
        other._soon = soon
        return other

    async def handle(self, body: dict[str, Any]) -> IngressResult:
        """Claim the delivery, then log it and count it."""
        result, finish = await self.accept(body)
        finish()
        return result

    async def accept(self, body: dict[str, Any]) -> tuple[IngressResult, Callable[[], None]]:
        """Claim the delivery (durable when this returns); ``finish()`` logs and counts it and may
        be called after the answer went out."""
        event_id = body.get("event_id")
        bound = event_id if isinstance(event_id, str) and event_id else None
        started = time.perf_counter()
        with logs.bind(event_id=bound), traces.delivery_span(body) as span:
            result = await self._handle(body)
            traces.delivered(span, body, result.outcome, result.task_id)
        seconds = time.perf_counter() - started

        def finish() -> None:
            with logs.bind(event_id=bound):
                self._log(result, body, seconds)
            if self.on_result is not None:
                self.on_result(result, body)

        return result, finish

    def _log(self, result: IngressResult, body: dict[str, Any], seconds: float) -> None:
        event_id = str(body.get("event_id") or "")
        if result.outcome == "ignored" and event_id:
            if event_id in self._ignored:
                return  # a retry of a delivery already logged with its reason
            self._ignored[event_id] = None
            if len(self._ignored) > _RECENT_IGNORED:
                self._ignored.popitem(last=False)
        event = body.get("event")
        event = event if isinstance(event, dict) else {}
        # An edit is logged with its author and text, which Slack nests in the edited message.
        message = (edited_message(event) if event.get("subtype") == "message_changed" else None) or event
        fields: dict[str, Any] = {
            "type": event.get("type"),
            "channel": event.get("channel"),
            "user": message.get("user") or message.get("bot_id"),
            "outcome": result.outcome,
            "reason": result.reason,
            "duration_ms": round(seconds * 1000, 1),
        }
        if result.task_id:
            fields["task"] = result.task_id
        text = message.get("text")
        if self.settings.log_previews and isinstance(text, str) and text:
            fields["preview"] = logs.preview(text)
        level = logging.INFO if result.status == 200 else logging.WARNING
        logs.event(log, "delivery", level=level, **{k: v for k, v in fields.items() if v is not None})

    async def _handle(self, body: dict[str, Any]) -> IngressResult:
        event = body.get("event")
        event_id = body.get("event_id")
        if not isinstance(event, dict) or not isinstance(event_id, str) or not event_id:
            return IngressResult(400, "invalid", "event_callback without event or event_id")
        decision = classify(event, self.bot, self.settings)
        if decision.action == "ignore":
            if decision.external and self.on_external is not None:
                self._soon(self.on_external, decision)
            return IngressResult(200, "ignored", decision.reason)
        # An edit that adds the bot's mention is answered as the message now reads.
        return await self.claim(event_id, decision, inbound_message(event))

    async def claim(
        self, event_id: str, decision: Decision, message: inbound.InboundMessage, *, key: str = ""
    ) -> IngressResult:
        """Claim ``message`` for the conversation ``decision`` names (once, by ``event_id`` and by
        ``(channel, key or its ts)``), append it to the task's inbox and wake the task with the
        message's own ``(channel, id)``. A message shortcut claims by its own ``key``: the message it
        points at may have been claimed already, as a mention."""
        payload = inbound.dump(message)
        try:
            # Made again once when the store failed it: a claim of the same event twice is one claim
            # (the second finds it, a duplicate, and wakes the task), and a failover should not cost
            # the delivery Slack's retry.
            claim = partial(
                self.store.claim_message,
                event_id=event_id,
                channel=decision.channel,
                ts=key or decision.ts,
                thread_ts=decision.thread_ts,
                create=decision.create,
                payload=payload,
                now=self.clock(),
            )
            outcome = await retry_if_session_ended(claim)
        except StoreError as exc:
            log.error("could not claim event %s: %s", event_id, exc)
            return IngressResult(503, "unavailable", "store unavailable")
        if outcome.status == "no_task":
            return IngressResult(200, "ignored", "thread does not belong to a task")
        if outcome.status == "duplicate":
            # A retry: the instance that claimed the first delivery may have died before its 200 (or
            # before starting the run), leaving the message to a sweep. Waking the task here costs a
            # lease look at most: a live owner keeps it, and an unowned pending inbox runs now.
            if outcome.task_id is not None:
                self._soon(self.scheduler.notify, outcome.task_id)
            return IngressResult(200, "duplicate", "already claimed", outcome.task_id)
        assert outcome.task_id is not None
        # The message's own (channel, ts): for a shortcut, the message it points at.
        where = (decision.channel, message.id or decision.ts)
        if outcome.created:
            # The task's inbox holds this message alone: its author is the one the run is charged to
            # (USER_MAX_RUNS), told with the wake-up instead of read back from the store.
            if self.on_created is not None:
                self.on_created(outcome.task_id, decision)
            self._soon(self.scheduler.notify, outcome.task_id, message.author.id, where)
        else:
            self._soon(self.scheduler.notify, outcome.task_id, None, where)
        return IngressResult(200, "claimed", decision.reason, outcome.task_id)
