"""The ack path: a signed Events API delivery is claimed without Bolt, answered, then logged; model
requests of working runs step aside while deliveries wait for their 200."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from app import logs
from app.ops import observe
from app.ops.observe import ModelTiming, Observer
from app.runs.ack_gate import AckGate
from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import echo_model
from threadbound_emulator import FakeSlack


def _workspace(slack: FakeSlack) -> None:
    slack.add_user("U1", "alice")
    slack.add_channel("C1", "general")


async def test_an_event_callback_is_claimed_without_bolt_and_url_verification_still_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signed JSON event_callback never reaches Bolt's dispatch yet is claimed and answered in
    its thread; a url_verification still goes through Bolt and gets its challenge back."""
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path) as app:
            assert app.service is not None
            bolt = app.service.bolt
            dispatched: list[object] = []
            real = bolt.async_dispatch

            async def spy(request: Any) -> Any:
                dispatched.append(request)
                return await real(request)

            monkeypatch.setattr(bolt, "async_dispatch", spy)
            ts = slack.add_message("C1", "<@UBOT> hello", "U1")
            response = await app.deliver(events.app_mention("C1", "U1", "<@UBOT> hello", ts))
            assert response.status == 200
            await app.idle()
            assert dispatched == []
            assert any("hello" in str(m.get("text")) for m in slack.bot_messages())
            challenge = await app.deliver(events.url_verification("c-123"))
            assert challenge.status == 200 and "c-123" in await challenge.text()
            assert len(dispatched) == 1


async def test_a_delivery_is_logged_only_after_its_answer_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The delivery log line (and the delivery metrics) come after the 200 was written: only the
    claim stands between a delivery and its acknowledgement."""
    order: list[str] = []
    real_eof = web.StreamResponse.write_eof

    async def write_eof(self: web.StreamResponse, data: bytes = b"") -> None:
        order.append(f"answer {self.status}")
        await real_eof(self, data)

    monkeypatch.setattr(web.StreamResponse, "write_eof", write_eof)
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path) as app:
            assert app.service is not None
            real_log = app.service.ingress._log

            def log(*args: Any) -> None:
                order.append("logged")
                real_log(*args)

            monkeypatch.setattr(app.service.ingress, "_log", log)
            ts = slack.add_message("C1", "<@UBOT> hi", "U1")
            order.clear()  # the harness's own requests before
            with logs.capture(app.settings, level=logging.INFO) as captured:
                assert (await app.deliver(events.app_mention("C1", "U1", "<@UBOT> hi", ts))).status == 200
                await app.idle()
    assert order[0] == "answer 200" and "logged" in order
    assert [line["outcome"] for line in captured.lines("delivery")] == ["claimed"]


async def test_a_model_request_waits_while_a_delivery_waits_for_its_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A working run's model request is not sent while a delivery is being acknowledged; it goes
    as soon as no delivery is in flight."""
    monkeypatch.setattr(observe, "MODEL_PATIENCE", 3600.0)  # only the gate can let it through
    gate = AckGate()
    sent: list[int] = []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent.append(len(messages))
        return ModelResponse(parts=[TextPart("ok")])

    agent = Agent(FunctionModel(answer), capabilities=[ModelTiming(Observer(), gate)])
    with gate.acking():
        run = asyncio.create_task(agent.run("hi"))
        await asyncio.sleep(0.3)  # without the gate the request is sent (and answered) well within this
        assert not run.done() and not sent
    result = await asyncio.wait_for(run, 30)
    assert result.output == "ok" and sent == [1]
