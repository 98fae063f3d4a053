"""Observability: /metrics, /readyz, structured log lines, and what log lines must never carry."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from app import logs
from tests.support import events
from tests.support.harness import SIGNING_SECRET, AppHarness
from tests.support.models import Turn, call, echo_model, scripted
from threadbound_emulator import FakeSlack

TOKEN = "xoxb-4242-4242-observability-canary"


def _workspace(slack: FakeSlack) -> None:
    slack.add_channel("C1", "general")
    slack.add_user("U1", "alice", display_name="Alice")


def _read_react_reply(turn: Turn) -> list[Any]:
    """Read the thread, react to the first message (the fake may refuse), then reply."""
    if turn.prompt:
        return [call("channel_read")]
    name, result = turn.results[-1]
    if name == "channel_read":
        return [call("channel_react", message=result["messages"][0]["message"], emoji="tada")]
    if name == "channel_react":
        return [call("channel_reply", text="all done")]
    return [""]


async def _samples(app: AppHarness) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = await app.get("/metrics")
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(await response.text()):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def _get(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def test_metrics_count_deliveries_runs_tool_calls_slack_calls_and_model_time(tmp_path: Path) -> None:
    """/metrics counts deliveries by outcome, the run, tool and Slack calls by outcome, and model time."""
    async with FakeSlack() as slack:
        _workspace(slack)
        slack.fail("reactions.add", error="too_many_reactions")
        async with AppHarness(
            slack, model=scripted(_read_react_reply), data_dir=tmp_path, stream="off"
        ) as app:
            ts = slack.add_message("C1", "<@UBOT> hi", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> hi", ts))
            await app.deliver(events.message("C1", "U1", "<@UBOT> hi", ts))
            other = slack.add_message("C1", "people talking", user="U1")
            await app.deliver(events.message("C1", "U1", "people talking", other))
            await app.idle()
            samples = await _samples(app)
        assert _get(samples, "threadbound_deliveries_received_total") == 3
        for outcome in ("claimed", "duplicate", "ignored"):
            assert _get(samples, "threadbound_deliveries_total", outcome=outcome) == 1
        assert _get(samples, "threadbound_runs_started_total") == 1
        assert _get(samples, "threadbound_runs_finished_total", outcome="ok") == 1
        assert _get(samples, "threadbound_tool_calls_total", tool="channel_read", outcome="ok") == 1
        assert _get(samples, "threadbound_tool_calls_total", tool="channel_react", outcome="slack_error") == 1
        assert _get(samples, "threadbound_tool_calls_total", tool="channel_reply", outcome="ok") == 1
        slack_calls = "threadbound_slack_api_calls_total"
        assert _get(samples, slack_calls, method="reactions.add", outcome="too_many_reactions") == 1
        assert _get(samples, slack_calls, method="chat.postMessage", outcome="ok") == 1
        assert _get(samples, slack_calls, method="assistant.threads.setStatus", outcome="ok") >= 2
        assert _get(samples, "threadbound_model_request_duration_seconds_count", outcome="ok") == 4


async def test_two_services_in_one_process_count_their_own_slack_calls(tmp_path: Path) -> None:
    """Each service's /metrics counts the Slack calls of its own adapter only, whichever started last."""
    async with FakeSlack() as slack:
        _workspace(slack)
        async with (
            AppHarness(slack, model=echo_model(), data_dir=tmp_path / "a", stream="off") as first,
            AppHarness(slack, model=echo_model(), data_dir=tmp_path / "b", stream="off") as second,
        ):
            ts = slack.add_message("C1", "<@UBOT> hi", user="U1")
            await first.deliver(events.app_mention("C1", "U1", "<@UBOT> hi", ts))
            await first.idle()
            ours, theirs = await _samples(first), await _samples(second)
        slack_calls = "threadbound_slack_api_calls_total"
        assert _get(ours, slack_calls, method="chat.postMessage", outcome="ok") == 1
        assert _get(theirs, slack_calls, method="chat.postMessage", outcome="ok") == 0
        assert _get(theirs, slack_calls, method="auth.test", outcome="ok") == 1


async def test_readyz_is_503_while_the_store_is_unreachable(tmp_path: Path) -> None:
    """/readyz answers 200 with a working store and 503 once it cannot be reached; /healthz stays 200."""
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path) as app:
            assert (await app.get("/readyz")).status == 200
            assert app.service is not None
            await app.service.store.close()
            assert (await app.get("/readyz")).status == 503
            assert (await app.get("/healthz")).status == 200


async def test_one_structured_line_per_delivery_run_and_tool_call(tmp_path: Path) -> None:
    """Deliveries, runs and tool calls each log one JSON line with their ids, outcome and duration."""
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=scripted(_read_react_reply), data_dir=tmp_path) as app:
            with logs.capture(app.settings, level=logging.INFO) as captured:
                ts = slack.add_message("C1", "<@UBOT> hi", user="U1")
                envelope = events.app_mention("C1", "U1", "<@UBOT> hi", ts)
                await app.deliver(envelope)
                await app.idle()
        (delivery,) = captured.lines("delivery")
        assert delivery["event_id"] == envelope["event_id"] and delivery["channel"] == "C1"
        assert delivery["outcome"] == "claimed" and delivery["reason"] == "mention"
        assert isinstance(delivery["duration_ms"], float | int)
        (started,) = captured.lines("run started")
        (finished,) = captured.lines("run finished")
        assert finished["task"] == delivery["task"] == started["task"]
        assert finished["run"] == started["run"] and "event_id" not in finished
        assert finished["outcome"] == "ok" and finished["tools"] == 3 and finished["duration_ms"] >= 0
        tools = captured.lines("tool call")
        assert [(t["tool"], t["outcome"]) for t in tools] == [
            ("channel_read", "ok"),
            ("channel_react", "ok"),
            ("channel_reply", "ok"),
        ]
        assert all(t["run"] == finished["run"] and "duration_ms" in t for t in tools)


