"""End-to-end: signed Slack events over real HTTP → task → what the fake Slack received."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from app.__main__ import main
from app.runs.run import APOLOGY
from tests.support import events
from tests.support.fake_model import FakeOpenAI
from tests.support.harness import SIGNING_SECRET, AppHarness
from tests.support.models import Turn, call, echo_model, scripted
from tests.support.prompts import readable
from threadbound_emulator import FakeSlack


def _workspace(slack: FakeSlack) -> None:
    slack.add_channel("C1", "general")
    slack.add_user("U1", "alice", display_name="Alice")
    slack.add_user("U2", "bob", display_name="Bob")


async def _mention(app: AppHarness, text: str = "hello there", user: str = "U1") -> str:
    ts = app.slack.add_message("C1", f"<@UBOT> {text}", user=user)
    response = await app.deliver(events.app_mention("C1", user, f"<@UBOT> {text}", ts))
    assert response.status == 200
    return ts


async def test_mention_gets_an_answer_in_its_thread(tmp_path: Path) -> None:
    """An app_mention in a channel is answered in that message's thread, with rendered names."""
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path) as app:
            ts = await _mention(app)
            await app.idle()
        replies = slack.bot_messages("C1")
        assert len(replies) == 1
        assert replies[0]["thread_ts"] == ts
        assert "echo: Alice" in replies[0]["text"]
        assert "@threadbound hello there" in replies[0]["text"]
        assert replies[0]["blocks"][0]["type"] == "markdown"
        assert "UBOT" not in replies[0]["text"]


async def test_four_deliveries_of_one_message_start_one_turn(tmp_path: Path) -> None:
    """app_mention, the message event for the same ts, and two retries give one turn and one reply."""
    seen: list[str] = []

    def script(turn: Turn) -> list[Any]:
        if turn.prompt:
            seen.append(turn.prompt)
            return [call("channel_reply", text="once")]
        return [""]

    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
            ts = slack.add_message("C1", "<@UBOT> hi", user="U1")
            mention = events.app_mention("C1", "U1", "<@UBOT> hi", ts)
            message = events.message("C1", "U1", "<@UBOT> hi", ts)
            responses = await asyncio.gather(
                app.deliver(mention),
                app.deliver(message),
                app.deliver(mention, retry_num=1),
                app.deliver(message, retry_num=2),
            )
            assert [r.status for r in responses] == [200, 200, 200, 200]
            await app.idle()
        assert len(seen) == 1
        assert [m["text"] for m in slack.bot_messages("C1")] == ["once"]


async def test_follow_up_without_mention_resumes_the_task_after_a_restart(tmp_path: Path) -> None:
    """A thread reply with no mention resumes the same task with its history, across a rebuilt server."""
    histories: list[str] = []

    def script(turn: Turn) -> list[Any]:
        if turn.prompt:
            histories.append(turn.history_text)
            return [call("channel_reply", text=f"turn {len(histories)}")]
        return [""]

    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
            root = await _mention(app, "remember the word pineapple")
            await app.idle()
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
            ts = slack.add_message("C1", "what was the word?", user="U2", thread_ts=root)
            response = await app.deliver(events.message("C1", "U2", "what was the word?", ts, thread_ts=root))
            assert response.status == 200
            await app.idle()
        assert len(histories) == 2
        assert "pineapple" in histories[1] and "what was the word?" in histories[1]
        assert [m["text"] for m in slack.messages("C1", root) if m.get("bot_id")] == ["turn 1", "turn 2"]


async def test_unrelated_thread_replies_start_nothing(tmp_path: Path) -> None:
    """A reply in a thread that belongs to no task, and a top-level message without mention, are ignored."""
    async with FakeSlack() as slack:
        _workspace(slack)
        model = echo_model()
        async with AppHarness(slack, model=model, data_dir=tmp_path) as app:
            root = slack.add_message("C1", "people talking", user="U1")
            ts = slack.add_message("C1", "still people", user="U2", thread_ts=root)
            await app.deliver(events.message("C1", "U2", "still people", ts, thread_ts=root))
            await app.deliver(events.message("C1", "U1", "people talking", root))
            await app.idle()
        assert slack.bot_messages() == []


