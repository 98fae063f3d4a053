"""End-to-end file tools: channel_fetch_file, channel_attach and channel_post_document through a
ChannelSession and the Slack adapter, against the fake Slack over real HTTP."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.runs.file_expiry import FileExpiry
from channel.contract import FileMeta
from channel.errors import ChannelError
from channel.slack import downloads as slack_files
from channel.slack.downloads import MAX_BYTES, download, safe_name
from tests.support.memory import PeakRss
from tests.support.sessions import SessionEnv, slack_session
from threadbound_emulator import FakeSlack

DEFERRED = ["channel_fetch_file", "channel_attach", "channel_post_document"]


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[SessionEnv]:
    async with FakeSlack() as slack:
        slack.add_user("U1", "alice", display_name="Alice")
        slack.add_channel("C1", "general")
        root = slack.add_message("C1", "<@UBOT> look at these", "U1")
        async with slack_session(slack, tmp_path, channel="C1", thread_ts=root, enabled=DEFERRED) as env:
            yield env


@pytest.fixture
def outside(env: SessionEnv) -> Path:
    """A file next to the task's directory, not in it."""
    path = env.task_dir.parent / "secret.txt"
    path.write_bytes(b"not yours")
    return path


async def file_handles(env: SessionEnv, *files: dict[str, Any]) -> list[str]:
    """Post a message carrying ``files`` in the thread and return their handles from channel_read."""
    env.slack.add_message("C1", "attached", "U1", thread_ts=env.root, files=list(files))
    result = await env.session.call("channel_read", {})
    return [f["file"] for f in result["messages"][-1]["files"]]


async def posted_file(
    env: SessionEnv, name: str, media_type: str, content: bytes | None, **options: Any
) -> str:
    """Add file F1 (with ``options`` of ``FakeSlack.add_file``) to a message in the thread and return
    its handle."""
    env.slack.add_file("F1", name, media_type, content, **options)
    [handle] = await file_handles(env, env.slack.file_object("F1"))
    return handle


def on_disk(task_dir: Path) -> list[str]:
    """Every entry under the task's files directory, temporary ones included."""
    files_dir = task_dir / "files"
    return sorted(p.name for p in files_dir.iterdir()) if files_dir.exists() else []


def partial_written(task_dir: Path) -> bool:
    """Some bytes of a download are in a temporary file."""
    return any(p.stat().st_size > 0 for p in (task_dir / "files").glob(".part-*"))


def error_code(result: dict[str, Any]) -> str | None:
    return result.get("error", {}).get("code")


# -- channel_fetch_file ------------------------------------------------------------------------------


async def test_fetch_good_file(env: SessionEnv) -> None:
    """A handle downloads the file into the task dir with the bearer token, its size and its sha256."""
    content = bytes(range(256)) * 1000  # several 64 KiB chunks
    handle = await posted_file(env, "report.pdf", "application/pdf", content)
    result = await env.session.call("channel_fetch_file", {"file": handle})
    assert result == {
        "path": "files/report.pdf",
        "media_type": "application/pdf",
        "size": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
    }
    assert (env.task_dir / result["path"]).read_bytes() == content
    [request] = env.slack.file_requests
    assert request.authorized and request.variant == "download"


async def test_a_second_fetch_of_the_same_file_reuses_the_copy(env: SessionEnv) -> None:
    """Fetching a file again returns the copy already in the task directory: no download, no new copy."""
    handle = await posted_file(env, "report.pdf", "application/pdf", b"%PDF-1.7 once")
    first = await env.session.call("channel_fetch_file", {"file": handle})
    again = await env.session.call("channel_fetch_file", {"file": handle})
    assert again == first and len(env.slack.file_requests) == 1
    assert on_disk(env.task_dir) == ["report.pdf"]


async def test_a_fetch_past_the_task_quota_is_refused(env: SessionEnv) -> None:
    """With TASK_FILES_MAX_BYTES nearly used, a fetch that would pass it is refused (file_refused) before
    any request, and nothing is written."""
    env.session.files.max_bytes = 1000
    env.slack.add_file("F0ONE00001", "a.bin", "application/octet-stream", b"a" * 600)
    env.slack.add_file("F0TWO00002", "b.bin", "application/octet-stream", b"b" * 600)
    first, second = await file_handles(
        env, env.slack.file_object("F0ONE00001"), env.slack.file_object("F0TWO00002")
    )
    assert (await env.session.call("channel_fetch_file", {"file": first}))["size"] == 600
    refused = await env.session.call("channel_fetch_file", {"file": second})
    assert error_code(refused) == "file_refused" and "quota" in refused["error"]["message"]
    assert len(env.slack.file_requests) == 1 and not (env.task_dir / "files" / "b.bin").exists()


