"""Direct host use of ``channel/``: a ChannelSession over the in-memory FakeAdapter and a SQLite
store, with no app/ and no Slack: bind a conversation, get its tools, call them."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from channel.contract import ChannelFeatures, Origin
from channel.errors import ChannelError
from channel.fake import FakeAdapter
from channel.selection import select_tools
from channel.session import ChannelSession
from channel.skills import SkillLibrary
from storage import Store, open_store


@dataclass
class Host:
    adapter: FakeAdapter
    store: Store
    session: ChannelSession
    origin: Origin
    task_dir: Path


async def bind(
    tmp_path: Path, store: Store, adapter: FakeAdapter, *, enabled: list[str] | None = None
) -> Host:
    """What a custom host does: a conversation, a task for it (with the deferred tools it wants on from
    the start), and a session with the tools the adapter supports."""
    root = adapter.add_message(Origin("general"), "Can someone check the build?", author="Alice")
    origin = Origin("general", root.ts)
    created = await store.create_task(channel=origin.channel, thread_ts=origin.thread, now=time.time())
    await store.set_enabled_tools(created.task_id, enabled or [])
    task = await store.get_task(created.task_id)
    assert task is not None
    task_dir = tmp_path / "tasks" / task.task_id
    session = ChannelSession(
        adapter=adapter,
        store=store,
        task=task,
        origin=origin,
        tools=select_tools(adapter.features.enabled(), None, SkillLibrary([])),
        task_dir=task_dir,
    )
    return Host(adapter, store, session, origin, task_dir)


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[Host]:
    store = open_store(f"sqlite:///{tmp_path}/host.db")
    await store.migrate()
    try:
        adapter = FakeAdapter(files_dir=tmp_path / "provider")
        yield await bind(tmp_path, store, adapter, enabled=["channel_edit", "channel_retract"])
    finally:
        await store.close()


def texts(host: Host) -> list[str]:
    return [m.text for m in host.adapter.thread(host.origin)]


async def test_reply_read_react_edit_without_slack(host: Host) -> None:
    """A host posts a reply, reads the thread with handles, reacts to a message and edits its own reply."""
    reply = await host.session.call("channel_reply", {"text": "On it."})
    assert reply["message"].startswith("msg_") and host.session.replied
    assert texts(host) == ["Can someone check the build?", "On it."]

    page = await host.session.call("channel_read", {})
    alice, mine = page["messages"]
    assert alice["author"] == {"display_name": "Alice", "is_bot": False, "is_you": False}
    assert mine["message"] == reply["message"] and mine["author"]["is_you"] is True
    assert page["next_cursor"] is None

    assert await host.session.call("channel_react", {"message": alice["message"], "emoji": "eyes"}) == {
        "ok": True
    }
    root = host.adapter.thread(host.origin)[0]
    assert root.reactions == {"eyes": ["assistant"]}

    edited = await host.session.call("channel_edit", {"message": reply["message"], "text": "Done: green."})
    assert edited == {"message": reply["message"]}
    assert texts(host)[-1] == "Done: green." and host.adapter.thread(host.origin)[-1].edited


async def test_fake_adapter_enforces_the_contract(host: Host) -> None:
    """Edits of a person's message, a second identical reaction and a removal of none behave as on Slack."""
    alice = (await host.session.call("channel_read", {}))["messages"][0]["message"]
    refused = await host.session.call("channel_edit", {"message": alice, "text": "x"})
    assert refused["error"]["code"] == "not_authored" and host.adapter.count("edit") == 0
    await host.session.call("channel_react", {"message": alice, "emoji": "tada"})
    again = await host.session.call("channel_react", {"message": alice, "emoji": "tada"})
    none = await host.session.call("channel_react", {"message": alice, "emoji": "wave", "action": "remove"})
    assert "already" in again["note"] and "no :wave:" in none["note"]
    host.adapter.fail("post", ChannelError("rate_limited", "slow down"))
    failed = await host.session.call("channel_reply", {"text": "hi"})
    assert failed["error"] == {"code": "rate_limited", "message": "slow down"}


