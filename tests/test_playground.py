"""The playground over real HTTP: a person's post reaches the real app, the bot's doings arrive live."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from app.__main__ import main
from app.intake.interactions import Action
from app.playground import GENERAL, Playground, demo_model
from app.playground.guard import TOKEN_HEADER
from app.playground.view import markdown_html, mrkdwn_html, slack_to_markdown
from app.settings import Settings
from tests.support.models import Turn, call, echo_model, scripted

JSON = dict[str, Any]


def _settings(tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": tmp_path,
        "agent_file": None,
        "skills_dir": None,
        "sweep_interval": 3600.0,
        "shutdown_grace": 5.0,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def _session(token: str) -> aiohttp.ClientSession:
    """A client that carries the playground's per-start token, as the page's own script does."""
    return aiohttp.ClientSession(headers={TOKEN_HEADER: token})


async def _page_token(http: aiohttp.ClientSession, url: str) -> str:
    """The token the served page carries (in its ``playground-token`` meta tag)."""
    async with http.get(url) as response:
        page = await response.text()
    match = re.search(r'<meta name="playground-token" content="([^"]+)">', page)
    assert match is not None, page
    return match.group(1)


async def _live(session: aiohttp.ClientSession, url: str) -> AsyncIterator[JSON]:
    """The page's live stream: each server-sent snapshot, parsed."""
    async with session.get(f"{url}api/events") as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        async for line in response.content:
            if line.startswith(b"data: "):
                yield json.loads(line[len(b"data: ") :])


async def _until(stream: AsyncIterator[JSON], check: Any) -> JSON:
    async with asyncio.timeout(30):
        async for state in stream:
            if check(state):
                return state
    raise AssertionError("the live stream ended")


def _conversation(state: JSON, channel: str) -> JSON:
    return next(c for c in state["conversations"] if c["id"] == channel)


def _bot_replies(state: JSON, channel: str = GENERAL) -> list[JSON]:
    return [r for m in _conversation(state, channel)["messages"] for r in m["replies"] if r["bot"]]


async def test_a_mention_posted_as_a_person_gets_the_bots_reply_on_the_live_stream(tmp_path: Path) -> None:
    """POST /api/messages stores the person's message, delivers it signed to the app, and the
    app's reply (posted through the emulated Web API) arrives as a snapshot on /api/events."""
    async with Playground(_settings(tmp_path), model=echo_model()) as pg, _session(pg.page_token) as http:
        stream = _live(http, pg.url)
        first = await _until(stream, lambda s: True)
        assert [p["name"] for p in first["people"]] == ["Alice", "Bob", "Carol"]
        async with http.post(
            f"{pg.url}api/messages",
            json={"as": "U0BOB", "channel": GENERAL, "text": "@threadbound hi *there*"},
        ) as response:
            assert response.status == 200
            posted = await response.json()
        assert posted["deliveries"] == [200, 200]  # app_mention and message, as Slack sends both
        state = await _until(stream, lambda s: _bot_replies(s))
        root = _conversation(state, GENERAL)["messages"][0]
        assert (root["ts"], root["name"], root["html"]) == (
            posted["ts"],
            "Bob",
            "<p>@threadbound hi <strong>there</strong></p>\n",
        )
        reply = _bot_replies(state)[0]
        assert reply["thread_ts"] == posted["ts"] and reply["name"] == "threadbound"
        assert "echo:" in reply["html"] and "Bob" in reply["html"]
        # What the app received was a real Slack mention of the bot.
        assert pg.slack.find(GENERAL, posted["ts"])["text"] == "<@UBOT> hi *there*"


