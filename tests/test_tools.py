"""The channel tools end to end: a ChannelSession over the Slack adapter against the fake Slack,
the agent path through the real HTTP app with scripted models, and the provider-neutral parts
(tool_search, skills, capabilities) on the in-memory adapter."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.models import Model

from app.agent.agent_file import AgentFile
from app.service import Service, StartupError
from channel import tool_search
from channel.contract import (
    FEATURE_METHODS,
    AdapterBase,
    ChannelAdapter,
    ChannelFeatures,
    MessageView,
    Origin,
    missing_implementations,
)
from channel.fake import ALL_FEATURES, FakeAdapter
from channel.journal import NO_WRITES
from channel.selection import select_tools
from channel.session import ChannelSession
from channel.skills import SkillLibrary
from channel.tools import CHANNEL_TOOLS, ReplyArgs, ToolSpec
from storage import open_store
from tests.support import events
from tests.support.harness import AppHarness, settings_for
from tests.support.models import Turn, call, scripted
from tests.support.sessions import SessionEnv, slack_session
from threadbound_emulator import DEFAULT_SCOPES, FakeSlack

DEFERRED = [s.name for s in CHANNEL_TOOLS if s.starts == "deferred"]
ACTIVE = ["channel_reply", "channel_read", "channel_react", "no_reply", "tool_search"]
FORGED = "msg_AAAAAAAAAAAAAAAAAAAAAA"
# Provider ids of the fake workspace: none may reach the model outside a permalink.
RAW_IDS = re.compile(r"\b(C1|C2|D1|U1|U2|UBOT|BBOT|T1|F1)\b|\d{10}\.\d{6}")


def error_code(result: dict[str, Any]) -> str | None:
    error = result.get("error")
    return error.get("code") if isinstance(error, dict) else None


# -- a session over the Slack adapter, against the fake Slack --------------------------------------


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[SessionEnv]:
    async with FakeSlack() as slack:
        slack.add_user("U1", "alice", display_name="Alice")
        slack.add_user("U2", "bob", display_name="Bob")
        slack.add_channel("C1", "general")
        slack.add_channel("C2", "random")
        root = slack.add_message("C1", "<@UBOT> can you help <@U2>? See <#C2|random>", "U1")
        async with slack_session(slack, tmp_path, channel="C1", thread_ts=root, enabled=DEFERRED) as env:
            yield env


async def all_rows(env: SessionEnv, session: ChannelSession | None = None) -> list[dict[str, Any]]:
    """Every row of the session's conversation (the env's own by default), oldest first, paging
    through channel_read."""
    session = session or env.session
    pages: list[list[dict[str, Any]]] = []
    args: dict[str, Any] = {}
    while True:
        page = await session.call("channel_read", args)
        pages.append(page["messages"])
        if not page["next_cursor"]:
            return [row for p in reversed(pages) for row in p]
        args = {"cursor": page["next_cursor"]}


def bot_posts(env: SessionEnv) -> list[dict[str, Any]]:
    return [m for m in env.slack.messages("C1", env.root) if m.get("bot_id")]


async def person_handle(env: SessionEnv) -> str:
    """Handle of Alice's root message, as channel_read gives it."""
    return str((await all_rows(env))[0]["message"])


async def foreign_handle(env: SessionEnv) -> str:
    """A genuine handle, of a message the bot posted, minted for another task."""
    other_root = env.slack.add_message("C1", "another thread", "U2")
    other = await env.open_session(other_root, enabled=DEFERRED)
    return str((await other.call("channel_reply", {"text": "theirs"}))["message"])


# -- channel_react ----------------------------------------------------------------------------------


async def test_react_adds_and_removes(env: SessionEnv) -> None:
    """channel_react adds the bot's reaction to a message by handle and removes it again."""
    handle = await person_handle(env)
    assert await env.session.call("channel_react", {"message": handle, "emoji": ":thumbsup:"}) == {"ok": True}
    [root] = env.slack.messages("C1", env.root)[:1]
    assert root["reactions"] == [{"name": "thumbsup", "users": ["UBOT"], "count": 1}]
    removed = await env.session.call(
        "channel_react", {"message": handle, "emoji": "thumbsup", "action": "remove"}
    )
    assert removed == {"ok": True}
    assert "reactions" not in env.slack.messages("C1", env.root)[0]


async def test_react_twice_and_remove_missing_are_ok_with_a_note(env: SessionEnv) -> None:
    """already_reacted and no_reaction from Slack are reported as done, with a note saying so."""
    handle = await person_handle(env)
    await env.session.call("channel_react", {"message": handle, "emoji": "eyes"})
    again = await env.session.call("channel_react", {"message": handle, "emoji": "eyes"})
    assert again["ok"] is True and "already" in again["note"]
    missing = await env.session.call(
        "channel_react", {"message": handle, "emoji": "tada", "action": "remove"}
    )
    assert missing["ok"] is True and "no :tada: reaction" in missing["note"]
    assert env.slack.count("reactions.add") == 2 and env.slack.count("reactions.remove") == 1