async def test_fake_adapter_refuses_to_change_what_it_did_not_post(host: Host) -> None:
    """The fake adapter itself, called directly (not through the session's journal), refuses to edit
    or delete a person's message, as Slack does, and leaves the message as it was."""
    person = host.adapter.thread(host.origin)[0]
    assert not person.is_you
    for attempt in (host.adapter.edit(person.ref, "rewritten"), host.adapter.retract(person.ref)):
        with pytest.raises(ChannelError) as refused:
            await attempt
        assert refused.value.code == "not_authored"
    assert [(m.ref, m.text, m.edited) for m in host.adapter.thread(host.origin)] == [
        (person.ref, "Can someone check the build?", False)
    ]


async def test_retract_files_and_documents_without_slack(host: Host) -> None:
    """Retract removes the bot's post; files fetch into the task dir and attach back; documents are linked."""
    reply = await host.session.call("channel_reply", {"text": "oops"})
    assert await host.session.call("channel_retract", {"message": reply["message"]}) == {"ok": True}
    assert texts(host) == ["Can someone check the build?"]

    await host.session.call("tool_search", {"query": "download a file", "limit": 1})
    meta = host.adapter.add_file("build.log", b"all green\n", "text/plain")
    host.adapter.add_message(host.origin, "log attached", author="Bob", files=[meta])
    [file_row] = (await host.session.call("channel_read", {}))["messages"][-1]["files"]
    fetched = await host.session.call("channel_fetch_file", {"file": file_row["file"]})
    assert fetched == {
        "path": "files/build.log",
        "media_type": "text/plain",
        "size": 10,
        "sha256": hashlib.sha256(b"all green\n").hexdigest(),
    }
    await host.session.call("tool_search", {"query": "attach", "limit": 1})
    attached = await host.session.call("channel_attach", {"path": fetched["path"], "comment": "same log"})
    assert attached["file"].startswith("file_") and texts(host)[-1] == "same log"

    await host.session.call("tool_search", {"query": "post_document", "limit": 1})
    doc = await host.session.call("channel_post_document", {"title": "Build", "markdown": "# Green"})
    [stored] = host.adapter.documents.values()
    assert stored.markdown == "# Green" and doc["permalink"] in texts(host)[-1]


async def test_features_decide_which_tools_exist(tmp_path: Path) -> None:
    """An adapter with only read turned on gets reply and read; a feature it lacks is refused, not called."""
    store = open_store(f"sqlite:///{tmp_path}/host.db")
    await store.migrate()
    try:
        adapter = FakeAdapter(files_dir=tmp_path / "provider", features=ChannelFeatures(read=True))
        host = await bind(tmp_path, store, adapter)
        # no_reply and the deferred follow-up and ask tools need no feature (so tool_search is offered).
        offered = [s.name for s in host.session.active_specs()]
        assert offered == ["channel_reply", "channel_read", "no_reply", "tool_search"]
        row: dict[str, Any] = (await host.session.call("channel_read", {}))["messages"][0]
        result = await host.session.call("channel_react", {"message": row["message"], "emoji": "eyes"})
        assert result["error"]["code"] == "unsupported" and adapter.count("react") == 0
        with pytest.raises(ValueError, match="channel_edit"):
            select_tools(adapter.features.enabled(), ["channel_edit"], SkillLibrary([]))
    finally:
        await store.close()


async def test_look_ahead_starts_the_description_once_for_its_origin(host: Host) -> None:
    """look_ahead() asks the adapter at once (the run's store trips then overlap the lookup); the
    instructions' describe() reuses that one answer; a changed origin is described afresh."""
    host.session.look_ahead()
    host.session.look_ahead()
    await asyncio.sleep(0)  # the lookup runs without anyone awaiting it
    assert host.adapter.count("describe") == 1
    info = await host.session.describe()
    assert info == await host.adapter.describe(host.origin)
    assert host.adapter.count("describe") == 2  # the session's call made none of its own
    host.session.origin = Origin(host.origin.channel, "")
    assert (await host.session.describe()).is_thread is False
    assert host.adapter.count("describe") == 3
