"""Feedback buttons under each answer: clicks stored per person and answer, counted, shown once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import Turn, call, scripted
from threadbound_emulator import FakeSlack


def _buttons(message: dict[str, Any]) -> dict[str, Any]:
    [block] = [b for b in message["blocks"] if b["type"] == "context_actions"]
    [element] = block["elements"]
    assert element["type"] == "feedback_buttons"
    return element


async def test_clicks_are_stored_counted_replaced_and_shown_on_the_next_turn(tmp_path: Path) -> None:
    """Alice's second click replaces her first; /metrics counts both; the next run's prompt says so once."""
    prompts: list[str] = []

    def script(turn: Turn) -> list[Any]:
        if turn.prompt:
            prompts.append(turn.prompt)
            return [call("channel_reply", text=f"answer {len(prompts)}")]
        return [""]

    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
            root = slack.add_message("C1", "<@UBOT> help", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> help", root))
            await app.idle()
            [answer] = slack.bot_messages("C1")
            buttons = _buttons(answer)
            assert buttons["action_id"] == "threadbound_feedback"
            negative = buttons["negative_button"]["value"]
            positive = buttons["positive_button"]["value"]
            for value in (negative, positive):
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
            metrics = await app.get("/metrics")
            text = await metrics.text()
            assert 'threadbound_feedback_total{kind="negative"} 1.0' in text
            assert 'threadbound_feedback_total{kind="positive"} 1.0' in text
            for n in (2, 3):
                ts = slack.add_message("C1", f"follow-up {n}", user="U1", thread_ts=root)
                await app.deliver(events.message("C1", "U1", f"follow-up {n}", ts, thread_ts=root))
                await app.idle()
        notes = [p for p in prompts if "marked your answer" in p]
        assert len(notes) == 1 and notes[0] is prompts[1]
        assert "Alice marked your answer msg_" in notes[0] and "as helpful." in notes[0]
        assert "not helpful" not in notes[0]


async def test_a_malformed_or_foreign_click_is_acknowledged_and_ignored(tmp_path: Path) -> None:
    """A click naming no known task, or no kind, gets its 200 and stores nothing."""
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        async with AppHarness(slack, model=scripted(lambda t: [""]), data_dir=tmp_path) as app:
            for value in ("negative:no-such-task", "garbage"):
                click = events.block_actions(
                    channel="C1",
                    user="U1",
                    message_ts="1.000200",
                    action_id="threadbound_feedback",
                    value=value,
                )
                assert (await app.click(click)).status == 200
            text = await (await app.get("/metrics")).text()
            assert 'threadbound_feedback_total{kind="negative"}' not in text


async def test_a_crafted_container_pointing_elsewhere_gives_the_model_nothing(tmp_path: Path) -> None:
    """A feedback click naming the task but whose container points at a #finance message (or at a
    person's message in the task's own thread) is ignored: nothing stored or counted, and the next
    run's prompt carries no handle for it, so channel_react cannot reach #finance."""
    prompts: list[str] = []

    def script(turn: Turn) -> list[Any]:
        if turn.prompt:
            prompts.append(turn.prompt)
            return [call("channel_reply", text=f"answer {len(prompts)}")]
        return [""]

    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_channel("C9", "finance")
        slack.add_user("U1", "alice", display_name="Alice")
        secret = slack.add_message("C9", "Q3 numbers", user="U1")
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
            root = slack.add_message("C1", "<@UBOT> help", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> help", root))
            await app.idle()
            [answer] = slack.bot_messages("C1")
            value = _buttons(answer)["positive_button"]["value"]
            for channel, ts, thread in (("C9", secret, secret), ("C1", root, root)):
                click = events.block_actions(
                    channel=channel,
                    user="U1",
                    message_ts=ts,
                    thread_ts=thread,
                    action_id="threadbound_feedback",
                    value=value,
                    element="feedback_buttons",
                )
                assert (await app.click(click)).status == 200
            assert app.service is not None
            task_id = value.partition(":")[2]
            assert await app.service.store.pending_feedback(task_id) == []
            text = await (await app.get("/metrics")).text()
            assert 'threadbound_feedback_total{kind="positive"} 1.0' not in text
            ts = slack.add_message("C1", "follow-up", user="U1", thread_ts=root)
            await app.deliver(events.message("C1", "U1", "follow-up", ts, thread_ts=root))
            await app.idle()
            assert await app.service.store.find_handle(task_id, "msg", f"C9:{secret}") is None
        assert len(prompts) == 2 and "marked your answer" not in prompts[1]