async def test_react_invalid_emoji_is_an_error(env: SessionEnv) -> None:
    """A malformed emoji name is refused with no call; a name Slack does not know is invalid_arguments."""
    handle = await person_handle(env)
    before = len(env.slack.calls)
    for bad in ("Thumbs Up!", "", "a" * 90, "<!channel>"):
        result = await env.session.call("channel_react", {"message": handle, "emoji": bad})
        assert error_code(result) == "invalid_arguments", bad
    assert len(env.slack.calls) == before
    env.slack.fail("reactions.add", error="invalid_name")
    unknown = await env.session.call("channel_react", {"message": handle, "emoji": "no_such_emoji"})
    assert error_code(unknown) == "invalid_arguments" and "emoji" in unknown["error"]["message"]


@pytest.mark.parametrize("kind", ["foreign", "forged", "raw_ts", "raw_dressed"])
async def test_react_refuses_bad_handles_without_calling_slack(env: SessionEnv, kind: str) -> None:
    """Another task's handle, a forged one, and a raw Slack ts are invalid_handle, and nothing is sent."""
    handle = {
        "foreign": await foreign_handle(env),
        "forged": FORGED,
        "raw_ts": env.root,
        "raw_dressed": "msg_" + env.root.replace(".", ""),
    }[kind]
    before = len(env.slack.calls)
    result = await env.session.call("channel_react", {"message": handle, "emoji": "eyes"})
    assert error_code(result) == "invalid_handle"
    assert len(env.slack.calls) == before


# -- channel_edit and channel_retract --------------------------------------------------------------


async def test_edit_and_retract_own_post(env: SessionEnv) -> None:
    """The bot's own reply is edited in place by its handle, then retracted, and is gone from the thread."""
    posted = await env.session.call("channel_reply", {"text": "first draft"})
    edited = await env.session.call("channel_edit", {"message": posted["message"], "text": "**final** text"})
    assert edited == {"message": posted["message"]}
    [post] = bot_posts(env)
    assert post["blocks"] == [{"type": "markdown", "text": "**final** text"}] and "edited" in post
    assert await env.session.call("channel_retract", {"message": posted["message"]}) == {"ok": True}
    assert bot_posts(env) == []
    [delete] = env.slack.calls_to("chat.delete")
    assert delete.params["ts"] == post["ts"] and delete.params["channel"] == "C1"


async def test_edit_and_retract_refuse_a_persons_message(env: SessionEnv) -> None:
    """A person's message is not_authored for edit and retract, and Slack is never asked."""
    handle = await person_handle(env)
    before = len(env.slack.calls)
    edit = await env.session.call("channel_edit", {"message": handle, "text": "rewritten"})
    retract = await env.session.call("channel_retract", {"message": handle})
    assert error_code(edit) == "not_authored" and error_code(retract) == "not_authored"
    assert len(env.slack.calls) == before


@pytest.mark.parametrize("tool", ["channel_edit", "channel_retract"])
@pytest.mark.parametrize("kind", ["foreign", "forged", "raw_ts"])
async def test_edit_and_retract_refuse_bad_handles(env: SessionEnv, tool: str, kind: str) -> None:
    """Another task's own post, a forged handle, or a raw ts is invalid_handle, with no Slack call."""
    handle = {"foreign": await foreign_handle(env), "forged": FORGED, "raw_ts": env.root}[kind]
    before = len(env.slack.calls)
    args = {"message": handle, "text": "hijacked"} if tool == "channel_edit" else {"message": handle}
    assert error_code(await env.session.call(tool, args)) == "invalid_handle"
    assert len(env.slack.calls) == before
    if kind == "foreign":
        assert [m["text"] for m in env.slack.bot_messages("C1")] == ["theirs"]


@pytest.mark.parametrize(
    ("method", "slack_error", "tool", "code"),
    [
        ("chat.update", "cant_update_message", "channel_edit", "not_authored"),
        ("chat.update", "message_not_found", "channel_edit", "not_found"),
        ("chat.update", "edit_window_closed", "channel_edit", "slack_error"),
        ("chat.delete", "cant_delete_message", "channel_retract", "not_authored"),
        ("chat.delete", "message_not_found", "channel_retract", "not_found"),
    ],
)
async def test_slack_refusals_of_edit_and_retract_are_clear_errors(
    env: SessionEnv, method: str, slack_error: str, tool: str, code: str
) -> None:
    """Slack's refusals come back as the mapped error code, naming the method, after exactly one attempt."""
    posted = await env.session.call("channel_reply", {"text": "mine"})
    env.slack.fail(method, error=slack_error)
    args = (
        {"message": posted["message"], "text": "new"}
        if tool == "channel_edit"
        else {"message": posted["message"]}
    )
    result = await env.session.call(tool, args)
    assert error_code(result) == code
    assert method in result["error"]["message"] and "xoxb" not in result["error"]["message"]
    assert env.slack.count(method) == 1
    assert [p["text"] for p in bot_posts(env)] == ["mine"]