async def test_files_of_a_task_unused_for_the_ttl_are_removed_and_fetched_again(env: SessionEnv) -> None:
    """FILES_TTL_DAYS after its last use a task's files are removed; its handles stay, and a later fetch
    downloads the file again."""
    handle = await posted_file(env, "notes.txt", "text/plain", b"kept in storage")
    await env.session.call("channel_fetch_file", {"file": handle})
    other = env.tasks_dir / "recent"
    other.mkdir()
    expiry = FileExpiry(env.tasks_dir, ttl_days=7, clock=lambda: time.time() + 8 * 86_400)
    os.utime(other, (time.time() + 7.5 * 86_400,) * 2)  # used half a day before the sweep
    assert await expiry.sweep() == 1
    assert not env.task_dir.exists() and other.exists()
    session = env.new_session()
    again = await session.call("channel_fetch_file", {"file": handle})
    assert (env.task_dir / again["path"]).read_bytes() == b"kept in storage"
    assert len(env.slack.file_requests) == 2


async def test_fetch_html_signin_page_refused(env: SessionEnv) -> None:
    """Slack's HTML sign-in page in place of a PDF is refused and nothing stays on disk."""
    handle = await posted_file(env, "report.pdf", "application/pdf", b"%PDF-1.7 ...", mode="html_signin")
    result = await env.session.call("channel_fetch_file", {"file": handle})
    assert error_code(result) == "file_refused" and "sign-in" in result["error"]["message"]
    assert env.slack.file_requests[0].served == "signin"
    assert on_disk(env.task_dir) == []


async def test_fetch_redirect_refused_not_followed(env: SessionEnv) -> None:
    """A redirect is refused and its target (where the token would have gone) is never requested."""
    handle = await posted_file(env, "report.pdf", "application/pdf", b"data", mode="redirect")
    result = await env.session.call("channel_fetch_file", {"file": handle})
    assert error_code(result) == "file_refused" and "redirect" in result["error"]["message"]
    assert [r.served for r in env.slack.file_requests] == ["redirect"]
    assert on_disk(env.task_dir) == []


async def test_fetch_declared_too_large_refused_before_request(env: SessionEnv) -> None:
    """A file declared over 100 MiB is refused without any request to the file host."""
    handle = await posted_file(env, "huge.bin", "application/octet-stream", b"small", mode="huge")
    result = await env.session.call("channel_fetch_file", {"file": handle})
    assert error_code(result) == "file_refused" and "100.0 MiB" in result["error"]["message"]
    assert env.slack.file_requests == []
    assert on_disk(env.task_dir) == []


async def test_fetch_body_longer_than_declared_refused(env: SessionEnv) -> None:
    """A body that runs past the declared size is cut off, refused, and its partial file removed."""
    handle = await posted_file(env, "data.bin", "application/octet-stream", b"x" * 100_000, mode="long")
    result = await env.session.call("channel_fetch_file", {"file": handle})
    assert error_code(result) == "file_refused" and "declared" in result["error"]["message"]
    assert [r.served for r in env.slack.file_requests] == ["long"]
    assert on_disk(env.task_dir) == []


async def test_fetch_foreign_origin_refused(env: SessionEnv) -> None:
    """A file whose URL is not on SLACK_FILE_ORIGINS is refused without any request."""
    handle = await posted_file(env, "report.pdf", "application/pdf", b"data", foreign=True)
    result = await env.session.call("channel_fetch_file", {"file": handle})
    assert error_code(result) == "file_refused" and "SLACK_FILE_ORIGINS" in result["error"]["message"]
    assert env.slack.file_requests == []


