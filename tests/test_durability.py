"""Durability: crashes, restarts, signals, leases, the effect journal and write safety on the wire."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from channel.contract import Origin
from tests.support import events
from tests.support.fake_model import FakeOpenAI, Reply, last_user_text
from tests.support.harness import SIGNING_SECRET, AppHarness
from tests.support.models import Turn, call, scripted
from tests.support.process import ServerProcess
from tests.support.sessions import SessionEnv, slack_session
from tests.support.waiting import eventually
from threadbound_emulator import FakeSlack


def _workspace(slack: FakeSlack) -> None:
    slack.add_channel("C1", "general")
    slack.add_user("U1", "alice", display_name="Alice")


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[SessionEnv]:
    """A session on the thread of a plain message by Alice in #general."""
    async with FakeSlack() as slack:
        _workspace(slack)
        root = slack.add_message("C1", "root", user="U1")
        async with slack_session(slack, tmp_path, channel="C1", thread_ts=root) as env:
            yield env


def _server_env(slack: FakeSlack, llm: FakeOpenAI, data_dir: Path) -> dict[str, str]:
    return {
        "SLACK_BOT_TOKEN": slack.token,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": slack.api_url,
        "DATA_DIR": str(data_dir),
        "MODEL": "openai-chat:fake",
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "x",
        "LEASE_TTL": "2",
        "SWEEP_INTERVAL": "0.5",
        "SHUTDOWN_GRACE": "10",
        # These tests hold and drop chat.postMessage: answers are posted whole (streams: test_streaming.py).
        "STREAM": "off",
    }


def _crash_script(request: dict[str, Any]) -> Reply:
    """Echo a person once; after a tool result, or when told a reply was recovered, stay silent."""
    messages = request.get("messages") or [{}]
    text = last_user_text(request)
    if messages[-1].get("role") == "tool" or "interrupted" in text:
        return FakeOpenAI.text("")
    return FakeOpenAI.tool_call("channel_reply", {"text": f"echo: {text.splitlines()[0]}"})


@pytest.mark.process
async def test_a_post_interrupted_by_a_crash_is_never_repeated(tmp_path: Path) -> None:
    """SIGKILL while chat.postMessage is in flight: after restart the post exists once and follow-ups work."""
    async with FakeSlack() as slack, FakeOpenAI(_crash_script) as llm, aiohttp.ClientSession() as http:
        _workspace(slack)
        env = _server_env(slack, llm, tmp_path / "data")
        first = ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "server1.log")
        await first.start()
        slack.hold("chat.postMessage")
        root = slack.add_message("C1", "<@UBOT> write the summary", user="U1")
        response = await events.deliver(
            http,
            f"{first.url}/slack/events",
            events.app_mention("C1", "U1", "<@UBOT> write the summary", root),
            SIGNING_SECRET,
        )
        assert response.status == 200
        await asyncio.wait_for(slack.held("chat.postMessage").wait(), 20)
        first.kill()
        await first.wait()
        slack.release("chat.postMessage")
        assert len(slack.bot_messages("C1")) == 1  # Slack stored it; the process never heard back

        second = ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "server2.log")
        await second.start()
        try:
            # The restarted process reconciles the open effect (lease expiry + sweep) without posting again.
            await eventually(lambda: any("interrupted" in last_user_text(r) for r in llm.requests))
            follow = slack.add_message("C1", "thanks! one more thing", user="U1", thread_ts=root)
            await events.deliver(
                http,
                f"{second.url}/slack/events",
                events.message("C1", "U1", "thanks! one more thing", follow, thread_ts=root),
                SIGNING_SECRET,
            )
            await eventually(lambda: len(slack.bot_messages("C1")) >= 2)
        finally:
            # SIGTERM lets running turns finish: a wrong duplicate would be posted before it exits.
            await second.stop()
        texts = [m["text"] for m in slack.bot_messages("C1")]
        assert sum("write the summary" in t for t in texts) == 1
        assert any("one more thing" in t for t in texts)
        assert len(texts) == 2
        recovered = next(r for r in llm.requests if "interrupted" in last_user_text(r))
        assert "was posted as msg_" in last_user_text(recovered)


