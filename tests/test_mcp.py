"""MCP servers from the agent file, against real MCP servers (tests/support/mcp_tickets.py): stdio, HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.agent.mcp.config import McpConfigError, McpServerConfig, parse_servers
from app.agent.mcp.servers import McpServer, McpServers, McpTool
from app.agent.mcp.toolset import readable
from channel import tool_search
from channel.selection import select_tools
from channel.skills import SkillLibrary
from channel.tools import CATALOG
from tests.support.harness import free_port

ROOT = Path(__file__).resolve().parent.parent
TICKETS = (sys.executable, str(ROOT / "tests" / "support" / "mcp_tickets.py"))


def tickets(**overrides: object) -> McpServerConfig:
    values: dict[str, object] = {"name": "tickets", "command": TICKETS, "cwd": ROOT, "timeout": 20.0}
    values.update(overrides)
    return McpServerConfig(**values)  # type: ignore[arg-type]


@pytest.fixture
async def stdio_server() -> AsyncIterator[McpServer]:
    server = McpServer(tickets(), {"HOME": "/tmp"})
    await server.start()
    assert server.error is None, server.error
    try:
        yield server
    finally:
        await server.stop()


async def start_http(port: int) -> asyncio.subprocess.Process:
    """The tickets server over Streamable HTTP on 127.0.0.1:``port``, as a separate process."""
    proc = await asyncio.create_subprocess_exec(
        *TICKETS,
        "--http",
        str(port),
        cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    for _ in range(300):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if proc.returncode is not None:
                raise RuntimeError("the HTTP MCP server exited") from None
            await asyncio.sleep(0.1)
            continue
        writer.close()
        await writer.wait_closed()
        return proc
    proc.terminate()
    raise RuntimeError("the HTTP MCP server did not listen")


async def end(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        await proc.wait()


@pytest.fixture
async def http_url() -> AsyncIterator[str]:
    port = free_port()
    proc = await start_http(port)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        await end(proc)


def tool(server: McpServer, name: str):  # type: ignore[no-untyped-def]
    return next(t for t in server.tools if t.remote_name == name)


async def gone(pid: int) -> None:
    """Wait until process ``pid`` has ended (the test's timeout bounds the wait)."""
    import psutil

    try:
        await asyncio.to_thread(psutil.Process(pid).wait)
    except psutil.NoSuchProcess:
        pass


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.process
async def test_stdio_server_tools_are_prefixed_filtered_and_callable(stdio_server: McpServer) -> None:
    """A stdio server's tools are offered as NAME_<tool>, deferred unless eager, and answer calls."""
    names = {t.name for t in stdio_server.tools}
    assert {"tickets_search_tickets", "tickets_get_ticket", "tickets_close_ticket"} <= names
    assert all(t.starts == "deferred" for t in stdio_server.tools)
    found = await stdio_server.call(tool(stdio_server, "search_tickets"), {"query": "login"})
    assert found == [{"id": 1, "title": "Login page times out", "status": "open"}]


@pytest.mark.process
async def test_include_exclude_and_eager_choose_tools() -> None:
    """include/exclude globs decide which tools exist; eager globs decide which start offered."""
    server = McpServer(tickets(include=("*ticket*",), exclude=("close_*",), eager=("search_*",)), {})
    await server.start()
    try:
        starts = {t.remote_name: t.starts for t in server.tools}
        assert starts == {
            "search_tickets": "active",
            "get_ticket": "deferred",
            "ticket_chart": "deferred",
        }
        assert server.listed > len(starts)
    finally:
        await server.stop()


@pytest.mark.process
async def test_http_server_gets_expanded_headers(http_url: str) -> None:
    """A Streamable HTTP server is called with the file's headers, ${VAR} expanded from the environment."""
    config = McpServerConfig(
        name="remote", url=http_url, headers=(("Authorization", "Bearer ${TICKETS_TOKEN}"),), timeout=20.0
    )
    server = McpServer(config, {"TICKETS_TOKEN": "s3cret", "SLACK_BOT_TOKEN": "xoxb-never"})
    await server.start()
    try:
        assert server.error is None, server.error
        assert "remote_search_tickets" in {t.name for t in server.tools}
        headers = await server.call(tool(server, "request_headers"), {})
        assert headers["authorization"] == "Bearer s3cret"
        assert "xoxb-never" not in json.dumps(headers)
        assert await server.call(tool(server, "get_ticket"), {"ticket_id": 2}) == {
            "id": 2,
            "title": "Export to CSV drops the header row",
            "status": "open",
        }
    finally:
        await server.stop()


@pytest.mark.process
async def test_an_http_server_that_restarted_is_reconnected() -> None:
    """A call while the HTTP server is down fails with a reason; once it is back, the next call works."""
    from app.agent.mcp.servers import McpCallFailed

    port = free_port()
    proc = await start_http(port)
    server = McpServer(McpServerConfig(name="remote", url=f"http://127.0.0.1:{port}/mcp", timeout=20.0), {})
    try:
        await server.start()
        first = (await server.call(tool(server, "whoami"), {}))["pid"]
        await end(proc)
        with pytest.raises(McpCallFailed, match="remote_whoami"):
            await server.call(tool(server, "whoami"), {})
        proc = await start_http(port)
        assert (await server.call(tool(server, "whoami"), {}))["pid"] not in (first, None)
    finally:
        await server.stop()
        await end(proc)


@pytest.mark.process
async def test_stdio_environment_is_built_from_scratch() -> None:
    """A stdio server sees only the file's env (expanded) and a safe list, never the Slack token."""
    environ = {
        "SLACK_BOT_TOKEN": "xoxb-secret",
        "OPENAI_API_KEY": "sk-secret",
        "DB_PATH": "/srv/tickets.db",
        "LANG": "C.UTF-8",
    }
    server = McpServer(tickets(env=(("TICKETS_DB", "${DB_PATH}"),)), environ)
    await server.start()
    try:
        seen = await server.call(tool(server, "environment"), {})
    finally:
        await server.stop()
    assert seen["TICKETS_DB"] == "/srv/tickets.db"
    assert "SLACK_BOT_TOKEN" not in seen["names"] and "OPENAI_API_KEY" not in seen["names"]
    assert "LANG" in seen["names"]
    assert set(seen["names"]) <= {
        "TICKETS_DB",
        "LANG",
        "LC_CTYPE",
        "HOME",
        "LOGNAME",
        "PATH",
        "SHELL",
        "TERM",
        "USER",
    }


def test_missing_variable_is_named() -> None:
    """A ${VAR} that is not set is a start-up error naming the variable and where it is used."""
    with pytest.raises(
        McpConfigError, match=r"\[mcp.tickets\] env.TICKETS_DB uses \$\{NOPE\}.*NOPE is not set"
    ):
        McpServer(tickets(env=(("TICKETS_DB", "${NOPE}"),)), {})
    assert McpServer(tickets(env=(("TICKETS_DB", "${NOPE:-fallback}"),)), {})._env == {
        "TICKETS_DB": "fallback"
    }


@pytest.mark.process
async def test_servers_that_do_not_start_are_absent_and_contained() -> None:
    """A missing command or a silent process makes only that server's tools absent, with the reason."""
    servers = McpServers(
        [
            tickets(),
            McpServerConfig(name="missing", command=("no-such-mcp-command",), startup_timeout=10.0),
            McpServerConfig(
                name="silent",
                command=(sys.executable, "-c", "import time; time.sleep(60)"),
                startup_timeout=1.0,
            ),
        ],
        {},
    )
    await servers.start()
    try:
        reasons = servers.unavailable()
        assert set(reasons) == {"missing", "silent"}
        assert "no-such-mcp-command" in reasons["missing"]
        assert "no answer within 1 s" in reasons["silent"]
        assert {t.server for t in servers.tools} == {"tickets"}
        assert servers.lookup("tickets_search_tickets") is not None
    finally:
        await servers.stop()


@pytest.mark.process
async def test_a_hanging_call_fails_at_its_timeout_and_the_server_still_answers() -> None:
    """A call past the server's timeout fails with tool_failed; the next call on the same server works."""
    from app.agent.mcp.toolset import tool_failed

    server = McpServer(tickets(timeout=1.0), {})
    await server.start()
    try:
        pid = (await server.call(tool(server, "whoami"), {}))["pid"]
        from app.agent.mcp.servers import McpCallFailed

        with pytest.raises(McpCallFailed, match="did not answer within 1 s") as caught:
            await server.call(tool(server, "hang"), {})
        assert tool_failed(str(caught.value))["error"]["code"] == "tool_failed"
        assert (await server.call(tool(server, "whoami"), {}))["pid"] == pid
    finally:
        await server.stop()


@pytest.mark.process
async def test_a_stdio_server_that_died_between_calls_is_restarted_on_next_use(
    stdio_server: McpServer,
) -> None:
    """A stdio server killed between calls is restarted by the next call, which then succeeds."""
    first = (await stdio_server.call(tool(stdio_server, "whoami"), {}))["pid"]
    os.kill(first, 9)
    await gone(first)
    second = (await stdio_server.call(tool(stdio_server, "whoami"), {}))["pid"]
    assert second != first and alive(second)


@pytest.mark.process
async def test_a_stdio_server_that_dies_during_a_call_fails_it_and_comes_back(
    stdio_server: McpServer,
) -> None:
    """A server that dies while answering fails that call with a reason; the next call restarts it."""
    from app.agent.mcp.servers import McpCallFailed

    first = (await stdio_server.call(tool(stdio_server, "whoami"), {}))["pid"]
    with pytest.raises(McpCallFailed, match="tickets_exit_server failed"):
        await stdio_server.call(tool(stdio_server, "exit_server"), {})
    second = (await stdio_server.call(tool(stdio_server, "whoami"), {}))["pid"]
    assert second != first


@pytest.mark.process
async def test_a_tool_error_is_a_bounded_failure(stdio_server: McpServer) -> None:
    """An error the tool raises comes back as a short reason naming the tool."""
    from app.agent.mcp.servers import McpCallFailed

    with pytest.raises(McpCallFailed, match=r"tickets_get_ticket failed: .*no ticket #99") as caught:
        await stdio_server.call(tool(stdio_server, "get_ticket"), {"ticket_id": 99})
    assert len(str(caught.value).encode()) <= 512


@pytest.mark.process
async def test_stop_ends_the_stdio_process() -> None:
    """Stopping a stdio server ends its process."""
    server = McpServer(tickets(), {})
    await server.start()
    pid = (await server.call(tool(server, "whoami"), {}))["pid"]
    await server.stop()
    await gone(pid)


@pytest.mark.process
async def test_an_image_result_is_saved_in_the_task_directory(
    stdio_server: McpServer, tmp_path: Path
) -> None:
    """An image an MCP tool returns lands in the task directory and the result names it."""
    value = await stdio_server.call(tool(stdio_server, "ticket_chart"), {})
    result = await readable(value, tmp_path, "tickets_ticket_chart")
    assert result["content"][0] == "Tickets by status"
    saved = result["content"][1]
    assert saved["media_type"] == "image/png" and saved["file"].startswith("files/tickets_ticket_chart-")
    data = (tmp_path / saved["file"]).read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) == saved["size"]
    assert saved["file"] in result["note"] and "channel_attach" in result["note"]


