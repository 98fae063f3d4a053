"""Observability wiring: run, tool, Slack-call and model-request events become metrics and log lines.

One :class:`Observer` per service. It plugs into the seams the rest of the app
offers and adds no behaviour of its own:

- ``RunHooks`` (``on_start``/``on_end``): the run's log scope (``task``, ``run``),
  its start and end lines, run counters and duration;
- the toolset's after-call callback: one line and one count per tool call;
- the Slack adapter's ``on_call`` hook (:meth:`Observer.slack_call`, one adapter per
  service): Slack API calls by method and outcome, and a warning line for each failed one;
- ``Ingress.on_result``: delivery counters (the ingress logs its own line);
- :class:`ModelTiming` (a pydantic-ai capability): the time of every model request;
- ``RunHooks.on_usage``/``on_budget``: tokens and requests (and the run's totals on its end
  line), budget hits.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from weakref import WeakKeyDictionary

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelResponse
from pydantic_ai.models import ModelRequestContext

from app import logs, traces
from app.agent.usage import TOKEN_KINDS, added, counts
from app.intake.ingress import IngressResult
from app.runs.ack_gate import AckGate
from app.runs.follow_ups import LATE_AFTER
from app.runs.run import RunHooks
from channel.session import ChannelSession
from storage.base import FollowUpRecord, InboxItem, UsageRecord

from .metrics import Metrics

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Run:
    run_id: str
    started: float
    scope: logs.Scope
    trace: traces.RunSpan
    tools: int = 0
    tool_errors: int = 0
    #: When the run's model request in flight started (``ModelTiming``); 0: none.
    model_started: float = 0.0
    #: The run's model usage so far: its requests and tokens.
    usage: UsageRecord = field(default_factory=lambda: UsageRecord(day="", person="", channel=""))


@dataclass
class Observer:
    metrics: Metrics = field(default_factory=Metrics)
    # Per run; weak so a run cancelled before on_end (shutdown) leaves nothing behind.
    _runs: WeakKeyDictionary[ChannelSession, _Run] = field(default_factory=WeakKeyDictionary)

    # -- runs ------------------------------------------------------------------------------
    def hooks(self) -> RunHooks:
        return RunHooks(
            on_start=self.on_start, on_end=self.on_end, on_usage=self.usage, on_budget=self.budget_hit
        )

    async def on_start(self, session: ChannelSession, items: Sequence[InboxItem]) -> None:
        run_id = uuid.uuid4().hex[:12]
        # Opened here and closed in on_end: both are awaited in the runner's task, so every line
        # logged in between (tools, Slack calls, the runner's own) carries task and run.
        scope = logs.open_scope(task=session.task.task_id, run=run_id)
        span = traces.start_run(session.task.task_id, run_id, len(items))
        self._runs[session] = _Run(run_id, time.perf_counter(), scope, span)
        self.metrics.runs_started.inc()
        logs.event(log, "run started", messages=len(items))

    async def on_end(self, session: ChannelSession, items: Sequence[InboxItem], status: str) -> None:
        run = self._runs.pop(session, None)
        if run is None:
            return
        if run.model_started:  # a request still in flight: cut off (a timeout, a shutdown), an error
            self.model_request(time.perf_counter() - run.model_started, "error")
            run.model_started = 0.0
        seconds = time.perf_counter() - run.started
        self.metrics.runs_finished.labels(outcome=status).inc()
        self.metrics.run_duration.observe(seconds)
        if session.silent:
            self.metrics.silent_turns.inc()
        _ended(
            "run finished",
            status,
            seconds,
            tools=run.tools,
            tool_errors=run.tool_errors,
            replied=session.replied_in_run,
            silent=session.silent,
            **counts(run.usage),
        )
        traces.end_run(run.trace, status)
        logs.close_scope(run.scope)

    # -- model usage -------------------------------------------------------------------------
    def usage(self, session: ChannelSession, record: UsageRecord) -> None:
        self.metrics.model_requests.inc(record.requests)
        for kind in TOKEN_KINDS:
            self.metrics.model_tokens.labels(kind=kind).inc(getattr(record, f"{kind}_tokens"))
        run = self._runs.get(session)
        if run is not None:
            run.usage = added(run.usage, record)

    def budget_hit(self, session: ChannelSession, budget: str) -> None:
        self.metrics.budget_hits.labels(budget=budget).inc()

    # -- tools -----------------------------------------------------------------------------
    def tool_end(self, session: ChannelSession, tool: str, outcome: str, seconds: float) -> None:
        run = self._runs.get(session)
        if run is not None:
            run.tools += 1
            run.tool_errors += outcome != "ok"
        self.metrics.tool_calls.labels(tool=tool, outcome=outcome).inc()
        if tool == "channel_cancel_follow_up" and outcome == "ok":
            self.metrics.follow_ups_cancelled.inc()
        _ended("tool call", outcome, seconds, tool=tool)

    def follow_ups_fired(self, fired: Sequence[FollowUpRecord]) -> None:
        """Follow-ups the sweep fired; those more than LATE_AFTER past due count as late too."""
        self.metrics.follow_ups_fired.inc(len(fired))
        late = sum(1 for r in fired if r.fired_at is not None and r.fired_at - r.due_at > LATE_AFTER)
        if late:
            self.metrics.follow_ups_late.inc(late)

    # -- Slack -----------------------------------------------------------------------------
    def slack_call(self, method: str, outcome: str, seconds: float) -> None:
        self.metrics.slack_calls.labels(method=method, outcome=outcome).inc()
        traces.slack_call(method, outcome, seconds)
        if outcome != "ok":
            logs.event(
                log,
                "slack call failed",
                level=logging.WARNING,
                method=method,
                code=outcome,
                duration_ms=round(seconds * 1000),
            )

    # -- deliveries and model requests -------------------------------------------------------
    def delivery(self, result: IngressResult, body: dict[str, Any]) -> None:
        self.metrics.deliveries_received.inc()
        self.metrics.deliveries.labels(outcome=result.outcome).inc()

    def feedback(self, kind: str) -> None:
        self.metrics.feedback.labels(kind=kind).inc()

    def model_request(self, seconds: float, outcome: str) -> None:
        self.metrics.model_latency.labels(outcome=outcome).observe(seconds)


def _ended(message: str, outcome: str, seconds: float, **fields: Any) -> None:
    """The log line of something that ended: INFO when its ``outcome`` is ``ok``, else WARNING."""
    level = logging.INFO if outcome == "ok" else logging.WARNING
    logs.event(log, message, level=level, outcome=outcome, duration_ms=round(seconds * 1000), **fields)


#: Most seconds a model request waits for a moment without deliveries waiting for their 200.
MODEL_PATIENCE = 0.1


class ModelTiming(AbstractCapability[Any]):
    """The time of every model request, reported to ``observer``, as pydantic-ai hooks (no model layer).

    With an ``ack_gate`` (``app.runs.ack_gate``) a request first waits (``MODEL_PATIENCE`` at most)
    until no delivery waits for its acknowledgement: building and sending a request is the bulk of
    a working run's CPU, and acks go first on the event loop.

    A capability rather than a ``WrapperModel``: a model layer holds its own context managers on
    every request in flight (8 KiB of each waiting run) and costs CPU per request; these hooks run
    before and after the request and hold nothing while it waits. The start is kept on the run's
    record (:class:`_Run`), as a run makes one request at a time; a run the observer does not know
    (no ``on_start``) is gated but not timed. :meth:`request` gates and times a request made outside
    the agent (compaction's)."""

    def __init__(self, observer: Observer, ack_gate: AckGate | None = None) -> None:
        self.observer = observer
        self.ack_gate = ack_gate

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        if self.ack_gate is not None:
            await self.ack_gate.quiet(MODEL_PATIENCE)
        run = self._run(ctx)
        if run is not None:
            run.model_started = time.perf_counter()  # timed until the response (a stream: consumed)
        return request_context

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        self._ended(ctx, "ok")
        return response

    async def on_model_request_error(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, error: Exception
    ) -> ModelResponse:
        self._ended(ctx, "error")
        raise error

    @asynccontextmanager
    async def request(self) -> AsyncIterator[None]:
        """Around one model request made outside the agent: gated and timed like the agent's."""
        if self.ack_gate is not None:
            await self.ack_gate.quiet(MODEL_PATIENCE)
        started = time.perf_counter()
        outcome = "error"
        try:
            yield
            outcome = "ok"
        finally:
            self.observer.model_request(time.perf_counter() - started, outcome)

    def _run(self, ctx: RunContext[Any]) -> _Run | None:
        session = getattr(ctx.deps, "session", None)
        return self.observer._runs.get(session) if session is not None else None

    def _ended(self, ctx: RunContext[Any], outcome: str) -> None:
        run = self._run(ctx)
        if run is not None and run.model_started:
            self.observer.model_request(time.perf_counter() - run.model_started, outcome)
            run.model_started = 0.0


def combine(*hooks: RunHooks | None) -> RunHooks:
    """One ``RunHooks`` calling each given one: starts and tools in order, ends in reverse order
    (so the first hooks, e.g. the observer's log scope, wrap all the others)."""
    present = [h for h in hooks if h is not None]
    starts = [h.on_start for h in present if h.on_start is not None]
    tools = [h.on_tool for h in present if h.on_tool is not None]
    ends = [h.on_end for h in reversed(present) if h.on_end is not None]
    usages = [h.on_usage for h in present if h.on_usage is not None]
    budgets = [h.on_budget for h in present if h.on_budget is not None]

    async def on_start(session: ChannelSession, items: Sequence[InboxItem]) -> None:
        for hook in starts:
            await hook(session, items)

    async def on_tool(session: ChannelSession, name: str) -> None:
        for hook in tools:
            await hook(session, name)

    async def on_end(session: ChannelSession, items: Sequence[InboxItem], status: str) -> None:
        for hook in ends:
            await hook(session, items, status)

    def on_usage(session: ChannelSession, record: UsageRecord) -> None:
        for hook in usages:
            hook(session, record)

    def on_budget(session: ChannelSession, budget: str) -> None:
        for hook in budgets:
            hook(session, budget)

    return RunHooks(
        on_start=on_start if starts else None,
        on_tool=on_tool if tools else None,
        on_end=on_end if ends else None,
        on_usage=on_usage if usages else None,
        on_budget=on_budget if budgets else None,
    )