async def test_fetch_video_low_uses_mp4_low(env: SessionEnv) -> None:
    """variant video_low downloads the mp4_low rendition as video/mp4; without one it is unsupported."""
    low = b"\x00\x00\x00\x18ftypmp42" + b"l" * 5000
    env.slack.add_file("F1", "clip.mov", "video/quicktime", b"o" * 50_000, mp4_low=low)
    env.slack.add_file("F2", "plain.mov", "video/quicktime", b"o" * 50_000)
    clip, plain = await file_handles(env, env.slack.file_object("F1"), env.slack.file_object("F2"))
    result = await env.session.call("channel_fetch_file", {"file": clip, "variant": "video_low"})
    assert result["media_type"] == "video/mp4" and result["path"] == "files/clip-low.mp4"
    assert result["sha256"] == hashlib.sha256(low).hexdigest() and result["size"] == len(low)
    assert [r.variant for r in env.slack.file_requests] == ["mp4_low"]
    missing = await env.session.call("channel_fetch_file", {"file": plain, "variant": "video_low"})
    assert error_code(missing) == "unsupported"
    assert len(env.slack.file_requests) == 1


async def test_fetch_raw_file_id_refused(env: SessionEnv) -> None:
    """A raw Slack file id, bare or dressed as a handle, is refused and nothing is fetched."""
    env.slack.add_file("F0000ABCDE", "report.pdf", "application/pdf", b"data")
    await file_handles(env, env.slack.file_object("F0000ABCDE"))
    bare = await env.session.call("channel_fetch_file", {"file": "F0000ABCDE"})
    # The schema's handle pattern rejects it before any lookup, reported as a handle problem.
    assert error_code(bare) == "invalid_handle"
    dressed = await env.session.call("channel_fetch_file", {"file": "file_F0000ABCDE"})
    assert error_code(dressed) == "invalid_handle"
    assert env.slack.file_requests == [] and env.slack.count("files.info") == 0


async def test_fetch_check_file_info_calls_files_info(env: SessionEnv) -> None:
    """A Slack Connect file with only an id is looked up with files.info, then downloaded."""
    content = b"shared from another org"
    env.slack.add_file("F1", "notes.txt", "text/plain", content)
    [handle] = await file_handles(env, {"id": "F1", "file_access": "check_file_info"})
    result = await env.session.call("channel_fetch_file", {"file": handle})
    assert result["sha256"] == hashlib.sha256(content).hexdigest() and result["path"] == "files/notes.txt"
    assert [c.params["file"] for c in env.slack.calls_to("files.info")] == ["F1"]


async def test_file_stubs_are_listed_with_their_real_name_type_and_size(env: SessionEnv) -> None:
    """A Slack Connect stub is resolved with files.info before the model sees it, once per file."""
    env.slack.add_file("F1", "plan.pdf", "application/pdf", b"%PDF-1.7 twelve")
    stub = {"id": "F1", "mode": "file_access", "file_access": "check_file_info", "created": 0, "user": ""}
    env.slack.add_message("C1", "first", "U1", thread_ts=env.root, files=[stub])
    env.slack.add_message("C1", "again", "U1", thread_ts=env.root, files=[stub])
    rows = (await env.session.call("channel_read", {}))["messages"][-2:]
    for row in rows:
        [file] = row["files"]
        assert (file["name"], file["media_type"], file["size"]) == ("plan.pdf", "application/pdf", 15)
    assert rows[0]["files"][0]["file"] == rows[1]["files"][0]["file"]
    await env.adapter.read(env.session.origin)
    assert env.slack.count("files.info") == 1
    result = await env.session.call("channel_fetch_file", {"file": rows[0]["files"][0]["file"]})
    assert result["size"] == 15 and env.slack.count("files.info") == 1


async def test_a_file_the_bot_cannot_see_is_listed_without_a_handle(env: SessionEnv) -> None:
    """A stub files.info refuses, or a deleted file, is named as unavailable: no handle, no 0 bytes."""
    stub = {"id": "F0GONE0001", "file_access": "check_file_info"}
    tombstone = {"id": "F0GONE0002", "mode": "tombstone"}
    env.slack.add_message("C1", "see", "U1", thread_ts=env.root, files=[stub, tombstone])
    [row] = (await env.session.call("channel_read", {}))["messages"][-1:]
    assert row["files"] == [
        {"name": "a file", "unavailable": "Slack does not let the bot see this file"},
        {"name": "a file", "unavailable": "the file was deleted"},
    ]
    # A later run reads the thread afresh: Slack's refusal is remembered, not asked again.
    await env.adapter.read(env.session.origin)
    assert env.slack.count("files.info") == 1


