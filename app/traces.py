"""OpenTelemetry traces: one trace per run, from the Slack delivery that started it to its Slack calls.

With ``OTEL_EXPORTER_OTLP_ENDPOINT`` set and the ``otel`` extra installed (``pip install
'threadbound[otel]'``), :func:`setup_tracing` installs an SDK tracer provider exporting over OTLP/HTTP
and turns on pydantic-ai's instrumentation. Otherwise every span here is OpenTelemetry's no-op span
and costs next to nothing.

The spans (all named ``threadbound …`` except pydantic-ai's own):

- ``threadbound delivery``: one Slack delivery through the ingress (``event_id``, outcome, task);
- ``threadbound click``: one button click being handled (its ``action_id``);
- ``threadbound run``: one agent run, a child of the delivery that claimed its first message when
  that delivery was seen by this process or its HTTP edge's (else a root), with links to the
  others; it carries the task, the run and the event ids;
- pydantic-ai's agent run, model request and tool call spans inside it (``include_content=False``:
  no prompt, answer, tool argument or result unless ``TRACE_CONTENT=true``);
- ``threadbound slack <method>``: each Slack Web API call, with its outcome, under whatever is
  current (the tool call that made it, or the run).

What a span never carries: message text, file contents, tokens or keys. Only ids (task, run,
event, Slack method) and outcomes.
"""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from app.settings import Settings

log = logging.getLogger(__name__)

#: The instrumentation scope of our own spans.
TRACER_NAME = "threadbound"
#: Seconds an export to the collector may take (retries included) before its spans are dropped.
EXPORT_TIMEOUT_S = 3.0
#: Deliveries remembered for parenting the run they start (in-process only: a run on another
#: instance, or after a restart, starts a trace of its own with the event ids as attributes).
_REMEMBERED = 2048


def tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER_NAME)


class _Deliveries:
    """Span contexts of recent claimed deliveries, by task, until a run of that task takes them."""

    def __init__(self) -> None:
        self._by_task: OrderedDict[str, list[tuple[str, SpanContext]]] = OrderedDict()

    def remember(self, task_id: str, event_id: str, context: SpanContext) -> None:
        self._by_task.setdefault(task_id, []).append((event_id, context))
        self._by_task.move_to_end(task_id)
        while len(self._by_task) > _REMEMBERED:
            self._by_task.popitem(last=False)

    def take(self, task_id: str) -> list[tuple[str, SpanContext]]:
        return self._by_task.pop(task_id, [])

    def take_portable(self, task_id: str) -> list[list[Any]]:
        """:meth:`take`, as JSON for another process (the HTTP edge's, ``app.intake.edge_wire``)."""
        return [
            [event_id, f"{c.trace_id:032x}", f"{c.span_id:016x}", int(c.trace_flags)]
            for event_id, c in self.take(task_id)
        ]

    def remember_portable(self, task_id: str, spans: Sequence[Sequence[Any]]) -> None:
        """Remember what :meth:`take_portable` took in another process."""
        for event_id, trace_id, span_id, flags in spans:
            context = SpanContext(
                int(trace_id, 16), int(span_id, 16), is_remote=True, trace_flags=TraceFlags(flags)
            )
            self.remember(task_id, str(event_id), context)


DELIVERIES = _Deliveries()


@contextmanager
def delivery_span(body: dict[str, Any]) -> Iterator[Span]:
    """The span of one delivery through the ingress; :func:`delivered` records its outcome."""
    event_id = body.get("event_id")
    attributes = {"threadbound.event_id": event_id} if isinstance(event_id, str) and event_id else {}
    with tracer().start_as_current_span(
        "threadbound delivery", kind=SpanKind.SERVER, attributes=attributes
    ) as span:
        yield span


def delivered(span: Span, body: dict[str, Any], outcome: str, task_id: str | None) -> None:
    """Record a delivery's outcome; a claimed one is remembered as the parent of its run."""
    span.set_attribute("threadbound.outcome", outcome)
    if task_id:
        span.set_attribute("threadbound.task_id", task_id)
    event_id = body.get("event_id")
    if outcome == "claimed" and task_id and isinstance(event_id, str) and span.is_recording():
        DELIVERIES.remember(task_id, event_id, span.get_span_context())


@contextmanager
def click_span(action_id: str) -> Iterator[Span]:
    """The span of one click (a ``block_actions`` action) being handled: its action id, no values."""
    with tracer().start_as_current_span(
        "threadbound click", kind=SpanKind.SERVER, attributes={"threadbound.action_id": action_id}
    ) as span:
        yield span


@dataclass(slots=True)
class RunSpan:
    span: Span
    token: object