async def test_edit_longer_than_one_message_is_refused(env: SessionEnv) -> None:
    """An edit longer than one post allows is invalid_arguments and is not sent."""
    posted = await env.session.call("channel_reply", {"text": "short"})
    long_text = "x" * (env.adapter.max_post_chars + 1)
    result = await env.session.call("channel_edit", {"message": posted["message"], "text": long_text})
    assert error_code(result) == "invalid_arguments" and env.slack.count("chat.update") == 0


# -- long replies and mass mentions --------------------------------------------------------------


def long_markdown() -> str:
    """About 30,000 characters of Markdown: headings, paragraphs, lists, a long code fence, mass mentions."""
    out: list[str] = ["# Release report", "", "Hello <!channel> and <!here|here>, and @everyone too.", ""]
    for section in range(12):
        out += [f"## Section {section}", ""]
        out += [f"Paragraph marker-{section:02d}-p explaining things at some length. " * 10, ""]
        out += [f"- item marker-{section:02d}-{i} with some words to fill the line" for i in range(16)]
        out.append("")
        if section == 5:
            out += ["```python"]
            out += [
                f"print('code marker-{line:03d}')  # a comment to make the line longer" for line in range(200)
            ]
            out += ["```", ""]
    return "\n".join(out)


def fences_balanced(part: str) -> bool:
    return sum(1 for line in part.splitlines() if line.startswith("```")) % 2 == 0


async def test_long_reply_is_split_into_ordered_posts_in_the_thread(env: SessionEnv) -> None:
    """A ~30k-character reply goes out as consecutive thread posts, each within the limit with balanced
    fences, in order, listed in `parts`, each recorded as the bot's own."""
    text = long_markdown()
    assert 28_000 < len(text) < 40_000
    result = await env.session.call("channel_reply", {"text": text})
    posts = bot_posts(env)
    assert len(posts) >= 4 and len(result["parts"]) == len(posts)
    assert result["message"] == result["parts"][0]
    bodies = [p["blocks"][0]["text"] for p in posts]
    assert all(len(b) <= env.adapter.max_post_chars for b in bodies)
    assert all(fences_balanced(b) for b in bodies)
    assert all(p["thread_ts"] == env.root for p in posts)
    assert [c.params.get("thread_ts") for c in env.slack.calls_to("chat.postMessage")] == [env.root] * len(
        posts
    )
    markers = re.findall(r"marker-[\w-]+", "\n".join(bodies))
    assert markers == re.findall(r"marker-[\w-]+", text)  # every piece once, in the original order
    # Each part is the bot's own: editing part 2 by its handle edits exactly that post.
    await env.session.call("channel_edit", {"message": result["parts"][1], "text": "part two, revised"})
    after = [p["blocks"][0]["text"] for p in bot_posts(env)]
    assert after[1] == "part two, revised" and after[:1] + after[2:] == bodies[:1] + bodies[2:]


async def test_mass_mentions_are_neutralised(env: SessionEnv) -> None:
    """<!channel>, <!here> and @everyone reach Slack as harmless text, in blocks and fallback text alike."""
    await env.session.call(
        "channel_reply", {"text": "Ping <!channel>, <!here|here>, <!everyone> and @everyone"}
    )
    [post] = bot_posts(env)
    for field_text in (post["text"], post["blocks"][0]["text"]):
        assert "<!" not in field_text
        assert not {"@everyone", "@here", "@channel"} & set(re.findall(r"@\w+", field_text))
        assert "@\u200beveryone" in field_text and "@\u200bhere" in field_text


async def test_an_edit_reaches_slack_with_group_mentions_neutralised(env: SessionEnv) -> None:
    """An edit's <!subteam^…> and <!here> reach chat.update as harmless text, with no group id."""
    posted = await env.session.call("channel_reply", {"text": "draft"})
    await env.session.call(
        "channel_edit", {"message": posted["message"], "text": "<!subteam^S0123ABCD> <!here>"}
    )
    [update] = env.slack.calls_to("chat.update")
    for field_text in (update.params["text"], json.dumps(update.params["blocks"])):
        assert "<!" not in field_text and "S0123ABCD" not in field_text
    assert bot_posts(env)[0]["blocks"][0]["text"] == "@\u200bgroup @\u200bhere"