def forward(env: SessionEnv, files: list[dict[str, Any]], *, channel_id: str = "C2") -> None:
    """Post, in the thread, a message whose only files sit in a forwarded-message attachment."""
    ts = env.slack.add_message("C1", "fwd", "U1", thread_ts=env.root)
    message = env.slack.find("C1", ts)
    assert message is not None
    share = {"author_name": "Kim", "channel_id": channel_id, "text": "here", "files": files}
    message["attachments"] = [{"is_share": True, **share}, {"is_msg_unfurl": True, **share}]


@pytest.mark.parametrize("shape", ["stub", "full"])
async def test_a_forwarded_file_from_another_conversation_gets_no_handle(env: SessionEnv, shape: str) -> None:
    """A crafted share naming a file only shared in another channel lists it as unavailable: no handle,
    no download with the bot token."""
    env.slack.add_channel("C2", "finance")
    env.slack.add_file("F0SECRET01", "payroll.csv", "text/csv", b"name,salary")
    env.slack.add_message("C2", "payroll", "U1", files=[env.slack.file_object("F0SECRET01")])
    named = {"id": "F0SECRET01", "file_access": "check_file_info"}
    forward(env, [named if shape == "stub" else env.slack.file_object("F0SECRET01")])
    [row] = (await env.session.call("channel_read", {}))["messages"][-1:]
    assert [set(f) for f in row["files"]] == [{"name", "unavailable"}]
    # Named only as the attachment named it: files.info's answer is not passed on.
    assert row["files"][0]["name"] == ("a file" if shape == "stub" else "payroll.csv")
    assert "another conversation" in row["files"][0]["unavailable"]
    assert env.slack.file_requests == []


async def test_a_forwarded_file_shared_in_this_conversation_gets_a_handle(env: SessionEnv) -> None:
    """A forwarded message whose file files.info shows shared in this channel lists it with a handle."""
    env.slack.add_file("F0HERE0001", "plan.txt", "text/plain", b"the plan")
    env.slack.add_message("C1", "plan", "U1", files=[env.slack.file_object("F0HERE0001")])
    forward(env, [{"id": "F0HERE0001", "file_access": "check_file_info"}], channel_id="C1")
    [row] = (await env.session.call("channel_read", {}))["messages"][-1:]
    [file] = row["files"]
    result = await env.session.call("channel_fetch_file", {"file": file["file"]})
    assert result["size"] == 8 and (env.task_dir / result["path"]).read_bytes() == b"the plan"


async def test_fetch_cancelled_leaves_nothing(env: SessionEnv) -> None:
    """A download cancelled midway removes its partial file."""
    handle = await posted_file(env, "big.bin", "application/octet-stream", None, size=64 * 2**20)
    fetch = asyncio.create_task(env.session.call("channel_fetch_file", {"file": handle}))
    while not partial_written(env.task_dir):
        assert not fetch.done()
        await asyncio.sleep(0.001)
    fetch.cancel()
    with pytest.raises(asyncio.CancelledError):
        await fetch
    assert on_disk(env.task_dir) == []


async def test_fetch_100_mib_streams_with_flat_memory(env: SessionEnv) -> None:
    """A file of exactly 100 MiB is accepted and streamed to disk without buffering it in memory:
    this process's RSS, sampled throughout the fetch, never grows by more than 40 MiB."""
    handle = await posted_file(env, "max.bin", "application/octet-stream", None, size=MAX_BYTES)
    with PeakRss() as memory:
        result = await env.session.call("channel_fetch_file", {"file": handle})
    assert result["size"] == MAX_BYTES and result["sha256"] == env.slack.file_sha256("F1")
    assert memory.growth < 40 * 2**20