async def test_a_thread_reply_and_a_dm_reach_the_app_without_a_mention(tmp_path: Path) -> None:
    """A reply in the bot's thread resumes the task; a DM needs no mention; both get answers."""
    async with Playground(_settings(tmp_path), model=echo_model()) as pg, _session(pg.page_token) as http:
        ts, _ = await pg.post("U0ALICE", GENERAL, "@threadbound start")
        assert pg.service is not None
        await pg.service.runner.idle()
        await pg.post("U0ALICE", GENERAL, "and one more thing", thread_ts=ts)
        await pg.post("U0CAROL", "D0CAROL", "hello in private")
        await pg.service.runner.idle()
        async with http.get(f"{pg.url}api/state") as response:
            state = await response.json()
        texts = [r["html"] for r in _bot_replies(state)]
        assert len(texts) == 2 and "one more thing" in texts[1]
        dm = _conversation(state, "D0CAROL")["messages"]
        assert dm[0]["name"] == "Carol" and any("hello in private" in m["html"] for m in dm if m["bot"])


async def test_an_attached_file_reaches_the_agent_and_the_page(tmp_path: Path) -> None:
    """A file sent with a post is hosted by the emulator, named in the agent's prompt, and served
    to the page under /files/."""
    async with Playground(_settings(tmp_path), model=echo_model()) as pg, _session(pg.page_token) as http:
        form = aiohttp.FormData()
        form.add_field("as", "U0ALICE")
        form.add_field("channel", GENERAL)
        form.add_field("text", "@threadbound read this")
        form.add_field("file", b"hello file", filename="notes.txt", content_type="text/plain")
        async with http.post(f"{pg.url}api/messages", data=form) as response:
            assert response.status == 200
        assert pg.service is not None
        await pg.service.runner.idle()
        state = pg.snapshot()
        root = _conversation(state, GENERAL)["messages"][0]
        assert [f["name"] for f in root["files"]] == ["notes.txt"]
        assert "notes.txt" in _bot_replies(state)[0]["html"]
        async with http.get(f"{pg.url}{root['files'][0]['url'].lstrip('/')}") as response:
            assert await response.read() == b"hello file"


async def test_a_click_on_a_bot_button_is_a_signed_block_actions_the_app_routes(tmp_path: Path) -> None:
    """POST /api/click for a button on the bot's message delivers Slack's block_actions payload,
    signed, to the app's /slack/events, where the handler for that action id gets the click."""
    clicked: asyncio.Queue[Action] = asyncio.Queue()
    async with Playground(_settings(tmp_path), model=echo_model()) as pg, _session(pg.page_token) as http:
        assert pg.service is not None
        pg.service.interactions.on("approve_it", clicked.put)
        ts, _ = await pg.post("U0ALICE", GENERAL, "@threadbound hi")
        blocks = [
            {"type": "section", "text": {"type": "mrkdwn", "text": "May I?"}},
            {
                "type": "actions",
                "block_id": "b1",
                "elements": [
                    {
                        "type": "button",
                        "action_id": "approve_it",
                        "value": "yes",
                        "text": {"type": "plain_text", "text": "Approve"},
                        "style": "primary",
                    }
                ],
            },
        ]
        client = pg.slack.web_client()
        posted = await client.chat_postMessage(channel=GENERAL, thread_ts=ts, text="May I?", blocks=blocks)
        view = next(r for r in _bot_replies(pg.snapshot()) if r["ts"] == posted["ts"])
        button = view["buttons"][0]
        assert (button["label"], button["style"]) == ("Approve", "primary")
        body = {"as": "U0BOB", "channel": GENERAL, "ts": posted["ts"], **button}
        async with http.post(f"{pg.url}api/click", json=body) as response:
            assert response.status == 200 and (await response.json()) == {"status": 200}
        async with asyncio.timeout(10):
            action = await clicked.get()
        assert (
            action.user_id,
            action.user_name,
            action.channel,
            action.message_ts,
            action.thread_ts,
            action.value,
        ) == ("U0BOB", "bob", GENERAL, posted["ts"], ts, "yes")
        forged = {**body, "value": "something else"}
        async with http.post(f"{pg.url}api/click", json=forged) as response:
            assert response.status == 400
            assert (await response.json())["error"] == "that message has no such button"


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"as": "U0NOBODY", "channel": GENERAL, "text": "hi"}, "unknown person 'U0NOBODY'"),
        ({"as": "U0ALICE", "channel": "C0NONE", "text": "hi"}, "unknown conversation 'C0NONE'"),
        ({"as": "U0ALICE", "channel": "D0BOB", "text": "hi"}, "a DM can only be written to by its person"),
        ({"as": "U0ALICE", "channel": GENERAL, "text": "  "}, "write something or attach a file"),
        (
            {"as": "U0ALICE", "channel": GENERAL, "text": "x", "thread_ts": "1.000001"},
            "no thread 1.000001 in this conversation",
        ),
    ],
)
async def test_a_bad_post_is_a_400_that_says_why(tmp_path: Path, body: JSON, error: str) -> None:
    """A post the page should not make is refused with its reason, and nothing reaches the app."""
    async with Playground(_settings(tmp_path), model=echo_model()) as pg, _session(pg.page_token) as http:
        async with http.post(f"{pg.url}api/messages", json=body) as response:
            assert response.status == 400
            assert (await response.json()) == {"error": error}
        assert pg.slack.messages(GENERAL) == []