async def test_blank_reply_is_an_error_not_a_crash(env: SessionEnv) -> None:
    """A reply of only whitespace is invalid_arguments and posts nothing."""
    result = await env.session.call("channel_reply", {"text": "  \n "})
    assert error_code(result) == "invalid_arguments" and env.slack.count("chat.postMessage") == 0


# -- channel_read ---------------------------------------------------------------------------------------


async def test_read_rows_have_handles_authors_rendered_text_and_files(env: SessionEnv) -> None:
    """Rows carry a handle, the author's name and flags, text without raw ids, and file handles."""
    env.slack.add_file("F1", "plan.pdf", "application/pdf", b"%PDF-1.7 plan")
    env.slack.add_message(
        "C1", "here is the plan", "U2", thread_ts=env.root, files=[env.slack.file_object("F1")]
    )
    await env.session.call("channel_reply", {"text": "Thanks, **Bob**"})
    root, bob, mine = await all_rows(env, await env.open_session(env.root))  # a new run reads afresh
    assert set(root) == {"message", "author", "text", "time", "files"}
    assert root["author"] == {"display_name": "Alice", "is_bot": False, "is_you": False}
    assert root["text"] == "@threadbound can you help @Bob? See #random"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", root["time"])
    assert bob["author"]["display_name"] == "Bob"
    [file_row] = bob["files"]
    assert file_row["file"].startswith("file_") and "F1" not in file_row["file"]
    assert {k: file_row[k] for k in ("name", "media_type", "size")} == {
        "name": "plan.pdf",
        "media_type": "application/pdf",
        "size": 13,
    }
    assert mine["author"] == {"display_name": "threadbound", "is_bot": True, "is_you": True}
    assert all(r["message"].startswith("msg_") for r in (root, bob, mine))
    assert not RAW_IDS.search(" ".join(r["text"] for r in (root, bob, mine)))


async def test_reading_again_returns_the_same_handles(env: SessionEnv) -> None:
    """The same messages keep their handles on a second read and in a later session of the same task."""
    first = [r["message"] for r in await all_rows(env)]
    again = [r["message"] for r in await all_rows(env)]
    later = [r["message"] for r in await all_rows(env, await env.open_session(env.root))]
    assert first == again == later and len(set(first)) == len(first)


async def test_read_pages_backward_and_refuses_bad_cursors(env: SessionEnv) -> None:
    """The newest page comes first (oldest-first within it); next_cursor pages back; bad cursors fail."""
    for i in range(39):
        env.slack.add_message("C1", f"reply {i}", ("U1", "U2")[i % 2], thread_ts=env.root)
    first = await env.session.call("channel_read", {})
    assert [r["text"] for r in first["messages"]] == [f"reply {i}" for i in range(24, 39)]
    second = await env.session.call("channel_read", {"cursor": first["next_cursor"], "limit": 10})
    assert [r["text"] for r in second["messages"]] == [f"reply {i}" for i in range(14, 24)]
    rows = await all_rows(env)
    assert len(rows) == 40 and rows[0]["author"]["display_name"] == "Alice"
    assert env.slack.count("conversations.replies") == 1
    for cursor in ("garbage", "before_0", "before_999", "x" * 100):
        result = await env.session.call("channel_read", {"cursor": cursor})
        assert error_code(result) == "invalid_arguments", cursor
    assert error_code(await env.session.call("channel_read", {"limit": 16})) == "invalid_arguments"


# -- the agent path: a scripted model through the real HTTP app -------------------------------------


@dataclass
class Seen:
    """What a scripted model saw at each request, across runs."""

    tools: list[list[str]] = field(default_factory=list)
    results: list[tuple[str, Any]] = field(default_factory=list)
    instructions: list[str] = field(default_factory=list)


def recorder(seen: Seen, plan: Callable[[int, Turn], list[Any]]) -> Model:
    """A scripted model that records what it saw and answers request N (from 1) with ``plan(N, turn)``."""

    def script(turn: Turn) -> list[Any]:
        seen.tools.append(turn.tools)
        seen.results.extend(turn.results)
        seen.instructions.append(turn.info.instructions or "")
        return plan(len(seen.tools), turn)

    return scripted(script)


def workspace(slack: FakeSlack) -> None:
    slack.add_channel("C1", "general")
    slack.add_user("U1", "alice", display_name="Alice")


async def mention(app: AppHarness, text: str = "hello", thread_ts: str | None = None) -> str:
    ts = app.slack.add_message("C1", f"<@UBOT> {text}", user="U1", thread_ts=thread_ts)
    response = await app.deliver(events.app_mention("C1", "U1", f"<@UBOT> {text}", ts, thread_ts=thread_ts))
    assert response.status == 200
    await app.idle()
    return ts


