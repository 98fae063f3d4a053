"""Traces: each run is one connected trace, from the Slack delivery through the run, its model
requests and tool calls to its Slack calls, carrying ids and never message text.

Spans go to the OpenTelemetry SDK's in-memory exporter, installed as the process's tracer provider
(as ``setup_tracing`` installs the OTLP one); pydantic-ai is instrumented as in production."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent

from app.__main__ import main
from app.settings import Settings
from app.traces import instrument_agents
from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import Turn, call, scripted
from threadbound_emulator import FakeSlack

SECRET = "the launch code is swordfish"
EXPORTER = InMemorySpanExporter()


class _WhileTesting(SimpleSpanProcessor):
    """Exports only during this module's tests: the global provider cannot be unset afterwards."""

    active = False

    def on_end(self, span: ReadableSpan) -> None:
        if self.active:
            super().on_end(span)


PROCESSOR = _WhileTesting(EXPORTER)


@pytest.fixture(autouse=True)
def spans() -> Iterator[InMemorySpanExporter]:
    """The in-memory exporter on the global tracer provider, and pydantic-ai instrumented, for one test."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    if PROCESSOR not in provider._active_span_processor._span_processors:  # another module's set it
        provider.add_span_processor(PROCESSOR)
    EXPORTER.clear()
    PROCESSOR.active = True
    instrument_agents(include_content=False)
    try:
        yield EXPORTER
    finally:
        Agent.instrument_all(False)
        PROCESSOR.active = False
        EXPORTER.clear()


def script(turn: Turn) -> list[Any]:
    if turn.step == 0:
        return [
            call("channel_react", message=_handle(turn), emoji="eyes"),
            call("channel_reply", text=SECRET),
        ]
    return [""]


def _handle(turn: Turn) -> str:
    """The handle of the message in the prompt (whatever the prompt's layout)."""
    found = re.search(r"msg_[A-Za-z0-9_-]{6,}", turn.prompt)
    assert found is not None, turn.prompt
    return found.group(0)


async def mention_twice(tmp_path: Path) -> None:
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path, stream="off") as app:
            for text in (f"<@UBOT> {SECRET}?", "<@UBOT> another question"):
                ts = slack.add_message("C1", text, user="U1")
                await app.deliver(
                    events.app_mention("C1", "U1", text, ts, event_id=f"Ev{ts.replace('.', '')}")
                )
                await app.idle()


def by_trace(spans: tuple[ReadableSpan, ...]) -> dict[int, list[ReadableSpan]]:
    traces: dict[int, list[ReadableSpan]] = {}
    for span in spans:
        assert span.context is not None
        traces.setdefault(span.context.trace_id, []).append(span)
    return traces


async def test_each_run_is_one_connected_trace(tmp_path: Path, spans: InMemorySpanExporter) -> None:
    """Two mentions give two traces; each has the delivery as its root, the run under it, pydantic-ai's
    model request and tool call spans inside the run, and the Slack calls; every span's parent is in
    the same trace."""
    await mention_twice(tmp_path)
    runs = [s for s in spans.get_finished_spans() if s.name == "threadbound run"]
    assert len(runs) == 2
    traces = by_trace(spans.get_finished_spans())
    for run in runs:
        assert run.context is not None and run.parent is not None
        members = traces[run.context.trace_id]
        ids = {s.context.span_id for s in members if s.context is not None}
        roots = [s for s in members if s.parent is None]
        assert [r.name for r in roots] == ["threadbound delivery"]
        assert all(s.parent is None or s.parent.span_id in ids for s in members)
        names = [s.name for s in members]
        assert run.parent.span_id == roots[0].context.span_id  # type: ignore[union-attr]
        assert any(n.startswith("chat ") for n in names), names  # pydantic-ai's model request
        assert any("channel_reply" in n for n in names), names  # pydantic-ai's tool call
        assert "threadbound slack chat.postMessage" in names and "threadbound slack reactions.add" in names
    assert len({run.context.trace_id for run in runs if run.context is not None}) == 2