async def test_edits_reactions_status_streams_canvases_and_retractions_show_on_the_page(
    tmp_path: Path,
) -> None:
    """What the bot does through the Web API shows in the snapshot: an edit is marked, a reaction
    counted, the status and title shown on its thread, a streaming message flagged while it grows, a
    canvas rendered, and a deleted message kept as a retracted trace."""
    async with Playground(_settings(tmp_path), model=echo_model()) as pg:
        ts, _ = await pg.post("U0ALICE", GENERAL, "hello, no mention")
        client = pg.slack.web_client()
        edited = await client.chat_postMessage(channel=GENERAL, thread_ts=ts, text="first **draft**")
        await client.chat_update(channel=GENERAL, ts=edited["ts"], text="final")
        await client.reactions_add(channel=GENERAL, timestamp=ts, name="eyes")
        gone = await client.chat_postMessage(channel=GENERAL, thread_ts=ts, text="oops")
        await client.chat_delete(channel=GENERAL, ts=gone["ts"])
        stream = await client.api_call(
            "chat.startStream",
            json={
                "channel": GENERAL,
                "thread_ts": ts,
                "recipient_user_id": "U0ALICE",
                "recipient_team_id": "T1",
                "markdown_text": "Grow",
            },
        )
        await client.api_call(
            "chat.appendStream", json={"channel": GENERAL, "ts": stream["ts"], "markdown_text": "ing"}
        )
        await client.api_call(
            "assistant.threads.setTitle", json={"channel_id": GENERAL, "thread_ts": ts, "title": "Launch"}
        )
        canvas = await client.api_call(
            "canvases.create",
            json={
                "title": "Plan",
                "channel_id": GENERAL,
                "document_content": {"type": "markdown", "markdown": "# Steps"},
            },
        )
        # Set after the bot's posts in the thread: a post clears the thread's status, as in Slack.
        await client.assistant_threads_setStatus(channel_id=GENERAL, thread_ts=ts, status="is thinking…")
        state = pg.snapshot()
        conversation = _conversation(state, GENERAL)
        root = conversation["messages"][0]
        assert root["reactions"] == [{"name": "eyes", "emoji": "👀", "count": 1, "who": ["threadbound"]}]
        assert conversation["statuses"] == {ts: "is thinking…"}
        assert conversation["titles"] == {ts: "Launch"}
        by_ts = {r["ts"]: r for r in root["replies"]}
        assert by_ts[edited["ts"]]["edited"] and by_ts[edited["ts"]]["html"] == "<p>final</p>\n"
        assert by_ts[gone["ts"]]["retracted"] and by_ts[gone["ts"]]["html"] == "<p>oops</p>\n"
        assert by_ts[stream["ts"]]["streaming"] and by_ts[stream["ts"]]["html"] == "<p>Growing</p>\n"
        assert conversation["canvases"] == [
            {"id": canvas["canvas_id"], "title": "Plan", "html": "<h1>Steps</h1>\n"}
        ]
        await client.api_call("chat.stopStream", json={"channel": GENERAL, "ts": stream["ts"]})
        await client.assistant_threads_setStatus(channel_id=GENERAL, thread_ts=ts, status="")
        conversation = _conversation(pg.snapshot(), GENERAL)
        assert conversation["statuses"] == {}
        assert not next(r for r in conversation["messages"][0]["replies"] if r["ts"] == stream["ts"])[
            "streaming"
        ]