async def test_first_request_offers_only_the_active_tools(tmp_path: Path) -> None:
    """At first a model is offered channel_reply, channel_read, channel_react and tool_search only."""
    seen = Seen()
    async with FakeSlack() as slack:
        workspace(slack)
        async with AppHarness(slack, model=recorder(seen, lambda n, t: [""]), data_dir=tmp_path) as app:
            await mention(app)
    assert seen.tools[0] == ACTIVE


async def test_tool_search_enables_a_tool_for_the_next_request_and_for_later_runs(tmp_path: Path) -> None:
    """tool_search('edit my message') offers channel_edit from the next request on, in later runs of the
    task, and after the server is rebuilt on the same data dir."""
    seen = Seen()

    def plan(n: int, turn: Turn) -> list[Any]:
        return [call("tool_search", query="edit my message")] if n == 1 else [""]

    async with FakeSlack() as slack:
        workspace(slack)
        async with AppHarness(slack, model=recorder(seen, plan), data_dir=tmp_path) as app:
            root = await mention(app, "fix your last message")
            assert "channel_edit" not in seen.tools[0] and "channel_edit" in seen.tools[1]
            enabled = [e["name"] for _, r in seen.results for e in r["enabled"]]
            assert enabled[0] == "channel_edit" and "channel_fetch_file" not in enabled
            await mention(app, "and again", thread_ts=root)
            assert "channel_edit" in seen.tools[2]
        async with AppHarness(slack, model=recorder(seen, plan), data_dir=tmp_path) as app:
            await mention(app, "after a restart", thread_ts=root)
        assert "channel_edit" in seen.tools[3]
        other = Seen()
        async with AppHarness(slack, model=recorder(other, lambda n, t: [""]), data_dir=tmp_path) as app:
            await mention(app, "a new task")
        assert other.tools[0] == ACTIVE  # enabling is per task


async def test_tool_search_never_offers_what_the_agent_file_did_not_select(tmp_path: Path) -> None:
    """With tools = [reply, read, edit], tool_search enables channel_edit but never channel_retract, and
    calling channel_retract anyway gives the model an error, not the end of its run."""
    agent_file = tmp_path / "agent.toml"
    agent_file.write_text('tools = ["channel_reply", "channel_read", "channel_edit"]\n')
    seen = Seen()

    def plan(n: int, turn: Turn) -> list[Any]:
        if n == 1:
            return [call("tool_search", query="retract delete edit my message", limit=10)]
        if n in (2, 3, 4):
            return [call("channel_retract", message=FORGED)]
        if n == 5:
            return [call("channel_reply", text="still here")]
        return [""]

    async with FakeSlack() as slack:
        workspace(slack)
        async with AppHarness(
            slack, model=recorder(seen, plan), data_dir=tmp_path / "data", agent_file=agent_file
        ) as app:
            await mention(app)
        assert seen.tools[0] == ["channel_reply", "channel_read", "tool_search"]
        assert all("channel_retract" not in tools for tools in seen.tools)
        assert "channel_edit" in seen.tools[1]
        search = next(r for name, r in seen.results if name == "tool_search")
        assert [e["name"] for e in search["enabled"]] == ["channel_edit"]
        refusals = [r for name, r in seen.results if name == "channel_retract"]
        assert len(refusals) == 3 and all("channel_retract" in str(r) for r in refusals)
        assert slack.count("chat.delete") == 0
        assert [m["text"] for m in slack.bot_messages("C1")] == ["still here"]


async def test_skills_tool_is_offered_only_when_skills_exist(tmp_path: Path) -> None:
    """A skills dir adds the skills tool to the first request; an empty one offers no skills tool."""
    skills_dir = tmp_path / "skills"
    skills_dir.mkdir()
    (skills_dir / "triage.md").write_text("# Triage a bug report\n")
    seen = Seen()
    async with FakeSlack() as slack:
        workspace(slack)
        async with AppHarness(
            slack, model=recorder(seen, lambda n, t: [""]), data_dir=tmp_path / "a", skills_dir=skills_dir
        ) as app:
            await mention(app)
        (tmp_path / "empty").mkdir()
        async with AppHarness(
            slack,
            model=recorder(seen, lambda n, t: [""]),
            data_dir=tmp_path / "b",
            skills_dir=tmp_path / "empty",
        ) as app:
            await mention(app, "again")
    assert seen.tools[0] == [*ACTIVE, "skills"]
    assert seen.tools[1] == ACTIVE


# -- tool_search ranking ----------------------------------------------------------------------------


def spec(name: str, label: str = "Thing", description: str = "Does a thing.") -> ToolSpec:
    return ToolSpec(
        name=name,
        label=label,
        description=description,
        args=ReplyArgs,
        handler=lambda session, args: session.replies.reply(args),
        status=None,
        step_title=None,
        journal=NO_WRITES,
        feature=None,
        starts="deferred",
    )


