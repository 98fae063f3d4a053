"""Header values no client should send — non-ASCII, not even UTF-8 — get a 4xx, never a 500 with a
traceback: ``Authorization`` on ``/metrics`` and the playground's token header, over real HTTP."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.playground import Playground
from app.playground.guard import TOKEN_HEADER
from app.settings import Settings
from tests.support.fake_model import FakeOpenAI
from tests.support.harness import AppHarness
from tests.support.models import echo_model
from tests.support.process import ServerProcess, server_env
from threadbound_emulator import FakeSlack

#: ``Bearer`` and a value in UTF-8 (non-ASCII), in Latin-1 (not UTF-8), bytes that are no text at all,
#: and the right token with one non-ASCII letter.
JUNK = [b"Bearer \xc3\xa9t\xc3\xa9", b"Bearer \xe9t\xe9", b"\xff\xfe\xfd", b"Bearer m-secr\xc3\xa9t"]


async def raw_get(port: int, path: str, header: bytes, value: bytes) -> tuple[int, bytes]:
    """GET ``path`` with ``header: value`` exactly as the bytes say; the status and the body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            b"GET "
            + path.encode()
            + b" HTTP/1.1\r\nHost: 127.0.0.1:"
            + str(port).encode()
            + b"\r\n"
            + header
            + b": "
            + value
            + b"\r\nConnection: close\r\n\r\n"
        )
        await writer.drain()
        async with asyncio.timeout(10):
            answer = await reader.read()
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


@pytest.mark.parametrize("value", JUNK)
@pytest.mark.parametrize("edge_thread", [False, True])
async def test_a_junk_authorization_header_on_metrics_gets_401(
    tmp_path: Path, value: bytes, edge_thread: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """/metrics with METRICS_TOKEN set answers 401 to an Authorization value that is not ASCII
    (or not UTF-8), logs no error, and still answers 200 to the right token."""
    async with FakeSlack() as slack:
        async with AppHarness(
            slack, model=echo_model(), data_dir=tmp_path, metrics_token="m-secret", edge_thread=edge_thread
        ) as app:
            with caplog.at_level(logging.ERROR):
                status, body = await raw_get(app.port, "/metrics", b"Authorization", value)
            assert status == 401, body
            assert b"Traceback" not in body
            assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
            ok, _ = await raw_get(app.port, "/metrics", b"Authorization", b"Bearer m-secret")
            assert ok == 200


@pytest.fixture
async def pg(tmp_path: Path) -> AsyncIterator[Playground]:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, data_dir=tmp_path, agent_file=None, skills_dir=None, sweep_interval=3600.0
    )
    async with Playground(settings, model=echo_model()) as playground:
        yield playground


@pytest.mark.parametrize("value", JUNK)
async def test_a_junk_playground_token_header_gets_403(
    pg: Playground, value: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """A playground API request whose token header is not ASCII (or not UTF-8) is refused with
    403, like a wrong token, not answered 500."""
    port = int(pg.url.rstrip("/").rsplit(":", 1)[1])
    with caplog.at_level(logging.ERROR):
        status, body = await raw_get(port, "/api/state", TOKEN_HEADER.encode(), value)
    assert status == 403, body
    assert b"Traceback" not in body
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.process
async def test_junk_authorization_through_serves_edge_process_gets_4xx(tmp_path: Path) -> None:
    """Under ``serve`` the edge's process hands /metrics to the service, junk Authorization bytes
    and all: each gets the service's 401, and both processes keep serving (the right token works,
    the log holds no traceback, the server stops cleanly)."""
    async with FakeSlack() as slack, FakeOpenAI() as llm:
        env = server_env(slack, llm, DATA_DIR=str(tmp_path / "data"), METRICS_TOKEN="m-secret")
        async with ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "serve.log") as server:
            for value in JUNK:
                status, body = await raw_get(server.port, "/metrics", b"Authorization", value)
                assert status == 401, (value, body)
                assert b"Traceback" not in body
            ok, _ = await raw_get(server.port, "/metrics", b"Authorization", b"Bearer m-secret")
            assert ok == 200
        assert server.proc is not None and server.proc.returncode == 0, server.tail()
        assert "Traceback" not in (tmp_path / "serve.log").read_text(encoding="utf-8", errors="replace")
