"""One agent run (app.run) without the scheduler: steering comes only from the Inbox it is handed."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from app.agent.agent_file import AgentFile
from app.agent.runtime import build_agent
from app.runs.run import RunExecutor
from channel.contract import Origin
from channel.fake import FakeAdapter
from channel.selection import select_tools
from channel.skills import SkillLibrary
from storage import open_store
from storage.base import InboxItem, Store
from tests.support.models import Turn, call, scripted


async def _claim(store: Store, thread_ts: str, ts: str, text: str, *, create: bool = False) -> InboxItem:
    outcome = await store.claim_message(
        event_id=f"Ev{ts}",
        channel="general",
        ts=ts,
        thread_ts=thread_ts,
        create=create,
        payload=json.dumps({"text": text, "author": "Alice"}),
        now=time.time(),
    )
    assert outcome.status == "claimed" and outcome.task_id
    [item] = [i for i in await store.pending_inbox(outcome.task_id) if i.item_id == outcome.item_id]
    return item


async def test_a_run_steers_in_what_its_inbox_supplies_and_nothing_else(tmp_path: Path) -> None:
    """Messages the Inbox callable supplies mid-run reach the model before its next request and are
    consumed with the run; a message that is only in the store stays pending for the next run."""
    adapter = FakeAdapter(files_dir=tmp_path / "provider")
    root = adapter.add_message(Origin("general"), "first question")
    store = open_store(f"sqlite:///{tmp_path}/run.db")
    await store.migrate()
    try:
        first = await _claim(store, root.ts, root.ts, "first question", create=True)
        supplied: list[InboxItem] = []
        prompts: list[str] = []

        async def inbox() -> Sequence[InboxItem]:
            return list(supplied)

        async def script(turn: Turn) -> list[Any]:
            prompts.append(turn.prompt)
            if len(prompts) == 1:
                # Two messages arrive while the model works; the inbox hands over only the first.
                supplied.append(await _claim(store, root.ts, "2.0", "second thought"))
                await _claim(store, root.ts, "3.0", "left for later")
                return [call("channel_reply", text="on it")]
            return [""]

        executor = RunExecutor(
            store=store,
            adapter=adapter,
            agent=build_agent(scripted(script)),
            tools=select_tools(adapter.features.enabled(), None, SkillLibrary([])),
            agent_file=AgentFile(),
            data_dir=tmp_path / "data",
        )
        outcome = await executor.run_inbox(first.task_id, [first], [], inbox)

        assert outcome.status == "ok" and outcome.replied
        assert "first question" in prompts[0] and "second thought" in prompts[1]
        assert not any("left for later" in p for p in prompts)
        assert outcome.consumed == [first.item_id, supplied[0].item_id]
        pending = await store.pending_inbox(first.task_id)
        assert [json.loads(i.payload)["text"] for i in pending] == ["left for later"]
        assert adapter.thread(Origin("general", root.ts))[-1].text == "on it"
    finally:
        await store.close()