async def test_long_results_are_cut_with_a_note(tmp_path: Path) -> None:
    """A result longer than the bound is cut, and the model is told how long it was."""
    result = await readable("x" * 60_000, tmp_path, "t")
    assert isinstance(result, str) and result.endswith("[cut: the result had 60000 characters]")


def test_parse_servers_reports_bad_tables(tmp_path: Path) -> None:
    """Each malformed [mcp.NAME] table fails with the table and the fix named."""
    source = tmp_path / "agent.toml"
    good = parse_servers(
        {"tickets": {"command": ["python", "t.py"], "env": {"A": "${A}"}, "eager": ["search_*"]}},
        source=source,
    )
    assert good[0].transport == "stdio" and good[0].cwd == tmp_path and good[0].eager == ("search_*",)
    bad = {
        "Tickets": {"command": ["x"]},
        "channel": {"command": ["x"]},
        "both": {"command": ["x"], "url": "http://h/mcp"},
        "neither": {"env": {}},
        "strcmd": {"command": "python t.py"},
        "ftp": {"url": "ftp://h/mcp"},
        "typo": {"command": ["x"], "eagre": ["a"]},
        "hdr": {"command": ["x"], "headers": {"A": "b"}},
        "slow": {"command": ["x"], "timeout": 0},
    }
    for name, table in bad.items():
        with pytest.raises(McpConfigError, match=rf"\[mcp.{name}\]"):
            parse_servers({name: table}, source=source)