@pytest.mark.process
async def test_sigterm_lets_the_running_turn_finish_and_exits_zero(tmp_path: Path) -> None:
    """SIGTERM during a run: the server stops accepting, the turn completes, and the process exits 0."""
    async with FakeSlack() as slack, FakeOpenAI(delay=1.0) as llm, aiohttp.ClientSession() as http:
        _workspace(slack)
        server = ServerProcess(
            _server_env(slack, llm, tmp_path / "data"), cwd=tmp_path, log_path=tmp_path / "s.log"
        )
        await server.start()
        root = slack.add_message("C1", "<@UBOT> slow question", user="U1")
        await events.deliver(
            http,
            f"{server.url}/slack/events",
            events.app_mention("C1", "U1", "<@UBOT> slow question", root),
            SIGNING_SECRET,
        )
        await eventually(lambda: llm.count >= 1)
        server.terminate()
        assert await server.wait(20) == 0
        assert slack.bot_messages("C1")[0]["text"].startswith("echo: Alice")


async def test_a_rate_limited_read_is_retried_after_retry_after(env: SessionEnv) -> None:
    """A 429 on conversations.replies is retried after Retry-After and the read succeeds."""
    env.slack.fail("conversations.replies", error="ratelimited", retry_after=1, times=1)
    started = time.monotonic()
    result = await env.session.call("channel_read", {})
    assert "messages" in result and len(result["messages"]) == 1
    assert env.slack.count("conversations.replies") == 2
    assert time.monotonic() - started >= 1.0


async def test_a_rate_limited_post_is_retried_until_it_is_posted_once(
    env: SessionEnv, caplog: pytest.LogCaptureFixture
) -> None:
    """429s on chat.postMessage (nothing posted) are waited out and retried until the post goes
    through: several 429s in a row still end in exactly one message, and the log says how long it waited."""
    env.slack.fail("chat.postMessage", error="ratelimited", retry_after=0, times=3)
    with caplog.at_level(logging.INFO, logger="channel.slack.outbound"):
        ok = await env.session.call("channel_reply", {"text": "hello"})
    assert ok["message"].startswith("msg_"), ok
    assert env.slack.count("chat.postMessage") == 4
    assert [m["text"] for m in env.slack.bot_messages("C1")] == ["hello"]
    [line] = [r for r in caplog.records if r.getMessage().startswith("slack write waited")]
    fields = line.fields  # type: ignore[attr-defined]
    assert fields["method"] == "chat.postMessage" and fields["rate_limited"] == 3
    assert fields["waited_ms"] >= 0


async def test_a_write_still_rate_limited_at_its_deadline_is_rate_limited(env: SessionEnv) -> None:
    """When waiting out Retry-After would pass the write deadline, the model gets rate_limited,
    told the post was not done, and nothing was posted."""
    env.adapter.link.outbound.deadline = 0.5
    env.slack.fail("chat.postMessage", error="ratelimited", retry_after=30, times=None)
    limited = await env.session.call("channel_reply", {"text": "again"})
    assert limited["error"]["code"] == "rate_limited"
    assert "not done" in limited["error"]["message"]
    assert env.slack.count("chat.postMessage") == 1
    assert env.slack.bot_messages("C1") == []
    assert await env.store.open_effects(env.task.task_id) == []


@pytest.mark.parametrize("method", ["reactions.add", "chat.update", "chat.delete"])
async def test_every_write_waits_out_a_429(env: SessionEnv, method: str) -> None:
    """Reactions, edits and retractions go through the same outbound path: a 429 is retried, not returned."""
    posted = await env.session.call("channel_reply", {"text": "mine"})
    env.session.enabled.update({"channel_edit", "channel_retract"})
    env.slack.fail(method, error="ratelimited", retry_after=0, times=2)
    tool, args = {
        "reactions.add": ("channel_react", {"message": posted["message"], "emoji": "tada"}),
        "chat.update": ("channel_edit", {"message": posted["message"], "text": "edited"}),
        "chat.delete": ("channel_retract", {"message": posted["message"]}),
    }[method]
    result = await env.session.call(tool, args)
    assert "error" not in result, result
    assert env.slack.count(method) == 3


