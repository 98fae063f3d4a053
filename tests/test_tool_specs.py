"""One spec per tool: everything people and the journal see of a tool comes from its ``ToolSpec``."""

from __future__ import annotations

import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

from app.runs import progress, resume, streaming
from channel.contract import Origin
from channel.fake import ALL_FEATURES, FakeAdapter
from channel.journal import JournalPolicy, Writes, journalled, redo
from channel.selection import select_tools
from channel.session import ChannelSession
from channel.skills import SkillLibrary
from channel.tools import CATALOG, MCP_SEARCH, MSG_HANDLE, ToolArgs, ToolSpec
from storage import open_store

SPECS = [*CATALOG.values(), MCP_SEARCH]


def test_a_spec_names_everything_by_keyword() -> None:
    """A spec is built by keyword only, and handler, status, step title and journal policy have no
    default: a new tool must say each."""
    required = {f.name for f in fields(ToolSpec)}
    assert {"handler", "status", "step_title", "journal", "feature", "starts"} <= required
    with pytest.raises(TypeError):
        ToolSpec("x", "X", "Does x.", ToolArgs)  # type: ignore[call-arg,misc]
    with pytest.raises(TypeError):
        ToolSpec(name="x", label="X", description="Does x.", args=ToolArgs)  # type: ignore[call-arg]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_every_spec_has_a_handler_texts_and_a_journal_policy(spec: ToolSpec) -> None:
    """Every catalog tool names its handler and journal policy; its status and title are text or None."""
    assert callable(spec.handler)
    assert isinstance(spec.journal, JournalPolicy)
    assert (spec.journal.settle is not None) == spec.journal.journalled
    assert spec.status is None or spec.status.startswith("is ")
    assert spec.step_title is None or spec.step_title[:1].isupper()


def test_a_journalled_policy_must_say_how_it_settles() -> None:
    """A journalled tool without a settle (or a settle on a tool that writes nothing) is refused."""
    with pytest.raises(ValueError):
        JournalPolicy(writes=Writes.JOURNALLED)
    with pytest.raises(ValueError):
        JournalPolicy(writes=Writes.NOTHING, settle=redo(lambda adapter, args: adapter.retract("r")))


class PinArgs(ToolArgs):
    message: str = Field(pattern=MSG_HANDLE, description="Handle of the message (msg_...).")


async def _pin(session: Any, args: PinArgs) -> dict[str, Any]:
    """A throwaway tool's handler: journals its write, and leaves the entry open (a crash)."""
    record = await session.handles.resolve(args.message, "msg")
    effect_id = await session.journal.open("channel_pin", {"ref": record.ref})
    return {"pinned": args.message, "effect": effect_id}


async def test_a_spec_added_alone_is_offered_dispatched_journalled_and_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool declared only by its spec (in the catalog) is offered, its calls reach its handler, an
    interrupted write of it settles by its journal policy, a resumed call reads its policy, and the
    status and step shown while it works are the spec's."""
    redone: list[dict[str, Any]] = []

    async def pin_again(adapter: Any, args: dict[str, Any]) -> None:
        redone.append(args)

    pin = ToolSpec(
        name="channel_pin",
        label="Pin a message",
        description="Pin a message of this conversation.",
        args=PinArgs,
        handler=_pin,
        status="is pinning…",
        step_title="Pinning",
        journal=journalled(redo(pin_again)),
        feature=None,
        starts="active",
    )
    monkeypatch.setitem(CATALOG, pin.name, pin)
    store = open_store(f"sqlite:///{tmp_path}/specs.db")
    await store.migrate()
    adapter = FakeAdapter(files_dir=tmp_path / "provider", features=ALL_FEATURES)
    root = adapter.add_message(Origin("general"), "pin me")
    task = await store.create_task(channel="general", thread_ts=root.ts, now=time.time())
    session = ChannelSession(
        adapter=adapter,
        store=store,
        task=task,
        origin=Origin("general", root.ts),
        tools=select_tools(adapter.features.enabled(), None, SkillLibrary([])),
        task_dir=tmp_path / "task",
    )
    try:
        assert "channel_pin" in session.offered_names()
        assert any(
            s.name == "channel_pin" and s.schema()["additionalProperties"] is False
            for s in session.active_specs()
        )
        read = await session.call("channel_read", {})
        message = read["messages"][0]["message"]
        result = await session.call("channel_pin", {"message": message})
        assert result["pinned"] == message
        [effect] = await store.open_effects(task.task_id)
        assert effect.tool == "channel_pin"
        notes = await session.reconcile([effect])
        assert redone == [{"ref": root.ref}] and notes == ["- an interrupted channel_pin was completed"]
        # A resumed run answers an unanswered call of it from its policy: journalled, so nothing was done.
        interrupted = resume._result("channel_pin", [])
        assert "nothing was done" in interrupted["error"]["message"]
        assert await streaming.step_title(session, "channel_pin", {}) == "Pinning"
        shown = progress.Progress("status")
        await shown.on_start(session, [])
        await shown.on_tool(session, "channel_pin")
        assert adapter.statuses[-1][1] == "is pinning…"
        await shown.on_end(session, [], "ok")
    finally:
        await store.close()


async def test_progress_and_streaming_show_exactly_each_specs_texts(tmp_path: Path) -> None:
    """The status a tool shows and the step title a streamed answer shows are its spec's, for
    every catalog tool; a tool without a status leaves it as it was, one without a title shows its name."""
    store = open_store(f"sqlite:///{tmp_path}/texts.db")
    await store.migrate()
    adapter = FakeAdapter(files_dir=tmp_path / "provider", features=ALL_FEATURES)
    root = adapter.add_message(Origin("general"), "hello")
    task = await store.create_task(channel="general", thread_ts=root.ts, now=time.time())
    session = ChannelSession(
        adapter=adapter,
        store=store,
        task=task,
        origin=Origin("general", root.ts),
        tools=select_tools(adapter.features.enabled(), None, SkillLibrary([])),
        task_dir=tmp_path / "task",
    )
    try:
        shown = progress.Progress("status")
        await shown.on_start(session, [])
        await shown.on_tool(session, "tickets_create")  # a host's tool: the thinking status stays
        assert [status for _, status in adapter.statuses] == ["is thinking…"]
        for spec in SPECS:
            count = len(adapter.statuses)
            await shown.on_tool(session, spec.name)
            if spec.status is None:
                assert len(adapter.statuses) == count, spec.name
            else:
                assert adapter.statuses[-1][1] == spec.status, spec.name
            assert await streaming.step_title(session, spec.name, {}) == (spec.step_title or spec.name)
        assert await streaming.step_title(session, "tickets_create", {}) == "tickets_create"
        await shown.on_end(session, [], "ok")
    finally:
        await store.close()