async def test_fetch_disk_error_midway_leaves_nothing(
    env: SessionEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write failing in the worker thread after some batches ends the fetch as a disk error, and the
    partial file is removed."""
    handle = await posted_file(env, "big.bin", "application/octet-stream", None, size=16 * 2**20)
    put = slack_files._Sink._put
    batches = 0

    def failing_put(sink: slack_files._Sink, batch: list[bytes]) -> None:
        nonlocal batches
        batches += 1
        if batches == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        put(sink, batch)

    monkeypatch.setattr(slack_files._Sink, "_put", failing_put)
    result = await env.session.call("channel_fetch_file", {"file": handle})
    assert error_code(result) == "tool_failed" and "No space left" in result["error"]["message"]
    assert batches == 2 and on_disk(env.task_dir) == []


async def test_fetch_cancelled_during_write_waits_for_it(
    env: SessionEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelling while a batch is being written lets that write finish before the file is closed
    and removed: nothing is left, whatever the thread was doing."""
    handle = await posted_file(env, "big.bin", "application/octet-stream", None, size=64 * 2**20)
    put = slack_files._Sink._put
    writing, release = threading.Event(), threading.Event()

    def slow_put(sink: slack_files._Sink, batch: list[bytes]) -> None:
        writing.set()
        release.wait(5)
        put(sink, batch)

    monkeypatch.setattr(slack_files._Sink, "_put", slow_put)
    fetch = asyncio.create_task(env.session.call("channel_fetch_file", {"file": handle}))
    while not writing.is_set():
        assert not fetch.done()
        await asyncio.sleep(0.001)
    fetch.cancel()
    done, _ = await asyncio.wait([fetch], timeout=0.05)
    assert not done  # still waiting for the write in flight
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await fetch
    assert on_disk(env.task_dir) == []


async def test_fetch_without_hard_links_still_places(
    env: SessionEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a file system without hard links the file is placed by a rename over a reserved name."""
    content = b"no links here"
    env.slack.add_file("F1", "notes.txt", "text/plain", b"first")
    env.slack.add_file("F2", "notes.txt", "text/plain", content)
    one, two = await file_handles(env, env.slack.file_object("F1"), env.slack.file_object("F2"))

    async def no_link(src: object, dst: object) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(slack_files.aiofiles.os, "link", no_link)
    first = await env.session.call("channel_fetch_file", {"file": one})
    second = await env.session.call("channel_fetch_file", {"file": two})
    assert (first["path"], second["path"]) == ("files/notes.txt", "files/notes-1.txt")
    assert (env.task_dir / second["path"]).read_bytes() == content
    assert on_disk(env.task_dir) == ["notes-1.txt", "notes.txt"]


async def test_fetch_cancelled_while_placing_leaves_nothing(
    env: SessionEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancellation that arrives while the file is being named, after the link was made, still
    leaves nothing: the claim is waited out and given up."""
    handle = await posted_file(env, "notes.txt", "text/plain", b"almost placed")
    link = slack_files.aiofiles.os.link
    linked = asyncio.Event()

    async def slow_link(src: Path, dst: Path) -> None:
        await link(src, dst)
        linked.set()
        await asyncio.sleep(0.05)

    monkeypatch.setattr(slack_files.aiofiles.os, "link", slow_link)
    fetch = asyncio.create_task(env.session.call("channel_fetch_file", {"file": handle}))
    await asyncio.wait_for(linked.wait(), 5)
    assert on_disk(env.task_dir) != []
    fetch.cancel()
    with pytest.raises(asyncio.CancelledError):
        await fetch
    assert on_disk(env.task_dir) == []


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://files.slack.com/files-pri/T1-F1/download/a.pdf", True),
        ("https://files.slack.com:443/files-pri/T1-F1/download/a.pdf", True),
        ("https://FILES.slack.com/x", True),
        ("http://files.slack.com/x", False),
        ("https://files.slack.com.evil.com/x", False),
        ("https://files.slack.com@evil.com/x", False),
        ("https://evil.com/files.slack.com/x", False),
        ("https://files.slack.com:8443/x", False),
        ("//files.slack.com/x", False),
        ("file:///etc/passwd", False),
    ],
)
async def test_origin_must_match_exactly(tmp_path: Path, url: str, allowed: bool) -> None:
    """Only a URL whose whole origin (scheme, host, port) is configured may be fetched with the token."""
    file = FileMeta(
        ref="F1", name="a.pdf", media_type="application/pdf", size=MAX_BYTES + 1, data={"url": url}
    )
    with pytest.raises(ChannelError) as refused:
        await download(file, tmp_path, variant=None, token="xoxb-t", origins=["https://files.slack.com"])
    # An allowed origin gets past the origin check and is then refused for its declared size, unrequested.
    assert refused.value.code == "file_refused"
    assert ("MiB" in refused.value.message) is allowed
    assert "xoxb-t" not in refused.value.message and not (tmp_path / "files").exists()