def test_rank_exact_name_beats_partial_beats_terms() -> None:
    """An exact name match outranks a name-contains match, which outranks any number of term matches."""
    exact = spec("channel_note")
    partial = spec("channel_notebook")
    terms = spec("channel_memo", "Note, note", "Note notes noted: take a note of notes for the note taker.")
    assert tool_search.rank([terms, partial, exact], "note", 3) == [exact, partial, terms]
    assert tool_search.rank([terms, partial], "note", 3) == [partial, terms]
    assert tool_search.rank([terms, partial, exact], "channel_note", 1) == [exact]


def test_rank_on_the_catalog() -> None:
    """Queries find the tool they describe first, weak matches are left out, and nothing matches nothing."""
    deferred = [s for s in CHANNEL_TOOLS if s.starts == "deferred"]

    def names(query: str, limit: int = 3) -> list[str]:
        return [s.name for s in tool_search.rank(deferred, query, limit)]

    assert names("edit my message")[0] == "channel_edit"
    assert "channel_fetch_file" not in names("edit my message")
    assert names("retract")[0] == "channel_retract"
    assert names("download a file")[0] == "channel_fetch_file"
    assert "channel_attach" in names("upload a file")
    assert names("post a canvas document") == ["channel_post_document"]
    assert names("editing") == ["channel_edit"]
    assert names("quantum teleportation") == []
    assert len(names("edit retract fetch attach document", limit=2)) == 2


# -- skills on the in-memory adapter ------------------------------------------------------------------


@dataclass
class Host:
    """A session over the in-memory adapter."""

    adapter: FakeAdapter
    session: ChannelSession
    root: str


HostFactory = Callable[..., Awaitable[Host]]


@pytest.fixture
async def fake_host(tmp_path: Path) -> AsyncIterator[HostFactory]:
    store = open_store(f"sqlite:///{tmp_path}/fake.db")
    await store.migrate()
    count = 0

    async def make(
        *,
        tools: list[str] | None = None,
        skills: SkillLibrary | None = None,
        features: ChannelFeatures | None = None,
    ) -> Host:
        nonlocal count
        count += 1
        adapter = FakeAdapter(files_dir=tmp_path / f"provider{count}", features=features or ALL_FEATURES)
        root = adapter.add_message(Origin("general"), "hello")
        task = await store.create_task(channel=f"general{count}", thread_ts=root.ts, now=time.time())
        session = ChannelSession(
            adapter=adapter,
            store=store,
            task=task,
            origin=Origin("general", root.ts),
            tools=select_tools(adapter.features.enabled(), tools, skills or SkillLibrary([])),
            task_dir=tmp_path / f"task{count}",
        )
        return Host(adapter, session, root.ts)

    try:
        yield make
    finally:
        await store.close()


def offered(session: ChannelSession) -> list[str]:
    return [s.name for s in session.active_specs()]


async def test_skills_index_body_and_unknown_name(tmp_path: Path, fake_host: HostFactory) -> None:
    """skills() lists names with summaries from front matter or heading; a name gives its body; an
    unknown name gives the index with a message."""
    folder = tmp_path / "skills"
    folder.mkdir()
    (folder / "release.md").write_text(
        "---\ndescription: How to cut a release\nowner: ops\n---\n# Releasing\n\n1. Tag it.\n"
    )
    (folder / "triage.md").write_text("\n# Triage a bug report\n\nAsk for steps to reproduce.\n")
    (folder / "notes.txt").write_text("not a skill")
    host = await fake_host(skills=SkillLibrary.load(folder))
    assert offered(host.session)[-1] == "skills"
    index = await host.session.call("skills", {})
    assert index == {
        "skills": [
            {"name": "release", "summary": "How to cut a release"},
            {"name": "triage", "summary": "Triage a bug report"},
        ]
    }
    body = await host.session.call("skills", {"name": "triage"})
    assert body == {"name": "triage", "markdown": (folder / "triage.md").read_text()}
    unknown = await host.session.call("skills", {"name": "deploy"})
    assert "deploy" in unknown["message"] and unknown["skills"] == index["skills"]
    assert host.adapter.calls == []


async def test_no_skills_no_skills_tool(tmp_path: Path, fake_host: HostFactory) -> None:
    """Without skills (no folder, or no .md files in it) the skills tool is neither offered nor callable."""
    empty = tmp_path / "empty"
    empty.mkdir()
    for library in (
        SkillLibrary.load(None),
        SkillLibrary.load(tmp_path / "missing"),
        SkillLibrary.load(empty),
    ):
        host = await fake_host(skills=library)
        assert "skills" not in offered(host.session)
        assert error_code(await host.session.call("skills", {})) == "unsupported"


