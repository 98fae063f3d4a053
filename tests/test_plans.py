"""A streamed answer's steps show in Slack's plan display where offered, else as today's task cards."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from channel.slack.stream import PLAN_TITLE, SlackLiveMessage
from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import Turn, call, scripted
from threadbound_emulator import FakeSlack

ANSWER = "The thread agrees: ship on Friday."


def _two_steps(turn: Turn) -> list[Any]:
    """Reads the thread, then searches for more tools, then answers: a run of several steps."""
    if turn.prompt:
        return [call("channel_read")]
    done = [name for name, _ in turn.results]
    if done and done[-1] == "channel_read":
        return [call("tool_search", query="edit", limit=1)]
    return [ANSWER] if done else [""]


@pytest.fixture(autouse=True)
def _plans_again() -> Any:
    """Each test starts with plans on (a refusal turns them off for the process)."""
    SlackLiveMessage.plans = True
    yield
    SlackLiveMessage.plans = True


async def _answer(slack: FakeSlack, tmp_path: Path) -> None:
    async with AppHarness(slack, model=scripted(_two_steps, chunk=40), data_dir=tmp_path) as app:
        assert app.service is not None
        app.service.runner.executor.stream_interval = 0.05
        ts = slack.add_message("C1", "<@UBOT> when do we ship?", user="U1")
        assert (
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> when do we ship?", ts))
        ).status == 200
        await app.idle()


async def test_a_multi_step_run_shows_its_steps_as_a_plan(slack: FakeSlack, tmp_path: Path) -> None:
    """The stream asks for the plan display, titles the plan once, and every step is a task of it."""
    await _answer(slack, tmp_path)
    [stream] = slack.streams.values()
    assert stream.display_mode == "plan"
    assert stream.plan_titles == [PLAN_TITLE]
    assert len(stream.tasks) == 2 and all(status == "complete" for _, status in stream.tasks.values())
    assert stream.text == ANSWER


async def test_where_plans_are_not_offered_the_steps_show_as_task_cards(
    slack: FakeSlack, tmp_path: Path
) -> None:
    """Slack refusing the plan display: the stream starts again without it (nothing posted twice), the
    steps show as today's task cards, and later answers no longer ask for it."""
    slack.plans_offered = False
    await _answer(slack, tmp_path)
    [stream] = slack.streams.values()
    assert stream.display_mode == "timeline" and stream.plan_titles == []
    assert len(stream.tasks) == 2
    assert [m["text"] for m in slack.bot_messages("C1")] == [ANSWER]
    assert not SlackLiveMessage.plans
