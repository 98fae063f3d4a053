"""A person's Stop on a run in progress, in-process over the fake adapter (no Slack code): the run is
halted, its stop settled, its session left ``active``, the person told; the model's next turn learns it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessagesTypeAdapter, TextPart

from app.runs.agent_session import SessionStatuses, title_of
from app.runs.run import RunHooks
from app.runs.stop import STOPPED_NOTICE
from channel.contract import FEATURE_METHODS, ChannelFeatures, Origin
from channel.fake import FakeAdapter
from storage import open_store
from tests.support.models import Turn
from tests.support.runs import scripted_executor

SESSIONS = ChannelFeatures(**{name: name != "ask" for name in FEATURE_METHODS})


async def _bob(user: str) -> tuple[str, bool]:
    return ("Bob" if user == "U2" else user, False)


async def test_a_halted_run_settles_its_stop_and_leaves_the_session_active(tmp_path: Path) -> None:
    """Halted while the model works: status ``halted``, the turn's item consumed, the transcript ends in
    a note naming who stopped it, the session went ``processing`` then ``active``, the stopper told."""
    adapter = FakeAdapter(features=SESSIONS, files_dir=tmp_path / "provider")
    root = adapter.add_message(Origin("general"), "please write a lot")
    store = open_store(f"sqlite:///{tmp_path}/run.db")
    await store.migrate()
    try:
        outcome = await store.claim_message(
            event_id="Ev1",
            channel="general",
            ts=root.ts,
            thread_ts=root.ts,
            create=True,
            payload='{"text": "please write a lot", "author": "Alice"}',
            now=time.time(),
        )
        assert outcome.task_id is not None
        task_id = outcome.task_id
        [item] = await store.pending_inbox(task_id)
        sessions = SessionStatuses(store)
        hooks = RunHooks(on_start=sessions.on_start, on_end=sessions.on_end)
        executor: Any = None

        async def script(turn: Turn) -> list[Any]:
            assert executor.halt(task_id, "U2")  # Bob presses Stop while the model works
            assert not executor.halt(task_id, "U2")  # once
            await asyncio.sleep(30)
            return ["never written"]

        executor = scripted_executor(store, adapter, script, tmp_path / "data", hooks=hooks, name_of=_bob)

        async def inbox() -> list[Any]:
            return []

        result = await executor.run_inbox(task_id, [item], [], inbox)
        assert result.status == "halted"
        assert await store.pending_inbox(task_id) == []
        task = await store.get_task(task_id)
        assert task is not None and not task.run_open
        last = ModelMessagesTypeAdapter.validate_json(task.transcript)[-1]
        assert isinstance(last.parts[0], TextPart) and "stopped by Bob" in last.parts[0].content
        origin = Origin("general", root.ts)
        assert [s for o, s, _ in adapter.sessions if o == origin] == ["processing", "active"]
        assert adapter.sessions[0][2] == "please write a lot"
        assert adapter.private_notes == [("general", "U2", STOPPED_NOTICE)]
        assert not [m for m in adapter.messages if m.text == "never written"]
        assert not executor.halt(task_id, "U2")  # between runs: nothing to halt
    finally:
        await store.close()


def test_a_session_title_is_the_first_line_shortened() -> None:
    """A new session's title: the first non-empty line, at most 60 characters."""
    assert title_of("\n  Ship it on Friday?  \nmore") == "Ship it on Friday?"
    long = title_of("x" * 100)
    assert len(long) == 60 and long.endswith("…")