async def test_tool_search_on_the_fake_enables_only_selected_tools(fake_host: HostFactory) -> None:
    """On the in-memory adapter, tool_search enables channel_edit for the session and persists it, while a
    tool the selection left out stays uncallable."""
    host = await fake_host(tools=["channel_reply", "channel_read", "channel_edit"])
    assert offered(host.session) == ["channel_reply", "channel_read", "tool_search"]
    blocked = await host.session.call("channel_edit", {"message": FORGED, "text": "x"})
    assert error_code(blocked) == "unsupported" and "tool_search" in blocked["error"]["message"]
    found = await host.session.call("tool_search", {"query": "retract edit my message", "limit": 10})
    assert [e["name"] for e in found["enabled"]] == ["channel_edit"]
    assert offered(host.session) == ["channel_reply", "channel_read", "channel_edit"]
    task = await host.session.store.get_task(host.session.task.task_id)
    assert task is not None and task.enabled_tools == ("channel_edit",)
    retract = await host.session.call("channel_retract", {"message": FORGED})
    assert error_code(retract) == "unsupported" and "tool_search" not in retract["error"]["message"]
    assert host.adapter.calls == []


# -- capabilities from scopes ------------------------------------------------------------------------


NO_UPLOADS = [s for s in DEFAULT_SCOPES if s not in ("files:write", "canvases:write")]


async def test_missing_scopes_leave_tools_absent(tmp_path: Path) -> None:
    """Without files:write and canvases:write the app starts, and attach/post_document are never offered."""
    seen = Seen()

    def plan(n: int, turn: Turn) -> list[Any]:
        if n == 1:
            return [call("tool_search", query="attach upload file post canvas document fetch", limit=10)]
        return [""]

    async with FakeSlack(scopes=NO_UPLOADS) as slack:
        workspace(slack)
        async with AppHarness(slack, model=recorder(seen, plan), data_dir=tmp_path) as app:
            await mention(app)
    offered_ever = {name for tools in seen.tools for name in tools}
    assert "channel_fetch_file" in seen.tools[1]
    assert not offered_ever & {"channel_attach", "channel_post_document"}


async def test_agent_file_selecting_an_unsupported_tool_fails_startup(tmp_path: Path) -> None:
    """An agent file selecting channel_attach on an install without files:write fails start-up, naming it."""
    agent_file = tmp_path / "agent.toml"
    agent_file.write_text('tools = ["channel_reply", "channel_attach"]\n')
    async with FakeSlack(scopes=NO_UPLOADS) as slack:
        with pytest.raises(StartupError, match="channel_attach"):
            await Service.create(settings_for(slack, tmp_path / "data", agent_file=agent_file), model=None)


async def test_agent_file_naming_an_unknown_tool_fails_startup(tmp_path: Path) -> None:
    """An agent file naming a tool that does not exist is a StartupError naming it."""
    agent_file = tmp_path / "agent.toml"
    agent_file.write_text('tools = ["channel_reply", "channel_teleport"]\n')
    async with FakeSlack() as slack:
        with pytest.raises(StartupError, match="channel_teleport"):
            await Service.create(settings_for(slack, tmp_path / "data", agent_file=agent_file), model=None)


def test_missing_implementations_flags_claimed_but_unimplemented_features() -> None:
    """An adapter claiming edit and documents but implementing only read is flagged for both."""

    class Half(AdapterBase):
        features = ChannelFeatures(read=True, edit=True, documents=True)

        async def read(self, origin: Origin) -> list[MessageView]:
            return []

    assert missing_implementations(Half()) == ["documents", "edit"]
    assert missing_implementations(FakeAdapter()) == []


def test_every_feature_method_is_a_method_of_the_adapter_protocol() -> None:
    """Each method FEATURE_METHODS names is declared by ChannelAdapter and defaulted by AdapterBase,
    and every feature flag has one."""
    assert set(FEATURE_METHODS) == set(ChannelFeatures().__dataclass_fields__)
    for flag, method in FEATURE_METHODS.items():
        assert callable(getattr(ChannelAdapter, method, None)), (flag, method)
        assert callable(getattr(AdapterBase, method, None)), (flag, method)


def test_select_tools_follows_features_and_the_agent_file() -> None:
    """Features filter the catalog; an agent file narrows it, always keeps channel_reply, ignores repeats."""
    features = ChannelFeatures(read=True, edit=True).enabled()
    everything = select_tools(features, None, SkillLibrary([]))
    follow_ups = ["channel_follow_up", "channel_follow_ups", "channel_cancel_follow_up"]  # need no feature
    assert [s.name for s in everything.channel_tools] == [
        "channel_reply", "channel_read", "channel_edit", *follow_ups, "no_reply"
    ]  # fmt: skip
    narrowed = select_tools(
        features, ["channel_read", "channel_edit", "channel_read", "tool_search"], SkillLibrary([])
    )
    assert [s.name for s in narrowed.channel_tools] == ["channel_reply", "channel_read", "channel_edit"]
    with pytest.raises(ValueError, match="channel_react"):
        select_tools(features, ["channel_react"], SkillLibrary([]))


