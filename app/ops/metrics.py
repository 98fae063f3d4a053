"""Prometheus metrics, served on ``GET /metrics``.

Every :class:`Metrics` has its own ``CollectorRegistry``, never the process-global
one, so a process (or a test session) can build many services without their
counters colliding. Label values are bounded sets: delivery outcomes, tool names,
contract error codes, Slack method names and Slack's own error strings.

| metric | labels |
| --- | --- |
| ``threadbound_deliveries_received_total`` | |
| ``threadbound_deliveries_total`` | ``outcome``: claimed, duplicate, ignored, invalid, unavailable |
| ``threadbound_runs_started_total`` | |
| ``threadbound_runs_finished_total`` | ``outcome``: ok, failed |
| ``threadbound_run_duration_seconds`` | |
| ``threadbound_tool_calls_total`` | ``tool``, ``outcome``: ok or the error code |
| ``threadbound_slack_api_calls_total`` | ``method``, ``outcome``: ok, Slack's error, or transport |
| ``threadbound_model_request_duration_seconds`` | ``outcome``: ok, error |
| ``threadbound_model_tokens_total`` | ``kind``: input, output, cache_read, cache_write |
| ``threadbound_model_requests_total`` | |
| ``threadbound_budget_hits_total`` | ``budget``: user, install |
| ``threadbound_feedback_total`` | ``kind``: positive, negative |
| ``threadbound_follow_ups_pending`` | (gauge: pending across the install, as the store counts them) |
| ``threadbound_follow_ups_fired_total`` / ``_cancelled_total`` / ``_late_total`` | |
"""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]

# Model requests take from a fraction of a second to minutes; runs add tools and several requests.
_MODEL_BUCKETS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0)
_RUN_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.deliveries_received = self._counter(
            "deliveries_received", "Event deliveries received from Slack."
        )
        self.deliveries = self._counter("deliveries", "Event deliveries by outcome.", "outcome")
        self.runs_started = self._counter("runs_started", "Agent runs started.")
        self.runs_finished = self._counter("runs_finished", "Agent runs finished, by outcome.", "outcome")
        self.run_duration = Histogram(
            "threadbound_run_duration_seconds",
            "Duration of agent runs.",
            buckets=_RUN_BUCKETS,
            registry=self.registry,
        )
        self.tool_calls = self._counter(
            "tool_calls", "Channel tool calls by tool and outcome.", "tool", "outcome"
        )
        self.slack_calls = self._counter(
            "slack_api_calls", "Slack Web API calls by method and outcome.", "method", "outcome"
        )
        self.model_latency = Histogram(
            "threadbound_model_request_duration_seconds",
            "Time per model request.",
            ["outcome"],
            buckets=_MODEL_BUCKETS,
            registry=self.registry,
        )

        self.model_tokens = self._counter(
            "model_tokens",
            "Model tokens by kind (input includes cache reads and writes, as providers report it).",
            "kind",
        )
        self.model_requests = self._counter("model_requests", "Model requests whose usage was recorded.")
        self.budget_hits = self._counter(
            "budget_hits", "Requests refused and runs stopped by a daily token budget.", "budget"
        )
        self.feedback = self._counter("feedback", "Clicks on answers' feedback buttons, by kind.", "kind")
        self.silent_turns = self._counter(
            "silent_turns", "Turns the model ended with no_reply (nothing posted)."
        )

        self.follow_ups_pending = Gauge(
            "threadbound_follow_ups_pending",
            "Follow-ups scheduled and not yet fired.",
            registry=self.registry,
        )
        self.follow_ups_fired = self._counter("follow_ups_fired", "Follow-ups fired into their task's inbox.")
        self.follow_ups_cancelled = self._counter(
            "follow_ups_cancelled", "Follow-ups cancelled before they fired."
        )
        self.follow_ups_late = self._counter(
            "follow_ups_late", "Follow-ups fired more than a minute after they were due."
        )

    def _counter(self, name: str, documentation: str, *labels: str) -> Counter:
        """``threadbound_<name>_total`` in this registry, labelled by ``labels``."""
        return Counter(f"threadbound_{name}", documentation, labels, registry=self.registry)

    def render(self) -> bytes:
        """The registry in the Prometheus text format (``CONTENT_TYPE_LATEST``)."""
        return generate_latest(self.registry)
