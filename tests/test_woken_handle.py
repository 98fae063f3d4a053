"""The woken message's handle is minted in the lease's store trip (app.runs.start): the prompt
shows that handle, the store resolves it, a handle the message had already is kept, and the wake-up
carries the message across the edge's wire."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from app.intake.edge_process import EdgeProcess, Wiring
from app.intake.edge_wire import ToService
from storage.base import Store
from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import Turn, call, scripted
from threadbound_emulator import FakeSlack

HANDLE = re.compile(r"msg_[A-Za-z0-9_-]{8,40}")


def _workspace(slack: FakeSlack) -> None:
    slack.add_channel("C1", "general")
    slack.add_user("U1", "alice", display_name="Alice")


def _react_to_the_prompt(prompts: list[str]) -> Any:
    """A model that reacts to the message its prompt shows (by the handle it was given), then stops."""

    def script(turn: Turn) -> list[Any]:
        if turn.prompt:
            prompts.append(turn.prompt)
            return [call("channel_react", message=HANDLE.findall(turn.prompt)[-1], emoji="eyes")]
        return [""]

    return scripted(script)


@contextlib.asynccontextmanager
async def _served(tmp_path: Path, prompts: list[str]) -> AsyncIterator[tuple[FakeSlack, AppHarness, Store]]:
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(
            slack, model=_react_to_the_prompt(prompts), data_dir=tmp_path, stream="off"
        ) as app:
            assert app.service is not None
            yield slack, app, app.service.store


async def test_the_prompts_handle_is_the_one_minted_with_the_lease(tmp_path: Path) -> None:
    """Minted before the lease's trip returned, once; the prompt shows it and a tool resolves it."""
    prompts: list[str] = []
    async with _served(tmp_path, prompts) as (slack, app, store):
        minted: list[str] = []
        order: list[str] = []
        mint, take = store.mint_handle, store.take_lease_with_state

        async def recording(**kwargs: Any) -> Any:
            order.append("mint")
            record = await mint(**kwargs)
            minted.append(record.handle)
            return record

        async def taking(*args: Any, **kwargs: Any) -> Any:
            try:
                return await take(*args, **kwargs)
            finally:
                order.append("lease taken")

        store.mint_handle = recording  # type: ignore[method-assign]
        store.take_lease_with_state = taking  # type: ignore[method-assign]
        ts = slack.add_message("C1", "<@UBOT> look at this", user="U1")
        assert (await app.deliver(events.app_mention("C1", "U1", "<@UBOT> look at this", ts))).status == 200
        await app.idle()
        task_id = await store.find_task("C1", ts)
        assert task_id is not None
        record = await store.find_handle(task_id, "msg", f"C1:{ts}")
        [prompt] = prompts
        assert record is not None and HANDLE.findall(prompt)[-1] == record.handle
        assert minted == [record.handle]  # minted once: with the lease, not again for the prompt
        assert order == ["mint", "lease taken"]  # in the lease's trip, not after it
        [message] = [m for m in slack.messages("C1") if m["ts"] == ts]
        assert [r["name"] for r in message.get("reactions", [])] == ["eyes"]


async def test_a_handle_the_message_had_already_is_the_one_shown(tmp_path: Path) -> None:
    """The early mint is an upsert: a reply in a thread whose message the task knew already (a
    channel_read minted its handle) is shown with that handle, never a second one."""
    prompts: list[str] = []
    async with _served(tmp_path, prompts) as (slack, app, store):
        root = slack.add_message("C1", "<@UBOT> first", user="U1")
        await app.deliver(events.app_mention("C1", "U1", "<@UBOT> first", root))
        await app.idle()
        task_id = await store.find_task("C1", root)
        assert task_id is not None
        reply = slack.add_message("C1", "<@UBOT> second", user="U1", thread_ts=root)
        known = await store.mint_handle(
            task_id=task_id, kind="msg", ref=f"C1:{reply}", handle="msg_known1234"
        )
        await app.deliver(events.app_mention("C1", "U1", "<@UBOT> second", reply, thread_ts=root))
        await app.idle()
        assert len(prompts) == 2 and HANDLE.findall(prompts[1])[-1] == known.handle == "msg_known1234"


async def test_the_wake_up_carries_the_claimed_message_across_the_wire() -> None:
    ours, theirs = socket.socketpair()
    try:
        _, writer = await asyncio.open_connection(sock=ours)
        wire = ToService(writer)
        wire.notify("T1", "U1", ("C1", "1700000000.000100"))
        wire.notify("T2")
        await wire.drain()
        theirs.setblocking(True)
        lines = theirs.recv(65536).decode().splitlines()
        heard: list[tuple[str, str | None, tuple[str, str] | None]] = []
        wiring = Wiring(
            notify=lambda *woken: heard.append(woken), delivered=None, external=None, ack_gate=None
        )
        edge = EdgeProcess(0, theirs)
        for line in lines:
            edge._heard(json.loads(line), wiring)
        for odd in (["C1"], ["C1", 5], "C1:1.0", ["", ""]):  # not a (channel, ts): no early mint
            edge._heard({"t": "wake", "task": "T3", "message": odd}, wiring)
        assert (
            heard
            == [("T1", "U1", ("C1", "1700000000.000100")), ("T2", None, None)] + [("T3", None, None)] * 4
        )
        writer.close()
    finally:
        ours.close()
        theirs.close()