def test_feedback_buttons_render_as_two_clickable_buttons() -> None:
    """A ``feedback_buttons`` element (in ``context_actions``) becomes a 👍 and a 👎 button, each
    sending its own value under the element's action id."""
    from app.playground.view import message_view
    from threadbound_emulator import Workspace

    ws = Workspace()
    ws.add_channel("C1", "general")
    element = {
        "type": "feedback_buttons",
        "action_id": "threadbound_feedback",
        "positive_button": {"text": {"type": "plain_text", "text": "Good"}, "value": "positive:k"},
        "negative_button": {"text": {"type": "plain_text", "text": "Bad"}, "value": "negative:k"},
    }
    ts = ws.add_message(
        "C1", "answer", "UBOT", bot_id="BBOT", blocks=[{"type": "context_actions", "elements": [element]}]
    )
    view = message_view(ws, "C1", ws.find("C1", ts) or {}, {})
    assert [(b["label"], b["value"], b["type"]) for b in view["buttons"]] == [
        ("👍 Good", "positive:k", "feedback_buttons"),
        ("👎 Bad", "negative:k", "feedback_buttons"),
    ]
    assert view["html"] == "<p>answer</p>\n"


def test_message_text_is_rendered_without_letting_markup_through() -> None:
    """Slack constructs become readable Markdown; raw HTML in a message is shown, never executed."""
    names = {"U1": "Alice"}
    assert slack_to_markdown("<@U1> see <https://x.example/a|the doc> &lt;b&gt; <!here>", names) == (
        "@Alice see [the doc](https://x.example/a) <b> @here"
    )
    assert markdown_html("<script>alert(1)</script> [x](javascript:alert(1))", names) == (
        "<p>&lt;script&gt;alert(1)&lt;/script&gt; [x](javascript:alert(1))</p>\n"
    )


def test_a_date_token_shows_its_time_as_slack_does() -> None:
    """``<!date^TS^…|fallback>`` (an approval or question card's "open until") shows the time, not the
    fallback meant for clients that cannot render dates."""
    token = "open until <!date^1796137822^{date_short_pretty} at {time}|in a while>"
    assert slack_to_markdown(token, {}) == "open until Dec 1, 2026 at 15:10 UTC"
    assert slack_to_markdown("<!date^soon^{time}|in a while>", {}) == "in a while"
    assert "Dec 1, 2026 at 15:10 UTC" in mrkdwn_html(token, {})


def test_mrkdwn_is_rendered_as_slack_shows_it() -> None:
    """mrkdwn (people's messages, cards' sections): *bold*, _italic_, ~strike~, ``` blocks mid-line,
    :emoji:, a date's fallback text; Markdown's **bold** stays bold; code is left alone."""
    from app.playground.view import mrkdwn_html

    text = "*Approved* by _Bob_ ~maybe~ :white_check_mark: <!date^1700000000^{date_short}|just now> **x**"
    assert mrkdwn_html(text, {}) == (
        "<p><strong>Approved</strong> by <em>Bob</em> <s>maybe</s> ✅ Nov 14, 2023 at 22:13 UTC "
        "<strong>x</strong></p>\n"
    )
    assert mrkdwn_html('Run with:```{\n  "a": "*b*"\n}```', {}) == (
        "<p>Run with:</p>\n<pre><code>{\n  &quot;a&quot;: &quot;*b*&quot;\n}\n</code></pre>\n"
    )


