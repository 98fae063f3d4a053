"""Observability wiring: run, tool, Slack-call and model-request events become metrics and log lines.

One :class:`Observer` per service. It plugs into the seams the rest of the app
offers and adds no behaviour of its own:

- ``RunHooks`` (``on_start``/``on_end``): the run's log scope (``task``, ``run``),
  its start and end lines, run counters and duration;
- the toolset's after-call callback: one line and one count per tool call;
- the Slack adapter's ``on_call`` hook (:meth:`Observer.slack_call`, one adapter per
  service): Slack API calls by method and outcome, and a warning line for each failed one;
- ``Ingress.on_result``: delivery counters (the ingress logs its own line);
- :class:`TimedModel`: the time of every model request;
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
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

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


class TimedModel(WrapperModel):
    """The wrapped model, unchanged, reporting the duration of every request to ``observer``.

    With an ``ack_gate`` (``app.runs.ack_gate``) a request first waits (``MODEL_PATIENCE`` at most)
    until no delivery waits for its acknowledgement: building and sending a request is the bulk of
    a working run's CPU, and acks go first on the event loop."""

    def __init__(self, wrapped: Model, observer: Observer, ack_gate: AckGate | None = None) -> None:
        super().__init__(wrapped)
        self.observer = observer
        self.ack_gate = ack_gate

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        if self.ack_gate is not None:
            await self.ack_gate.quiet(MODEL_PATIENCE)
        started = time.perf_counter()
        outcome = "error"
        try:
            response = await super().request(messages, model_settings, model_request_parameters)
            outcome = "ok"
            return response
        finally:
            self.observer.model_request(time.perf_counter() - started, outcome)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        if self.ack_gate is not None:
            await self.ack_gate.quiet(MODEL_PATIENCE)
        # Timed until the stream is consumed: the whole response, as for request().
        started = time.perf_counter()
        outcome = "error"
        try:
            async with super().request_stream(
                messages, model_settings, model_request_parameters, run_context
            ) as stream:
                yield stream
            outcome = "ok"
        finally:
            self.observer.model_request(time.perf_counter() - started, outcome)


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