async def test_messages_mid_run_are_never_lost_or_run_in_parallel(tmp_path: Path) -> None:
    """Messages arriving during a run reach the model (steered in or next run); one run at a time."""
    in_flight = 0
    peak = 0
    prompts: list[str] = []
    first_request = asyncio.Event()
    proceed = asyncio.Event()

    async def script(turn: Turn) -> list[Any]:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            if not first_request.is_set():
                first_request.set()
                await proceed.wait()
            if turn.prompt:
                prompts.append(turn.prompt)
                return [call("channel_reply", text=f"got {len(prompts)}")]
            return [""]
        finally:
            in_flight -= 1

    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
            root = await _mention(app, "first")
            await first_request.wait()
            for i in range(3):
                ts = slack.add_message("C1", f"more {i}", user="U2", thread_ts=root)
                await app.deliver(events.message("C1", "U2", f"more {i}", ts, thread_ts=root))
            proceed.set()
            await app.idle()
        assert peak == 1
        joined = "\n".join(prompts)
        for text in ("first", "more 0", "more 1", "more 2"):
            assert text in joined


async def test_a_forty_reply_thread_is_paged_with_one_replies_call(tmp_path: Path) -> None:
    """channel_read pages a 40-reply thread in pages of at most 15 from one conversations.replies call."""
    pages: list[int] = []

    def script(turn: Turn) -> list[Any]:
        if turn.prompt:
            return [call("channel_read")]
        name, result = turn.results[-1]
        if name == "channel_read":
            pages.append(len(result["messages"]))
            if result["next_cursor"]:
                return [call("channel_read", cursor=result["next_cursor"])]
            return [call("channel_reply", text=f"read {sum(pages)} messages")]
        return [""]

    async with FakeSlack() as slack:
        _workspace(slack)
        slack.add_user("U3", "carol", display_name="Carol")
        root = slack.add_message("C1", "a long discussion", user="U1")
        for i in range(39):
            slack.add_message("C1", f"reply {i} to <@U3>", user=("U1", "U2", "U3")[i % 3], thread_ts=root)
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
            ts = slack.add_message("C1", "<@UBOT> summarise", user="U2", thread_ts=root)
            await app.deliver(events.app_mention("C1", "U2", "<@UBOT> summarise", ts, thread_ts=root))
            await app.idle()
        # 1 root + 39 replies + the mention = 41 messages.
        assert sum(pages) == 41
        assert all(p <= 15 for p in pages) and len(pages) == 3
        assert slack.count("conversations.replies") == 1
        looked_up = [c.params.get("user") for c in slack.calls_to("users.info")]
        assert len(looked_up) == len(set(looked_up)) <= 3
        assert slack.bot_messages("C1")[-1]["text"] == "read 41 messages"


async def test_own_posts_other_bots_and_edits_start_nothing(tmp_path: Path) -> None:
    """The bot's own posts, other bots' posts, edits, deletions and joins never reach the model."""
    requests = 0

    def script(turn: Turn) -> list[Any]:
        nonlocal requests
        requests += 1
        return [""]

    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
            ts = slack.add_message("C1", "<@UBOT> hi", user="U1")
            await app.deliver(events.message("C1", "UBOT", "<@UBOT> my own", ts + "1", bot_id="BBOT"))
            await app.deliver(events.message("C1", "UOTHER", "<@UBOT> from a bot", ts + "2", bot_id="BOTHER"))
            await app.deliver(
                events.message_changed("C1", "U1", "<@UBOT> edited", ts, previous_text="<@UBOT> hi")
            )
            await app.deliver(events.message_deleted("C1", ts))
            await app.deliver(events.message("C1", "U1", "<@UBOT> joined", ts + "3", subtype="channel_join"))
            await app.idle()
        assert requests == 0