def test_safe_name() -> None:
    """Local names lose separators, control characters and leading dots, and keep their extension."""
    assert safe_name("../../etc/passwd") == "passwd"
    assert safe_name("..\\evil\x00\n.sh") == "evil.sh"
    assert safe_name(".bashrc") == "bashrc"
    assert safe_name("...") == "file"
    assert safe_name("a" * 300 + ".tar.gz").endswith("a.gz") and len(safe_name("a" * 300 + ".gz")) <= 140


# -- channel_attach --------------------------------------------------------------------------------


async def test_attach_uploads_into_thread(env: SessionEnv) -> None:
    """A task-dir file is uploaded with files_upload_v2 into the origin thread and gets handles."""
    content = b"col1,col2\n1,2\n"
    (env.task_dir / "out.csv").write_bytes(content)
    result = await env.session.call(
        "channel_attach", {"path": "out.csv", "title": "Results", "comment": "Done"}
    )
    assert result["file"].startswith("file_") and result["message"].startswith("msg_")
    [url_call] = env.slack.calls_to("files.getUploadURLExternal")
    assert url_call.params["filename"] == "out.csv" and int(url_call.params["length"]) == len(content)
    [complete] = env.slack.calls_to("files.completeUploadExternal")
    assert complete.params["channel_id"] == "C1" and complete.params["thread_ts"] == env.root
    file_id = complete.response["files"][0]["id"] if complete.response else ""
    assert env.slack.file_bytes_uploaded(file_id) == content
    shared = env.slack.messages("C1", env.root)[-1]
    assert shared["text"] == "Done" and shared["files"][0]["title"] == "Results"


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink"])
async def test_attach_refuses_paths_outside_task_dir(env: SessionEnv, outside: Path, kind: str) -> None:
    """../x, an absolute path outside, and a symlink pointing outside are refused and nothing is uploaded."""
    if kind == "dotdot":
        path = f"../{outside.name}"
    elif kind == "absolute":
        path = str(outside)
    else:
        (env.task_dir / "link.txt").symlink_to(outside)
        path = "link.txt"
    result = await env.session.call("channel_attach", {"path": path})
    assert error_code(result) == "file_refused"
    assert env.slack.count("files.getUploadURLExternal") == 0
    assert env.slack.count("files.completeUploadExternal") == 0


# -- channel_post_document -------------------------------------------------------------------------


async def test_post_document_creates_shares_and_links_canvas(env: SessionEnv) -> None:
    """A canvas is created from Markdown, shared read-only with the channel, and linked in the thread."""
    markdown = "# Plan\n\n- one\n- two\n"
    result = await env.session.call("channel_post_document", {"title": "Plan <v1>", "markdown": markdown})
    [canvas] = env.slack.canvases.values()
    assert canvas.markdown == markdown and canvas.title == "Plan <v1>"
    assert canvas.access == [{"access_level": "read", "channel_ids": ["C1"], "user_ids": []}]
    permalink = env.slack.file_object(canvas.id)["permalink"]
    assert result["document"].startswith("file_") and result["permalink"] == permalink
    assert canvas.id not in result["document"]
    assert [c.params["file"] for c in env.slack.calls_to("files.info")] == [canvas.id]
    link = env.slack.messages("C1", env.root)[-1]
    assert link["text"] == f"📄 <{permalink}|Plan &lt;v1&gt;>" and link["thread_ts"] == env.root


async def test_slack_mass_mentions_in_documents_and_upload_comments_are_neutralised(env: SessionEnv) -> None:
    """The Slack adapter neutralises <!here>, <!channel> and <!subteam^…> in a canvas and an upload
    comment, which the provider-neutral session leaves to it."""
    await env.session.call(
        "channel_post_document", {"title": "Plan", "markdown": "Hi <!here> and <!subteam^S0123ABCD|@devs>"}
    )
    [canvas] = env.slack.canvases.values()
    assert canvas.markdown == "Hi @\u200bhere and @\u200bdevs"
    (env.task_dir / "out.csv").write_bytes(b"a,b\n")
    await env.session.call("channel_attach", {"path": "out.csv", "comment": "For <!channel|channel>"})
    shared = env.slack.messages("C1", env.root)[-1]
    assert shared["text"] == "For @\u200bchannel"
