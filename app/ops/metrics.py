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
        r = self.registry
        self.deliveries_received = Counter(
            "threadbound_deliveries_received", "Event deliveries received from Slack.", registry=r
        )
        self.deliveries = Counter(
            "threadbound_deliveries", "Event deliveries by outcome.", ["outcome"], registry=r
        )
        self.runs_started = Counter("threadbound_runs_started", "Agent runs started.", registry=r)
        self.runs_finished = Counter(
            "threadbound_runs_finished", "Agent runs finished, by outcome.", ["outcome"], registry=r
        )
        self.run_duration = Histogram(
            "threadbound_run_duration_seconds", "Duration of agent runs.", buckets=_RUN_BUCKETS, registry=r
        )
        self.tool_calls = Counter(
            "threadbound_tool_calls",
            "Channel tool calls by tool and outcome.",
            ["tool", "outcome"],
            registry=r,
        )
        self.slack_calls = Counter(
            "threadbound_slack_api_calls",
            "Slack Web API calls by method and outcome.",
            ["method", "outcome"],
            registry=r,
        )
        self.model_latency = Histogram(
            "threadbound_model_request_duration_seconds",
            "Time per model request.",
            ["outcome"],
            buckets=_MODEL_BUCKETS,
            registry=r,
        )

        self.model_tokens = Counter(
            "threadbound_model_tokens",
            "Model tokens by kind (input includes cache reads and writes, as providers report it).",
            ["kind"],
            registry=r,
        )
        self.model_requests = Counter(
            "threadbound_model_requests", "Model requests whose usage was recorded.", registry=r
        )
        self.budget_hits = Counter(
            "threadbound_budget_hits",
            "Requests refused and runs stopped by a daily token budget.",
            ["budget"],
            registry=r,
        )
        self.feedback = Counter(
            "threadbound_feedback", "Clicks on answers' feedback buttons, by kind.", ["kind"], registry=r
        )
        self.silent_turns = Counter(
            "threadbound_silent_turns", "Turns the model ended with no_reply (nothing posted).", registry=r
        )

        self.follow_ups_pending = Gauge(
            "threadbound_follow_ups_pending", "Follow-ups scheduled and not yet fired.", registry=r
        )
        self.follow_ups_fired = Counter(
            "threadbound_follow_ups_fired", "Follow-ups fired into their task's inbox.", registry=r
        )
        self.follow_ups_cancelled = Counter(
            "threadbound_follow_ups_cancelled", "Follow-ups cancelled before they fired.", registry=r
        )
        self.follow_ups_late = Counter(
            "threadbound_follow_ups_late",
            "Follow-ups fired more than a minute after they were due.",
            registry=r,
        )

    def render(self) -> bytes:
        """The registry in the Prometheus text format (``CONTENT_TYPE_LATEST``)."""
        return generate_latest(self.registry)