async def test_a_dropped_post_is_not_retried_but_found(env: SessionEnv) -> None:
    """A connection dropped after Slack stored a post is not retried; the post is found by its effect id."""
    env.slack.drop("chat.postMessage", times=1)
    result = await env.session.call("channel_reply", {"text": "exactly once"})
    assert result["message"].startswith("msg_"), result
    assert env.slack.count("chat.postMessage") == 1
    assert [m["text"] for m in env.slack.bot_messages("C1")] == ["exactly once"]
    assert await env.store.open_effects(env.task.task_id) == []


async def test_open_effects_are_reconciled_not_repeated(env: SessionEnv) -> None:
    """Open effects of a crashed run: a found post is recovered, a lost one reported, a reaction redone."""
    task_id = env.task.task_id
    now = time.time()
    args = json.dumps({"channel": "C1", "thread_ts": env.root, "part": 0})
    await env.store.open_effect(
        effect_id="e-posted", task_id=task_id, tool="channel_reply", args=args, now=now
    )
    env.slack.add_message(
        "C1",
        "made before the crash",
        user="UBOT",
        bot_id="BBOT",
        thread_ts=env.root,
        metadata={"event_type": "threadbound_effect", "event_payload": {"effect_id": "e-posted"}},
    )
    await env.store.open_effect(effect_id="e-lost", task_id=task_id, tool="channel_reply", args=args, now=now)
    env.slack.add_reaction("C1", env.root, "eyes", "UBOT")
    react = json.dumps({"ref": f"C1:{env.root}", "emoji": "eyes", "add": True})
    await env.store.open_effect(
        effect_id="e-react", task_id=task_id, tool="channel_react", args=react, now=now
    )
    posts_before = env.slack.count("chat.postMessage")

    notes = await env.new_session().reconcile(await env.store.open_effects(task_id))

    assert len(notes) == 3
    assert "was posted as msg_" in notes[0]
    assert "was not posted" in notes[1]
    assert "was completed" in notes[2]  # already_reacted means done
    assert env.slack.count("chat.postMessage") == posts_before
    assert await env.store.open_effects(task_id) == []
    posted = json.loads((await env.store.get_effect("e-posted")).result or "{}")  # type: ignore[union-attr]
    assert posted["message"].startswith("msg_")


async def test_an_expired_lease_is_taken_over_by_the_sweep(tmp_path: Path) -> None:
    """Pending work whose owner died (its lease expired) is run by another instance's sweep."""

    def script(turn: Turn) -> list[Any]:
        return [call("channel_reply", text="picked up")] if turn.prompt else [""]

    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path, lease_ttl=1.0) as app:
            assert app.service is not None
            store = app.service.store
            root = slack.add_message("C1", "<@UBOT> are you there?", user="U1")
            outcome = await store.claim_message(
                event_id="Ev-dead",
                channel="C1",
                ts=root,
                thread_ts=root,
                create=True,
                payload=json.dumps(
                    {"channel": "C1", "ts": root, "user": "U1", "text": "<@UBOT> are you there?"}
                ),
                now=time.time(),
            )
            assert outcome.task_id is not None
            assert await store.acquire_lease(outcome.task_id, owner="dead-instance", ttl=0.5, now=time.time())
            runner = app.service.runner
            assert await runner.sweep() == 0  # still leased by the dead owner
            runner.clock = lambda: time.time() + 1.0  # the runner's clock passes the lease's expiry
            assert await runner.sweep() == 1
            await app.idle()
        assert [m["text"] for m in slack.bot_messages("C1")] == ["picked up"]


async def test_read_retries_connection_errors_but_writes_do_not(env: SessionEnv) -> None:
    """A dropped connection on a read is retried; on reactions.add it is not (writes are attempted once):
    the reaction is looked up instead, and it was added."""
    env.slack.drop("conversations.replies", times=1)
    read = await env.session.call("channel_read", {})
    assert env.slack.count("conversations.replies") == 2
    handle = read["messages"][0]["message"]
    env.slack.drop("reactions.add", times=1)
    result = await env.session.call("channel_react", {"message": handle, "emoji": "eyes"})
    assert result == {"ok": True}
    assert env.slack.count("reactions.add") == 1
    assert env.session.origin == Origin("C1", env.root)
