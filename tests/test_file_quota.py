"""Disk reserved before a download starts: parallel fetches of one model response cannot pass the
task's quota together, and caps per person and for the install hold across tasks."""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import BinaryContent

from app.agent.mcp.toolset import readable
from channel import task_files
from channel.file_quota import FileQuota
from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import Turn, call, scripted
from tests.support.sessions import SessionEnv, slack_session
from threadbound_emulator import FakeSlack

FILES = [f"F0PARALLEL{n}" for n in range(5)]
SIZE = 1_000_000


def stored(data_dir: Path) -> int:
    """Bytes of every file the app keeps under its task directories."""
    return sum(p.stat().st_size for p in (data_dir / "tasks").glob("*/files/*") if p.is_file())


async def test_parallel_fetches_in_one_model_response_cannot_pass_the_task_quota(tmp_path: Path) -> None:
    """Five channel_fetch_file calls of 1,000,000 bytes in one model response, under a 1,500,000-byte
    TASK_FILES_MAX_BYTES: one downloads, the others read file_refused naming the quota, and the task
    never holds more than its quota."""
    results: list[tuple[str, Any]] = []

    def script(turn: Turn) -> list[Any]:
        results.extend(turn.results)
        if turn.step == 0:
            return [call("tool_search", query="download a file", limit=1)]
        if turn.step == 1:
            handles = sorted(set(events_handles(turn.history_text)))
            assert len(handles) == len(FILES)
            return [call("channel_fetch_file", file=h) for h in handles]
        if turn.step == 2:
            return [call("channel_reply", text="fetched what fits")]
        return [""]

    data_dir = tmp_path / "data"
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        for n, file_id in enumerate(FILES):
            slack.add_file(file_id, f"part{n}.bin", "application/octet-stream", bytes([n]) * SIZE)
        shared = [slack.file_object(f) for f in FILES]
        async with AppHarness(
            slack, model=scripted(script), data_dir=data_dir, task_files_max_bytes=1_500_000
        ) as app:
            text = "<@UBOT> read all of these"
            ts = slack.add_message("C1", text, user="U1", files=shared)
            await app.deliver(events.app_mention("C1", "U1", text, ts, files=shared))
            await app.idle()
        assert [m["text"] for m in slack.bot_messages("C1")] == ["fetched what fits"]
    fetched = [r for name, r in results if name == "channel_fetch_file"]
    assert len(fetched) == len(FILES)
    landed = [r for r in fetched if "path" in r]
    refused = [r["error"] for r in fetched if "error" in r]
    assert len(landed) == 1 and landed[0]["size"] == SIZE
    assert len(refused) == 4
    assert all(e["code"] == "file_refused" and "TASK_FILES_MAX_BYTES" in e["message"] for e in refused)
    assert stored(data_dir) == SIZE


def events_handles(text: str) -> list[str]:
    """The file handles a prompt shows."""
    return re.findall(r"\"file\": \"(file_[^\"]+)\"", text)


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[SessionEnv]:
    async with FakeSlack() as slack:
        slack.add_user("U1", "alice", display_name="Alice")
        slack.add_user("U2", "bob", display_name="Bob")
        slack.add_channel("C1", "general")
        root = slack.add_message("C1", "<@UBOT> look", "U1")
        async with slack_session(
            slack, tmp_path, channel="C1", thread_ts=root, enabled=["channel_fetch_file"]
        ) as env:
            yield env


async def handle_in(env: SessionEnv, session: Any, thread_ts: str, file_id: str, size: int) -> str:
    """Share a file of ``size`` bytes in ``thread_ts`` and return its handle as ``session`` reads it."""
    env.slack.add_file(file_id, f"{file_id}.bin", "application/octet-stream", b"x" * size)
    env.slack.add_message("C1", "here", "U1", thread_ts=thread_ts, files=[env.slack.file_object(file_id)])
    result = await session.call("channel_read", {})
    return str(result["messages"][-1]["files"][0]["file"])