async def test_http_edge_answers(tmp_path: Path) -> None:
    """Bad or stale signatures get 401, malformed bodies 400, oversized 413, unknown events 200."""
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path, max_body_bytes=4096) as app:
            body = json.dumps(events.app_mention("C1", "U1", "<@UBOT> hi", "1.000100")).encode()
            bad = events.sign(body, "wrong-secret")
            assert (await app.post_raw(body, bad)).status == 401
            stale = events.sign(body, SIGNING_SECRET, timestamp=int(time.time()) - 600)
            assert (await app.post_raw(body, stale)).status == 401
            garbage = b"{not json"
            assert (await app.post_raw(garbage, events.sign(garbage, SIGNING_SECRET))).status == 400
            big = json.dumps({"type": "event_callback", "pad": "x" * 10_000}).encode()
            assert (await app.post_raw(big, events.sign(big, SIGNING_SECRET))).status == 413
            unknown = {
                **events.app_mention("C1", "U1", "hi", "1.000200"),
                "event": {"type": "reaction_added"},
            }
            assert (await app.deliver(unknown)).status == 200
            challenge = await app.deliver(events.url_verification("abc123"))
            assert challenge.status == 200 and "abc123" in await challenge.text()
            assert (await app.get("/healthz")).status == 200
            assert (await app.get("/readyz")).status == 200
            await app.idle()
        assert slack.bot_messages() == []


async def test_final_text_without_reply_is_posted_and_empty_text_is_silence(tmp_path: Path) -> None:
    """A run ending with text and no channel_reply posts the text; ending with no text posts nothing."""

    def script(turn: Turn) -> list[Any]:
        return ["plain answer"] if "speak" in turn.prompt else [""]

    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
            await _mention(app, "please speak")
            await _mention(app, "stay quiet")
            await app.idle()
        assert [m["text"] for m in slack.bot_messages("C1")] == ["plain answer"]