async def test_the_demo_model_streams_a_labelled_echo_with_feedback_buttons(tmp_path: Path) -> None:
    """``--demo``'s model answers in final text, which the app streams into the thread: the answer
    says it is an echo and not an LLM, quotes the person, and ends with the feedback buttons."""
    async with Playground(_settings(tmp_path), model=demo_model()) as pg:
        await pg.post("U0ALICE", GENERAL, "@threadbound hello demo")
        assert pg.service is not None
        await pg.service.runner.idle()
        replies = _bot_replies(pg.snapshot())
        [stream] = pg.slack.streams.values()
    assert stream.state == "stopped" and len([a for a in stream.appends if a]) >= 2
    assert len(replies) == 1
    assert "Demo model" in replies[0]["html"] and "an echo, not an LLM" in replies[0]["html"]
    assert "hello demo" in replies[0]["html"]
    assert [b["type"] for b in replies[0]["buttons"]] == ["feedback_buttons", "feedback_buttons"]


async def test_the_demo_model_uses_tools_so_the_page_shows_steps_and_a_reaction(tmp_path: Path) -> None:
    """Each demo turn reacts 👀 to the person's message and reads the thread before answering, and its
    answer says so: the no-key path shows tool steps and reactions, not only text."""
    async with Playground(_settings(tmp_path), model=demo_model()) as pg:
        await pg.post("U0ALICE", GENERAL, "@threadbound show me the tools")
        assert pg.service is not None
        await pg.service.runner.idle()
        state = pg.snapshot()
        [stream] = pg.slack.streams.values()
    [root] = _conversation(state, GENERAL)["messages"]
    assert [r["name"] for r in root["reactions"]] == ["eyes"]
    [reply] = _bot_replies(state)
    assert "reacted 👀 to your message and read the thread (1 message)" in reply["html"]
    assert "show me the tools" in reply["html"]
    assert pg.slack.count("reactions.add") == 1 and pg.slack.count("conversations.replies") >= 1
    assert stream.state == "stopped"


async def test_messages_carry_the_time_they_were_posted(tmp_path: Path) -> None:
    """The playground's workspace hands out ts that follow the wall clock: a message's ts is the time
    it was posted (to the second), so the page shows real times, not one start-up minute."""
    async with Playground(_settings(tmp_path), model=echo_model()) as pg:
        before = time.time()
        await pg.post("U0ALICE", GENERAL, "what time is it")
        after = time.time()
        [root] = _conversation(pg.snapshot(), GENERAL)["messages"]
    assert before - 1 <= float(root["ts"]) <= after + 1


async def test_the_agent_file_instructions_reach_the_playgrounds_agent(tmp_path: Path) -> None:
    """agent.toml works as under serve: its instructions are what the playground's agent runs with."""
    (tmp_path / "agent.toml").write_text('instructions = "You are the release bot."\n', encoding="utf-8")
    seen: list[str] = []

    def script(turn: Turn) -> list[Any]:
        seen.append(turn.messages[-1].instructions or "")  # type: ignore[union-attr]
        return [call("channel_reply", text="ok")] if turn.prompt else [""]

    settings = _settings(tmp_path, agent_file=tmp_path / "agent.toml")
    async with Playground(settings, model=scripted(script)) as pg:
        await pg.post("U0ALICE", GENERAL, "@threadbound hi")
        assert pg.service is not None
        await pg.service.runner.idle()
    assert seen and "You are the release bot." in seen[0]


