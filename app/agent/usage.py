"""What model requests cost, and the daily budgets that bound it.

Every model response carries pydantic-ai's per-request usage (``ModelResponse.usage``: input,
output, cache-read and cache-write tokens, as the provider reported them). A run's
:class:`UsageMeter` stores each one with the run's task, the person who asked (the author of the
inbox message that started the run), the channel and the model, and hands it to the observer
(metrics, the run's log line). :class:`Budgets` compares a UTC day's stored input plus output
tokens with ``USER_DAILY_TOKEN_BUDGET`` (per person) and ``DAILY_TOKEN_BUDGET`` (the install):
the run executor refuses a request past either before any model call, and stops a run that
crosses one after its current step.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Literal

from pydantic_ai.messages import ModelResponse

from channel import inbound
from storage.base import InboxItem, Store, UsageRecord

log = logging.getLogger(__name__)

BudgetKind = Literal["user", "install"]
#: Called with each request's stored usage (the observer: metrics and the run's totals).
UsageListener = Callable[[UsageRecord], None]
#: Token kinds as providers report them (``<kind>_tokens`` of a :class:`UsageRecord`); input includes
#: cache reads and writes.
TOKEN_KINDS = ("input", "output", "cache_read", "cache_write")
#: What a usage row counts and a sum adds up: its tokens by kind, then its requests.
COUNTS = (*(f"{kind}_tokens" for kind in TOKEN_KINDS), "requests")


def counts(record: UsageRecord) -> dict[str, int]:
    """``record``'s :data:`COUNTS`, by name (a log line's or a JSON report's fields)."""
    return {name: getattr(record, name) for name in COUNTS}


def added(total: UsageRecord, record: UsageRecord) -> UsageRecord:
    """``total`` with ``record``'s counts added (its day the newest)."""
    sums = {name: n + getattr(record, name) for name, n in counts(total).items()}
    return replace(total, day=record.day, **sums)


def utc_day(at: float) -> str:
    """The UTC day of an epoch time, as budgets and the usage table count days: ``YYYY-MM-DD``."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d")


def requester(items: Sequence[InboxItem]) -> str:
    """The person a run answers: the author of the newest inbox message; ``""`` when none (the CLI)."""
    for item in reversed(items):
        if user := inbound.person(item.payload):
            return user
    return ""


@dataclass(frozen=True, slots=True)
class BudgetHit:
    kind: BudgetKind
    spent: int
    budget: int

    def note(self) -> str:
        """The short note posted in the thread in place of (or after) the model's answer."""
        who = "You have" if self.kind == "user" else "This app has"
        return (
            f"{who} used {self.spent:,} of {'your' if self.kind == 'user' else 'its'} {self.budget:,} "
            "daily model tokens, so I'm not answering further today. The budget resets at 00:00 UTC."
        )


@dataclass(slots=True)
class Budgets:
    """``USER_DAILY_TOKEN_BUDGET`` and ``DAILY_TOKEN_BUDGET`` (0: no limit), input plus output tokens."""

    store: Store
    per_user: int = 0
    install: int = 0
    clock: Callable[[], float] = time.time

    @property
    def active(self) -> bool:
        return self.per_user > 0 or self.install > 0

    async def exceeded(self, person: str) -> BudgetHit | None:
        """The budget ``person`` (``""``: nobody in particular) has used up today, if any."""
        if not self.active:
            return None
        day = utc_day(self.clock())
        if self.per_user and person:
            spent = await self.store.tokens_spent(day, person)
            if spent >= self.per_user:
                return BudgetHit("user", spent, self.per_user)
        if self.install:
            spent = await self.store.tokens_spent(day)
            if spent >= self.install:
                return BudgetHit("install", spent, self.install)
        return None


@dataclass(slots=True)
class UsageMeter:
    """One run's model usage: each response stored as it arrives, and the run's totals."""

    store: Store
    task_id: str
    person: str
    channel: str
    listener: UsageListener | None = None
    clock: Callable[[], float] = time.time
    #: Whether budgets may stop this run (a person's message started it).
    bounded: bool = True
    total: UsageRecord = field(init=False)

    def __post_init__(self) -> None:
        self.total = UsageRecord(day="", person=self.person, channel=self.channel)

    async def add(self, response: ModelResponse, *, model: str = "") -> UsageRecord:
        """Store ``response``'s usage (one request) and add it to the run's totals."""
        record = self.count(response, model=model)
        await self.store_usage(record)
        return record

    def count(self, response: ModelResponse, *, model: str = "") -> UsageRecord:
        """Add ``response``'s usage to the run's totals and tell the listener; the row is stored by
        :meth:`store_usage` (the caller's choice of when: with the step's checkpoint)."""
        u = response.usage
        now = self.clock()
        record = UsageRecord(
            day=utc_day(now),
            person=self.person,
            channel=self.channel,
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cache_read_tokens=u.cache_read_tokens,
            cache_write_tokens=u.cache_write_tokens,
            requests=1,
            task_id=self.task_id,
            model=response.model_name or model,
            at=now,
        )
        self.total = added(self.total, record)
        if self.listener is not None:
            self.listener(record)
        return record

    async def store_usage(self, record: UsageRecord) -> None:
        try:
            await self.store.record_usage(record)
        except Exception:
            # Losing one usage row must not end a run the model already answered.
            log.warning("could not store the usage of a model request", exc_info=True)


def footer(total: UsageRecord) -> str:
    """The ``USAGE_FOOTER`` line: "1,234 tokens · 2 requests"."""
    requests = f"{total.requests} request" + ("" if total.requests == 1 else "s")
    return f"{total.tokens:,} tokens · {requests}"