async def test_spans_carry_ids_and_never_message_text(tmp_path: Path, spans: InMemorySpanExporter) -> None:
    """The run span names its task and the event that started it; no span attribute or event holds the
    message text or the reply."""
    await mention_twice(tmp_path)
    finished = spans.get_finished_spans()
    deliveries = [s for s in finished if s.name == "threadbound delivery"]
    runs = [s for s in finished if s.name == "threadbound run"]
    first_event = dict(deliveries[0].attributes or {})["threadbound.event_id"]
    run_attributes = dict(runs[0].attributes or {})
    assert tuple(run_attributes["threadbound.event_ids"]) == (first_event,)  # type: ignore[arg-type]
    assert (
        run_attributes["threadbound.task_id"] == dict(deliveries[0].attributes or {})["threadbound.task_id"]
    )
    dumped = json.dumps(
        [[dict(s.attributes or {}), [dict(e.attributes or {}) for e in s.events]] for s in finished],
        default=str,
    )
    assert "swordfish" not in dumped and "another question" not in dumped


async def test_a_click_is_a_span_with_its_action_id(tmp_path: Path, spans: InMemorySpanExporter) -> None:
    """A feedback click is handled inside a `threadbound click` span naming the action, never its value."""

    def replying(turn: Turn) -> list[Any]:
        return [call("channel_reply", text="an answer")] if turn.prompt else [""]

    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        async with AppHarness(slack, model=scripted(replying), data_dir=tmp_path) as app:
            root = slack.add_message("C1", "<@UBOT> help", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> help", root))
            await app.idle()
            [answer] = slack.bot_messages("C1")
            [block] = [b for b in answer["blocks"] if b.get("type") == "context_actions"]
            value = block["elements"][0]["positive_button"]["value"]
            click = events.block_actions(
                channel="C1",
                user="U1",
                message_ts=answer["ts"],
                thread_ts=root,
                action_id="threadbound_feedback",
                value=value,
                element="feedback_buttons",
            )
            assert (await app.click(click)).status == 200
    [clicked] = [s for s in spans.get_finished_spans() if s.name == "threadbound click"]
    assert dict(clicked.attributes or {}) == {"threadbound.action_id": "threadbound_feedback"}


def test_an_endpoint_without_the_extra_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """OTEL_EXPORTER_OTLP_ENDPOINT set without the otel extra stops any command with one line naming it."""
    import sys

    monkeypatch.chdir(tmp_path)
    for name in Settings.model_fields:
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    assert main(["usage"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "threadbound: cannot start: OTEL_EXPORTER_OTLP_ENDPOINT is set, but the otel extra is not installed: "
        "pip install 'threadbound[otel]' (or unset OTEL_EXPORTER_OTLP_ENDPOINT)"
    ]


@pytest.mark.process
async def test_spans_reach_the_otlp_endpoint(tmp_path: Path) -> None:
    """With OTEL_EXPORTER_OTLP_ENDPOINT set (here in the settings only, as from ./.env: not in the
    environment the SDK reads), a process's spans are POSTed to ENDPOINT/v1/traces over OTLP/HTTP,
    flushed when the command ends."""
    import asyncio
    import sys

    from aiohttp import web

    from tests.support.harness import free_port

    received: list[bytes] = []

    async def traces(request: web.Request) -> web.Response:
        received.append(await request.read())
        return web.Response(body=b"", content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    script = (
        "from app.settings import Settings\n"
        "from app import traces\n"
        f"provider = traces.setup_tracing(Settings(_env_file=None, otel_exporter_otlp_endpoint='http://127.0.0.1:{port}'))\n"
        "traces.slack_call('auth.test', 'ok', 0.25)\n"
        "provider.shutdown()\n"
    )
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    try:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script, env=env, cwd=tmp_path)
        assert await asyncio.wait_for(proc.wait(), 60) == 0
    finally:
        await runner.cleanup()
    assert received and b"threadbound slack auth.test" in b"".join(received)