async def test_model_failure_apologises_and_the_task_stays_usable(tmp_path: Path) -> None:
    """A model error ends the run with an apology in the thread; the next message is answered normally."""
    calls = 0

    def script(turn: Turn) -> list[Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("model exploded")
        return [call("channel_reply", text="recovered")] if turn.prompt else [""]

    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
            root = await _mention(app, "first try")
            await app.idle()
            ts = slack.add_message("C1", "again?", user="U1", thread_ts=root)
            await app.deliver(events.message("C1", "U1", "again?", ts, thread_ts=root))
            await app.idle()
        texts = [m["text"] for m in slack.messages("C1", root) if m.get("bot_id")]
        assert len(texts) == 2
        assert texts[0].startswith("Sorry")
        assert texts[1] == "recovered"


async def test_a_run_over_run_timeout_apologises_and_the_task_stays_usable(tmp_path: Path) -> None:
    """RUN_TIMEOUT ends a run whose model never answers: the thread gets the apology, and the next
    message in it is answered normally (with the timeout ignored, the first run would never end)."""
    never = asyncio.Event()  # the first model call waits for it; nothing sets it
    calls = 0

    async def script(turn: Turn) -> list[Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            await never.wait()
        return [call("channel_reply", text="answered")] if turn.prompt else [""]

    async with FakeSlack() as slack:
        _workspace(slack)
        # 1 s: the second run must finish inside it on a loaded machine too (0.2 s did not once).
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path, run_timeout=1.0) as app:
            root = await _mention(app, "a question that hangs the model")
            async with asyncio.timeout(20):  # far above RUN_TIMEOUT: only a missing timeout hits it
                await app.idle()
            assert [m["text"] for m in slack.bot_messages("C1")] == [APOLOGY]
            ts = slack.add_message("C1", "again?", user="U1", thread_ts=root)
            await app.deliver(events.message("C1", "U1", "again?", ts, thread_ts=root))
            await app.idle()
        assert [m["text"] for m in slack.messages("C1", root) if m.get("bot_id")] == [APOLOGY, "answered"]
        assert not never.is_set()


async def test_direct_messages_start_tasks_and_share_one_conversation(tmp_path: Path) -> None:
    """A DM needs no mention; top-level DMs are one conversation answered at the top level."""
    histories: list[str] = []

    def script(turn: Turn) -> list[Any]:
        if turn.prompt:
            histories.append(turn.history_text)
            return [call("channel_reply", text="hi back")]
        return [""]

    async with FakeSlack() as slack:
        slack.add_user("U1", "alice", display_name="Alice")
        slack.add_channel("D1", "alice-dm", is_im=True, user="U1")
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
            for text in ("hello bot", "second message"):
                ts = slack.add_message("D1", text, user="U1")
                await app.deliver(events.message("D1", "U1", text, ts, channel_type="im"))
                await app.idle()
        assert len(histories) == 2 and "hello bot" in histories[1]
        replies = slack.bot_messages("D1")
        assert len(replies) == 2 and all("thread_ts" not in m for m in replies)


async def test_openai_chat_model_over_the_wire(tmp_path: Path) -> None:
    """MODEL=openai-chat:NAME with OPENAI_BASE_URL drives a run against an OpenAI-compatible server."""
    async with FakeSlack() as slack, FakeOpenAI() as llm:
        _workspace(slack)
        async with AppHarness(
            slack,
            model=None,
            data_dir=tmp_path,
            model_name="openai-chat:fake-model",
            openai_base_url=llm.base_url,
        ) as app:
            await _mention(app, "over the wire")
            await app.idle()
        assert llm.count >= 2
        first = llm.requests[0]
        assert first["model"] == "fake-model"
        assert {t["function"]["name"] for t in first["tools"]} >= {
            "channel_reply",
            "channel_read",
            "channel_react",
        }
        # No provider ids reach the model, except inside the conversation's permalink.
        seen = re.sub(r"https://\S+", "", json.dumps(first["messages"]))
        assert not re.search(r"\b(C1|U1|UBOT|T1)\b", seen)
        assert slack.bot_messages("C1")[0]["text"].startswith("echo: Alice")


async def test_run_command_posts_a_root_that_later_replies_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`python -m app run` without --thread posts a new root; a reply to it resumes the same task."""
    async with FakeSlack() as slack, FakeOpenAI() as llm:
        _workspace(slack)
        env = {
            "SLACK_BOT_TOKEN": slack.token,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": slack.api_url,
            "DATA_DIR": str(tmp_path),
            "MODEL": "openai-chat:fake",
            "OPENAI_BASE_URL": llm.base_url,
        }
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.chdir(tmp_path)
        code = await asyncio.to_thread(main, ["run", "--channel", "C1", "announce the release"])
        assert code == 0
        roots = slack.bot_messages("C1")
        assert len(roots) == 1 and "thread_ts" not in roots[0]
        root = roots[0]["ts"]

        histories: list[str] = []

        def script(turn: Turn) -> list[Any]:
            if turn.prompt:
                histories.append(turn.history_text)
                return [call("channel_reply", text="following up")]
            return [""]

        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
            ts = slack.add_message("C1", "question about it", user="U1", thread_ts=root)
            await app.deliver(events.message("C1", "U1", "question about it", ts, thread_ts=root))
            await app.idle()
        assert len(histories) == 1 and "announce the release" in histories[0]
        assert [m["text"] for m in slack.messages("C1", root) if m.get("bot_id")][-1] == "following up"


async def test_inbound_files_reach_the_model_as_handles_only(tmp_path: Path) -> None:
    """Files on the inbound message appear as file_ handles; no Slack file id reaches the model."""
    prompts: list[str] = []

    def script(turn: Turn) -> list[Any]:
        if turn.prompt:
            prompts.append(turn.prompt)
        return [""]

    async with FakeSlack() as slack:
        _workspace(slack)
        slack.add_file("F0PLAIN", "notes.txt", "text/plain", b"hello")
        slack.add_file("F0CONNECT", "shared.csv", "text/csv", b"a,b\n1,2\n")
        files = [slack.file_object("F0PLAIN"), {"id": "F0CONNECT", "file_access": "check_file_info"}]
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path) as app:
            ts = slack.add_message("C1", "<@UBOT> see attached", user="U1", files=files)
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> see attached", ts, files=files))
            await app.idle()
        assert len(prompts) == 1
        shown = readable(prompts[0])
        assert shown.count("attached file_") == 2
        assert "notes.txt" in shown
        assert "shared.csv (text/csv, 8 bytes)" in shown
        assert "F0PLAIN" not in prompts[0] and "F0CONNECT" not in prompts[0]


async def test_max_concurrent_runs_queues_conversations_durably(tmp_path: Path) -> None:
    """With MAX_CONCURRENT_RUNS=1, two conversations run one after the other and both are answered."""
    in_flight = 0
    peak = 0

    async def script(turn: Turn) -> list[Any]:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            await asyncio.sleep(0.05)
            return [call("channel_reply", text="done")] if turn.prompt else [""]
        finally:
            in_flight -= 1

    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path, max_concurrent_runs=1) as app:
            await _mention(app, "first conversation")
            await _mention(app, "second conversation", user="U2")
            await app.idle()
        assert peak == 1
        assert [m["text"] for m in slack.bot_messages("C1")] == ["done", "done"]


async def test_user_max_runs_queues_one_persons_conversations_and_not_others(tmp_path: Path) -> None:
    """With USER_MAX_RUNS=1, one person's three conversations run one at a time while another person's
    runs beside them; every conversation is answered (queued, never dropped)."""
    in_flight = {"Alice": 0, "Bob": 0}
    seen = {"alice_peak": 0, "together": 0}
    bob_started = asyncio.Event()

    async def script(turn: Turn) -> list[Any]:
        if not turn.prompt:
            return [""]
        who = "Bob" if "bob conversation" in turn.prompt else "Alice"
        in_flight[who] += 1
        seen["alice_peak"] = max(seen["alice_peak"], in_flight["Alice"])
        seen["together"] += in_flight["Alice"] > 0 and in_flight["Bob"] > 0
        try:
            if who == "Bob":
                bob_started.set()
            else:
                # Alice's request waits (a while at most) for Bob's to start: beside hers, unless his
                # run were queued behind her conversations. Not a race with the machine's speed.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(bob_started.wait(), 5.0)
            await asyncio.sleep(0.05)
            return [call("channel_reply", text="done")]
        finally:
            in_flight[who] -= 1

    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=scripted(script), data_dir=tmp_path, user_max_runs=1) as app:
            for n in range(3):
                await _mention(app, f"alice conversation {n}")
            await _mention(app, "bob conversation", user="U2")
            await app.idle()
        assert seen["alice_peak"] == 1 and seen["together"] > 0
        assert [m["text"] for m in slack.bot_messages("C1")] == ["done"] * 4


async def test_a_new_conversations_run_knows_its_author_from_the_wake_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim that creates a task tells the scheduler who wrote its one message, so the driver
    takes the lease without reading the inbox first (one store trip less per new conversation); a
    reply in an existing conversation is still looked up."""
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path) as app:
            assert app.service is not None
            store = app.service.runner.store
            calls: list[str] = []
            for name in ("pending_inbox", "take_lease_with_state"):
                real = getattr(store, name)

                def counted(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
                    calls.append(_name)
                    return _real(*args, **kwargs)

                monkeypatch.setattr(store, name, counted)
            root = await _mention(app)
            await app.idle()
            assert calls[0] == "take_lease_with_state", calls
            calls.clear()
            ts = slack.add_message("C1", "and then?", user="U2", thread_ts=root)
            reply = events.message("C1", "U2", "and then?", ts, thread_ts=root)
            assert (await app.deliver(reply)).status == 200
            await app.idle()
            assert calls[:2] == ["pending_inbox", "take_lease_with_state"], calls
        assert len(slack.bot_messages("C1")) == 2