async def test_logs_never_contain_the_token(tmp_path: Path) -> None:
    """A full run with failing Slack calls logs at DEBUG without the bot token or signing secret anywhere."""
    async with FakeSlack(token=TOKEN) as slack:
        _workspace(slack)
        slack.fail("assistant.threads.setStatus", error="invalid_auth", times=None)
        slack.fail("reactions.add", error="too_many_reactions", times=None)
        async with AppHarness(slack, model=scripted(_read_react_reply), data_dir=tmp_path) as app:
            with logs.capture(app.settings, level=logging.DEBUG) as captured:
                ts = slack.add_message("C1", "<@UBOT> hi", user="U1")
                await app.deliver(events.app_mention("C1", "U1", "<@UBOT> hi", ts))
                await app.idle()
        failed = {(line["method"], line["code"]) for line in captured.lines("slack call failed")}
        assert ("reactions.add", "too_many_reactions") in failed
        assert ("assistant.threads.setStatus", "invalid_auth") in failed
        assert slack.bot_messages("C1")[-1]["text"] == "all done"
        assert TOKEN not in captured.text
        assert SIGNING_SECRET not in captured.text
        assert "[redacted]" not in captured.text  # nothing even tried to log it


async def test_a_token_that_reaches_a_log_line_is_redacted(tmp_path: Path) -> None:
    """The formatter replaces the configured token and anything token-shaped, in messages and fields."""
    async with FakeSlack(token=TOKEN) as slack:
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path) as app:
            with logs.capture(app.settings) as captured:
                logs.event(logging.getLogger("test"), f"oops {TOKEN}", leaked="xoxp-1234567890-abcdef")
        assert TOKEN not in captured.text and "xoxp-1234567890" not in captured.text
        assert captured.text.count("redacted") == 2


async def test_message_preview_is_logged_with_log_previews_and_absent_without(tmp_path: Path) -> None:
    """With LOG_PREVIEWS the delivery line carries a short text preview; without, no line has text."""
    text = "<@UBOT> the pineapple shipment " + "is late again " * 20
    for previews in (True, False):
        async with FakeSlack() as slack:
            _workspace(slack)
            async with AppHarness(
                slack, model=echo_model(), data_dir=tmp_path / str(previews), log_previews=previews
            ) as app:
                with logs.capture(app.settings, level=logging.DEBUG) as captured:
                    ts = slack.add_message("C1", text, user="U1")
                    await app.deliver(events.app_mention("C1", "U1", text, ts))
                    await app.idle()
            (delivery,) = captured.lines("delivery")
            if previews:
                assert "pineapple" in delivery["preview"]
                assert len(delivery["preview"]) <= logs.PREVIEW_CHARS
                assert "is late again is late again is late again" not in captured.text
            else:
                assert "preview" not in delivery
                assert "pineapple" not in captured.text


async def test_metrics_token_guards_the_metrics_endpoint(tmp_path: Path) -> None:
    """With METRICS_TOKEN set, /metrics answers 401 without the bearer token and 200 with it."""
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path, metrics_token="m-secret") as app:
            assert (await app.get("/metrics")).status == 401
            assert app._http is not None
            async with app._http.get(
                f"{app.url}/metrics", headers={"Authorization": "Bearer m-secret"}
            ) as ok:
                assert ok.status == 200
                assert "threadbound_deliveries_received_total" in await ok.text()


async def test_a_run_leaves_no_log_fields_behind(tmp_path: Path) -> None:
    """The task and run fields bound for a run are gone from the caller's log context when it ends."""
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path) as app:
            assert app.service is not None
            task = await app.service.store.create_task(channel="C1", thread_ts="", now=0.0)
            before = dict(logs._FIELDS.get())
            outcome = await app.service.runner.run_prompt(task, "hello", adopt_first_root=True)
            assert outcome.status == "ok"
            assert dict(logs._FIELDS.get()) == before


async def test_a_model_request_cut_off_by_the_runs_end_is_counted_as_an_error(tmp_path: Path) -> None:
    """A request still in flight when the run ends (RUN_TIMEOUT cancels it) is timed and counted as
    an error, not left out of the model latency metric."""
    async with FakeSlack() as slack:
        _workspace(slack)
        never = scripted(lambda turn: ["too late"], delay=60.0)
        async with AppHarness(slack, model=never, data_dir=tmp_path, stream="off", run_timeout=0.5) as app:
            ts = slack.add_message("C1", "<@UBOT> hi", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> hi", ts))
            await app.idle()
            samples = await _samples(app)
        assert _get(samples, "threadbound_model_request_duration_seconds_count", outcome="error") == 1
        assert _get(samples, "threadbound_model_request_duration_seconds_count", outcome="ok") == 0