def _mcp_tool(remote: str, description: str, starts: str = "deferred") -> McpTool:
    return McpTool(
        name=f"tickets_{remote}",
        server="tickets",
        remote_name=remote,
        description=description,
        schema={
            "type": "object",
            "properties": {"ticket_id": {"type": "integer", "description": "Ticket number"}},
        },
        starts=starts,
    )


HOST = (
    _mcp_tool("search_tickets", "Search the ticket tracker by words in a ticket's title."),
    _mcp_tool("close_ticket", "Close a ticket by its number."),
    _mcp_tool("get_ticket", "Read one ticket by its number.", "active"),
)


def test_tool_search_ranks_mcp_and_channel_tools_together() -> None:
    """One ranking serves both families: each query finds its own tool first, whichever family it is in."""
    deferred = [*[s for s in CATALOG.values() if s.starts == "deferred"], *HOST]
    assert tool_search.rank(deferred, "close a ticket", 3)[0].name == "tickets_close_ticket"
    assert tool_search.rank(deferred, "search_tickets", 3)[0].name == "tickets_search_tickets"
    assert tool_search.rank(deferred, "edit my message", 3)[0].name == "channel_edit"
    assert tool_search.rank(deferred, "teleport", 3) == []


def test_select_tools_narrows_mcp_tools_with_globs(caplog: pytest.LogCaptureFixture) -> None:
    """`tools` globs narrow MCP tools like channel tools; a tool of a server that is down only warns."""
    features = frozenset({"read", "react", "edit", "retract", "fetch_file", "attach", "documents"})
    chosen = select_tools(
        features, ["channel_re*", "tickets_*_ticket", "other_x"], SkillLibrary([]), HOST, {"other": "down"}
    )
    assert [s.name for s in chosen.channel_tools] == [
        "channel_reply",
        "channel_read",
        "channel_react",
        "channel_retract",
    ]
    assert [t.name for t in chosen.host_tools] == ["tickets_close_ticket", "tickets_get_ticket"]
    assert "tool_search" in chosen.names() and "mcp_search" in chosen.names()
    assert "MCP server other is unavailable" in caplog.text
    with pytest.raises(ValueError, match=r"unknown tool 'tickets_x'; known tools: .*tickets_search_tickets"):
        select_tools(features, ["tickets_x"], SkillLibrary([]), HOST)
    everything = select_tools(features, None, SkillLibrary([]), HOST)
    assert everything.host_tools == HOST