# -- the agent file and the instructions --------------------------------------------------------------


@pytest.mark.parametrize("source", ["inline", "file"])
async def test_agent_file_instructions_reach_the_model(tmp_path: Path, source: str) -> None:
    """agent.toml instructions, inline or loaded from prompt.md beside it, reach the model's instructions."""
    agent_file = tmp_path / "agent.toml"
    if source == "inline":
        agent_file.write_text('instructions = "Always answer like a pirate."\n')
    else:
        (tmp_path / "prompt.md").write_text("# Persona\n\nAlways answer like a pirate.\n")
        agent_file.write_text('instructions = "prompt.md"\n')
    seen = Seen()
    async with FakeSlack() as slack:
        workspace(slack)
        async with AppHarness(
            slack, model=recorder(seen, lambda n, t: [""]), data_dir=tmp_path / "data", agent_file=agent_file
        ) as app:
            await mention(app)
    assert "Always answer like a pirate." in seen.instructions[0]
    assert "prompt.md" not in seen.instructions[0]


async def built_model_name(slack: FakeSlack, data_dir: Path, agent_file: Path, model: str) -> str:
    service = await Service.create(
        settings_for(slack, data_dir, agent_file=agent_file, model=model), model=None
    )
    try:
        built = service.runner.executor.agent.model
        assert isinstance(built, Model)
        return built.model_name
    finally:
        await service.close()


async def test_model_from_agent_file_unless_model_is_set(tmp_path: Path) -> None:
    """agent.toml's model is used when MODEL is unset; MODEL overrides it; neither is a StartupError."""
    agent_file = tmp_path / "agent.toml"
    agent_file.write_text('model = "openai-chat:from-file"\n')
    assert AgentFile.load(agent_file).model == "openai-chat:from-file"
    async with FakeSlack() as slack:
        assert await built_model_name(slack, tmp_path / "a", agent_file, "") == "from-file"
        assert await built_model_name(slack, tmp_path / "b", agent_file, "openai-chat:from-env") == "from-env"
        empty = tmp_path / "empty.toml"
        empty.write_text("")
        with pytest.raises(StartupError, match="MODEL"):
            await Service.create(settings_for(slack, tmp_path / "c", agent_file=empty, model=""), model=None)


async def test_instructions_name_the_origin_without_raw_ids(tmp_path: Path) -> None:
    """Instructions name '#general' or 'a direct message with Alice', say answers go only through
    channel_reply, and carry no provider id outside the permalink."""
    seen = Seen()
    async with FakeSlack() as slack:
        workspace(slack)
        slack.add_channel("D1", "alice-dm", is_im=True, user="U1")
        async with AppHarness(slack, model=recorder(seen, lambda n, t: [""]), data_dir=tmp_path) as app:
            await mention(app)
            ts = slack.add_message("D1", "hi there", user="U1")
            await app.deliver(events.message("D1", "U1", "hi there", ts, channel_type="im"))
            await app.idle()
    channel, direct = seen.instructions
    assert "#general" in channel and "in a thread" in channel
    assert "a direct message with Alice" in direct
    for text in (channel, direct):
        assert "only through channel_reply" in text
        assert "https://fake.slack.com/archives/" in text
        assert not RAW_IDS.search(re.sub(r"https://\S+", "", text)), text


async def test_instructions_do_not_change_when_tool_search_enables_a_tool(tmp_path: Path) -> None:
    """The instructions are byte-identical before and after tool_search enables channel_edit, and in the
    conversation's next run (a stable, cacheable prefix); they name the tools tool_search can enable,
    and the search result, not the instructions, says what it enabled. The tool definitions keep their
    order: the enabled tool is appended after them, in this run and the next."""
    seen = Seen()

    def plan(n: int, turn: Turn) -> list[Any]:
        return [call("tool_search", query="edit my message")] if n == 1 else [""]

    async with FakeSlack() as slack:
        workspace(slack)
        async with AppHarness(slack, model=recorder(seen, plan), data_dir=tmp_path) as app:
            root = await mention(app, "fix your last message")
            await mention(app, "and again", thread_ts=root)
    assert "channel_edit" not in seen.tools[0] and "channel_edit" in seen.tools[1]
    before, after = seen.tools[0], seen.tools[1]
    assert after[: len(before)] == before and "channel_edit" in after[len(before) :]
    assert all(tools == seen.tools[1] for tools in seen.tools[1:])
    assert len(set(seen.instructions)) == 1
    assert "tool_search can enable more: channel_edit" in seen.instructions[0]
    search = next(r for name, r in seen.results if name == "tool_search")
    assert search["enabled"][0]["name"] == "channel_edit"