async def test_a_person_cap_counts_their_files_across_tasks(env: SessionEnv) -> None:
    """USER_FILES_MAX_BYTES: the files one person's requests fetched in one task count against their
    fetch in another; another person's fetch there still fits."""
    quota = FileQuota(env.tasks_dir, person_max=1000)
    other_root = env.slack.add_message("C1", "<@UBOT> another", "U1")
    first = env.session
    second = await env.open_session(other_root, enabled=["channel_fetch_file"])
    for session in (first, second):
        session.files.quota = quota
        session.requester = "U1"
    one = await handle_in(env, first, env.root, "F0PERSON01", 600)
    two = await handle_in(env, second, other_root, "F0PERSON02", 600)
    assert (await first.call("channel_fetch_file", {"file": one}))["size"] == 600
    refused = await second.call("channel_fetch_file", {"file": two})
    assert refused["error"]["code"] == "file_refused"
    assert "USER_FILES_MAX_BYTES" in refused["error"]["message"]
    second.requester = "U2"
    assert (await second.call("channel_fetch_file", {"file": two}))["size"] == 600


async def test_the_install_cap_counts_every_tasks_files(env: SessionEnv) -> None:
    """FILES_MAX_BYTES: files already in one task's directory leave no room for another task's fetch."""
    quota = FileQuota(env.tasks_dir, install_max=1000)
    other_root = env.slack.add_message("C1", "<@UBOT> another", "U2")
    second = await env.open_session(other_root, enabled=["channel_fetch_file"])
    env.session.files.quota = second.files.quota = quota
    one = await handle_in(env, env.session, env.root, "F0INSTALL1", 600)
    two = await handle_in(env, second, other_root, "F0INSTALL2", 600)
    assert (await env.session.call("channel_fetch_file", {"file": one}))["size"] == 600
    refused = await second.call("channel_fetch_file", {"file": two})
    assert refused["error"]["code"] == "file_refused" and "FILES_MAX_BYTES" in refused["error"]["message"]
    assert not (second.task_dir / "files" / "F0INSTALL2.bin").exists()


async def test_a_reservation_is_released_when_the_download_fails(tmp_path: Path) -> None:
    """A refused or failed write gives its reserved bytes back: the next file fits again."""
    quota = FileQuota(tmp_path)
    task_dir = tmp_path / "T1"
    with pytest.raises(RuntimeError):
        async with quota.reserve(task_dir, 900, task_max=1000):
            raise RuntimeError("the download broke")
    async with quota.reserve(task_dir, 900, task_max=1000):
        pass


def test_parallel_writers_of_the_fetch_index_lose_nothing(tmp_path: Path) -> None:
    """Many threads recording fetches at once (parallel fetches of one task) neither crash over a
    shared temporary file nor lose an entry."""
    start = threading.Barrier(16)
    errors: list[BaseException] = []

    def record(n: int) -> None:
        start.wait()
        for i in range(20):
            try:
                entry = {"path": f"files/{n}-{i}", "size": i, "sha256": hashlib.sha256(b"").hexdigest()}
                task_files.remember(tmp_path, f"ref{n}-{i}|", entry)
            except BaseException as exc:
                errors.append(exc)

    threads = [threading.Thread(target=record, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    index = (tmp_path / ".fetched.json").read_text(encoding="utf-8")
    assert all(f'"ref{n}-{i}|"' in index for n in range(16) for i in range(20))
    assert sorted(p.name for p in tmp_path.iterdir()) == [".fetched.json"]


async def test_an_mcp_file_counts_for_the_person_who_asked(tmp_path: Path) -> None:
    """An image an MCP tool returned for U1 in one task leaves U1 no room under USER_FILES_MAX_BYTES
    for another in a second task; U2 still has room."""
    quota = FileQuota(tmp_path, person_max=6000)
    first, second = tmp_path / "T1", tmp_path / "T2"
    image = BinaryContent(data=b"\x89PNG" + b"1" * 4000, media_type="image/png")
    other = BinaryContent(data=b"\x89PNG" + b"2" * 4000, media_type="image/png")
    saved = await readable([image], first, "charts_chart", quota=quota, person="U1")
    assert saved["content"][0]["size"] == 4004
    refused = await readable([other], second, "charts_chart", quota=quota, person="U1")
    assert refused[0]["error"]["code"] == "file_refused"
    assert "USER_FILES_MAX_BYTES" in refused[0]["error"]["message"]
    allowed = await readable([other], second, "charts_chart", quota=quota, person="U2")
    assert allowed["content"][0]["size"] == 4004