def start_run(task_id: str, run_id: str, messages: int) -> RunSpan:
    """Open the run's span and make it current (for pydantic-ai's spans and Slack calls inside it).

    Must be closed by :func:`end_run` in the same task (it resets a context variable)."""
    deliveries = DELIVERIES.take(task_id)
    parent = None
    links: Sequence[Link] = ()
    if deliveries:
        parent = trace.set_span_in_context(trace.NonRecordingSpan(deliveries[0][1]))
        links = [Link(context) for _, context in deliveries[1:]]
    attributes: dict[str, Any] = {
        "threadbound.task_id": task_id,
        "threadbound.run_id": run_id,
        "threadbound.messages": messages,
    }
    if deliveries:
        attributes["threadbound.event_ids"] = [event_id for event_id, _ in deliveries]
    span = tracer().start_span("threadbound run", context=parent, links=links, attributes=attributes)
    token = otel_context.attach(trace.set_span_in_context(span))
    return RunSpan(span, token)


def end_run(run: RunSpan, status: str) -> None:
    run.span.set_attribute("threadbound.outcome", status)
    if status not in ("ok", "stopped"):
        run.span.set_status(Status(StatusCode.ERROR, status))
    try:
        otel_context.detach(run.token)  # type: ignore[arg-type]
    finally:
        run.span.end()


def slack_call(method: str, outcome: str, seconds: float) -> None:
    """A finished Slack Web API call, as a span under the current one."""
    end = time.time_ns()
    span = tracer().start_span(
        f"threadbound slack {method}",
        kind=SpanKind.CLIENT,
        start_time=end - int(seconds * 1e9),
        attributes={"threadbound.slack.method": method, "threadbound.outcome": outcome},
    )
    if outcome != "ok":
        span.set_status(Status(StatusCode.ERROR, outcome))
    span.end(end_time=end)


class TracingUnavailable(Exception):
    """Tracing was asked for (OTEL_EXPORTER_OTLP_ENDPOINT) and cannot work; the message says the fix."""


def flush() -> None:
    """Export the spans still queued and stop exporting: for a process that ends without returning
    to ``main`` (the HTTP edge's, ``app.intake.edge_process``)."""
    shutdown = getattr(trace.get_tracer_provider(), "shutdown", None)
    if callable(shutdown):
        try:
            shutdown()
        except Exception:  # an export that fails is the collector's loss, not a reason to hang
            log.warning("could not flush the last spans", exc_info=True)


def setup_tracing(settings: Settings) -> Any | None:
    """With ``OTEL_EXPORTER_OTLP_ENDPOINT`` set: the process's tracer provider, exporting over OTLP/HTTP
    to ENDPOINT/v1/traces (the exporter reads the other ``OTEL_EXPORTER_OTLP_*`` variables itself,
    headers included), and pydantic-ai instrumented.
    Returns the provider (to shut down, which flushes) or None when tracing is off."""
    if not settings.otel_exporter_otlp_endpoint:
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise TracingUnavailable(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set, but the otel extra is not installed: "
            "pip install 'threadbound[otel]' (or unset OTEL_EXPORTER_OTLP_ENDPOINT)"
        ) from exc
    provider = TracerProvider(resource=Resource.create({"service.name": settings.otel_service_name}))
    provider.add_span_processor(BatchSpanProcessor(_exporter(OTLPSpanExporter, settings)))
    trace.set_tracer_provider(provider)
    instrument_agents(include_content=settings.trace_content)
    log.info("traces go to %s", settings.otel_exporter_otlp_endpoint)
    return provider


def _exporter(exporter: Any, settings: Settings) -> Any:
    """The OTLP/HTTP exporter for OTEL_EXPORTER_OTLP_ENDPOINT, which may come from ./.env (the SDK
    reads only the environment). The SDK's own OTEL_EXPORTER_OTLP_TRACES_ENDPOINT and
    OTEL_EXPORTER_OTLP_TIMEOUT win when set; otherwise an export gives up after EXPORT_TIMEOUT_S, so
    a collector that is down delays the end of a command by seconds, not minutes."""
    endpoint = None
    if not os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        endpoint = settings.otel_exporter_otlp_endpoint.rstrip("/") + "/v1/traces"
    timeout = None if os.environ.get("OTEL_EXPORTER_OTLP_TIMEOUT") else EXPORT_TIMEOUT_S
    return exporter(endpoint=endpoint, timeout=timeout)


def instrument_agents(*, include_content: bool = False) -> None:
    """pydantic-ai's spans (agent run, model requests, tool calls) for every agent, through the global
    tracer provider; prompts, answers, tool arguments and results only with ``include_content``."""
    from pydantic_ai import Agent
    from pydantic_ai.models.instrumented import InstrumentationSettings

    Agent.instrument_all(
        InstrumentationSettings(
            include_content=include_content,
            include_binary_content=include_content,
            include_model_request_parameters=False,
        )
    )


__all__ = [
    "RunSpan",
    "TracingUnavailable",
    "click_span",
    "delivered",
    "delivery_span",
    "end_run",
    "instrument_agents",
    "setup_tracing",
    "slack_call",
    "start_run",
    "tracer",
]
