"""Clicks (signed ``block_actions`` interactions) reach the handler registered for their action id."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from app.intake.interactions import Action, Interactions
from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import echo_model
from threadbound_emulator import FakeSlack


async def test_a_signed_click_reaches_its_handler_over_http(tmp_path: Path) -> None:
    """A form-encoded, signed block_actions POST to /slack/events is acknowledged and routed by action id."""
    seen: list[Action] = []

    async def record(action: Action) -> None:
        seen.append(action)

    async with FakeSlack() as slack, AppHarness(slack, model=echo_model(), data_dir=tmp_path) as app:
        assert app.service is not None
        app.service.interactions.on("test_action", record)
        payload = events.block_actions(
            channel="C1",
            user="U1",
            message_ts="1.000200",
            thread_ts="1.000100",
            action_id="test_action",
            value="v1",
            user_name="alice",
        )
        response = await app.click(payload)
        assert response.status == 200
        other = events.block_actions(
            channel="C1", user="U1", message_ts="1.0002", action_id="nobody", value="x"
        )
        assert (await app.click(other)).status == 200
    assert [
        (a.action_id, a.value, a.user_id, a.user_name, a.channel, a.message_ts, a.thread_ts) for a in seen
    ] == [("test_action", "v1", "U1", "alice", "C1", "1.000200", "1.000100")]


async def test_an_unsigned_click_is_refused(tmp_path: Path) -> None:
    """A click with a bad signature gets 401 and reaches no handler."""
    seen: list[Action] = []

    async def record(action: Action) -> None:
        seen.append(action)

    async with FakeSlack() as slack, AppHarness(slack, model=echo_model(), data_dir=tmp_path) as app:
        assert app.service is not None and app.url
        app.service.interactions.on("test_action", record)
        payload = events.block_actions(
            channel="C1", user="U1", message_ts="1.0002", action_id="test_action", value="v"
        )

        async with aiohttp.ClientSession() as http:
            response = await events.deliver_interaction(
                http, f"{app.url}/slack/events", payload, "wrong-secret"
            )
        assert response.status == 401
    assert seen == []


async def test_a_failing_handler_still_acknowledges_and_others_run() -> None:
    """One handler raising is logged; the click is still acknowledged and later actions still run."""
    interactions = Interactions()
    ran: list[str] = []

    async def broken(action: Action) -> None:
        raise RuntimeError("boom")

    async def fine(action: Action) -> None:
        ran.append(action.value)

    interactions.on("a", broken)
    interactions.on("b", fine)
    payload = events.block_actions(channel="C1", user="U1", message_ts="1.0002", action_id="a", value="1")
    payload["actions"].append({**payload["actions"][0], "action_id": "b", "value": "2"})
    assert await interactions.handle(payload) == (200, "")
    assert ran == ["2"]
    with pytest.raises(ValueError):
        interactions.on("a", fine)