def test_playground_without_a_model_says_what_to_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m app playground`` with no MODEL exits 2 with one line naming MODEL and --demo."""
    monkeypatch.chdir(tmp_path)
    for name in ("MODEL", "AGENT_FILE", "SLACK_BOT_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    assert main(["playground"]) == 2
    assert capsys.readouterr().err == (
        "threadbound: MODEL is not set: set MODEL and its key (e.g. MODEL=anthropic:claude-sonnet-4-5 and "
        "ANTHROPIC_API_KEY) in the environment or ./.env, or run `python -m app playground --demo` for an "
        "echo model that needs no key\n"
    )


async def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    """The page's port already taken ends start-up with StartupError naming PORT."""
    from app.service import StartupError

    async with Playground(_settings(tmp_path), model=echo_model()) as first:
        second = Playground(_settings(tmp_path / "b"), model=echo_model(), port=first.port)
        with pytest.raises(StartupError, match=rf"^port {first.port} is already in use"):
            await second.start()


@pytest.mark.process
async def test_the_playground_command_serves_the_demo_and_stops_on_sigterm(tmp_path: Path) -> None:
    """``python -m app playground --demo`` as a process: notes the Slack settings it ignores,
    answers a post with the demo model, and exits 0 on SIGTERM."""
    from tests.support.process import ServerProcess

    argv = [sys.executable, "-m", "app", "playground", "--demo"]
    env = {"SLACK_BOT_TOKEN": "xoxb-my-real-token", "MODEL": "", "DATA_DIR": str(tmp_path / "data")}
    server = ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "playground.log", argv=argv)
    async with server, aiohttp.ClientSession() as http:
        http.headers[TOKEN_HEADER] = await _page_token(http, f"{server.url}/")
        body = {"as": "U0CAROL", "channel": "D0CAROL", "text": "hi from a process"}
        async with http.post(f"{server.url}/api/messages", json=body) as response:
            assert response.status == 200
        state = await _until(
            _live(http, f"{server.url}/"),
            lambda s: any(m["bot"] for m in _conversation(s, "D0CAROL")["messages"]),
        )
        assert any("Demo model" in m["html"] for m in _conversation(state, "D0CAROL")["messages"])
        server.terminate()
        assert await server.wait() == 0
    log = (tmp_path / "playground.log").read_text()
    assert (
        "threadbound: the playground ignores SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET: it is its own Slack "
        f"workspace, with its store in {tmp_path / 'data' / 'playground'}"
    ) in log
    assert (tmp_path / "data" / "playground" / "threadbound.db").is_file()


def test_an_ephemeral_note_is_in_the_snapshot_for_its_person() -> None:
    """A note the app posts with chat.postEphemeral is listed with the one person who may see it."""
    from app.playground.view import ViewState, snapshot
    from threadbound_emulator import Workspace

    ws = Workspace()
    ws.add_channel("C1", "general")
    ts = ws.add_message("C1", "hello", "U1")
    ws.ephemerals.append(("C1", "U2", ts, "Only *Alice* can decide this."))
    [conversation] = snapshot(ws, ViewState(people=[]), 1)["conversations"]
    assert conversation["ephemerals"] == [
        {"user": "U2", "thread_ts": ts, "html": "<p>Only <em>Alice</em> can decide this.</p>\n"}
    ]


async def test_each_conversation_shows_the_profile_it_runs_under(tmp_path: Path) -> None:
    """#general under its profile by name, the DMs under the "dm" one; the page's data says which."""
    agent = tmp_path / "agent.toml"
    agent.write_text(
        '[profiles.team]\nchannels = ["#general"]\n[profiles.private]\nchannels = ["dm"]\n', encoding="utf-8"
    )
    async with Playground(_settings(tmp_path / "data", agent_file=agent), model=echo_model()) as pg:
        shown = {c["name"]: c["profile"] for c in pg.snapshot()["conversations"]}
    assert shown["general"] == "team"
    assert {shown[n] for n in shown if n != "general"} == {"private"}
