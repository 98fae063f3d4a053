"""MCP tools through the whole app: agent file → start-up → tool_search → a real server → the model."""

from __future__ import annotations

import asyncio
import io
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from app.ops.check import run_checks
from app.service import StartupError
from tests.support import events
from tests.support.harness import AppHarness, settings_for
from tests.support.models import Turn, call, scripted
from threadbound_emulator import FakeSlack

PYTHON = sys.executable.replace("\\", "/")
TICKETS_SERVER = (Path(__file__).parent / "support" / "mcp_tickets.py").as_posix()


def agent_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(body, encoding="utf-8")
    return path


TICKETS = f"""
[mcp.tickets]
command = ["{PYTHON}", "{TICKETS_SERVER}"]
env = {{ TICKETS_DB = "${{TICKETS_DB:-memory}}" }}
eager = ["get_ticket"]
exclude = ["exit_server"]
timeout = 2
"""


async def converse(tmp_path: Path, agent: Path, script: Any) -> FakeSlack:
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        async with AppHarness(
            slack, model=scripted(script), data_dir=tmp_path / "data", agent_file=agent
        ) as app:
            ts = slack.add_message("C1", "<@UBOT> any login tickets?", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> any login tickets?", ts))
            await app.idle()
        return slack


@pytest.mark.process
async def test_the_model_finds_an_mcp_tool_with_tool_search_and_reads_its_result(tmp_path: Path) -> None:
    """tool_search finds tickets_search_tickets; the call reaches the real server and its result the model."""
    offered: list[list[str]] = []
    seen: list[tuple[str, Any]] = []

    def script(turn: Turn) -> list[Any]:
        offered.append(turn.tools)
        seen.extend(turn.results)
        if turn.step == 0:
            return [call("tool_search", query="search tickets", limit=1)]
        if turn.step == 1:
            return [call("tickets_search_tickets", query="login")]
        if turn.step == 2:
            [(_, tickets)] = turn.results
            return [call("channel_reply", text="Found: " + ", ".join(t["title"] for t in tickets))]
        return [""]

    slack = await converse(tmp_path, agent_file(tmp_path, TICKETS), script)
    assert [m["text"] for m in slack.bot_messages("C1")] == ["Found: Login page times out"]
    first = offered[0]
    assert "tickets_get_ticket" in first  # eager
    assert "tickets_search_tickets" not in first and "tickets_exit_server" not in first
    assert "tool_search" in first and "mcp_search" in first
    assert "tickets_search_tickets" in offered[1]
    [(_, found)] = [r for r in seen if r[0] == "tool_search"]
    assert [e["name"] for e in found["enabled"]] == ["tickets_search_tickets"]


@pytest.mark.process
async def test_a_failing_or_hanging_mcp_call_reaches_the_model_as_tool_failed(tmp_path: Path) -> None:
    """A tool error and a call past its timeout both come back as tool_failed results; the run goes on."""
    results: list[tuple[str, Any]] = []

    def script(turn: Turn) -> list[Any]:
        results.extend(turn.results)
        if turn.step == 0:
            return [call("tickets_get_ticket", ticket_id=99)]
        if turn.step == 1:
            return [call("mcp_search", query="hang", limit=1)]
        if turn.step == 2:
            return [call("tickets_hang")]
        if turn.step == 3:
            return [call("channel_reply", text="done")]
        return [""]

    slack = await converse(tmp_path, agent_file(tmp_path, TICKETS), script)
    assert [m["text"] for m in slack.bot_messages("C1")] == ["done"]
    by_tool = dict(results)
    assert by_tool["tickets_get_ticket"]["error"]["code"] == "tool_failed"
    assert "no ticket #99" in by_tool["tickets_get_ticket"]["error"]["message"]
    assert by_tool["mcp_search"]["enabled"][0]["name"] == "tickets_hang"
    assert by_tool["tickets_hang"]["error"] == {
        "code": "tool_failed",
        "message": "tickets_hang did not answer within 2 s",
    }


@pytest.mark.process
async def test_an_image_from_an_mcp_tool_can_be_attached_in_the_thread(tmp_path: Path) -> None:
    """An MCP image result is saved in the task directory and channel_attach posts it."""
    body = TICKETS.replace('eager = ["get_ticket"]', 'eager = ["ticket_chart"]')
    results: list[tuple[str, Any]] = []

    def script(turn: Turn) -> list[Any]:
        results.extend(turn.results)
        if turn.step == 0:
            return [call("tickets_ticket_chart"), call("tool_search", query="attach a file", limit=1)]
        if turn.step == 1:
            chart = dict(turn.results)["tickets_ticket_chart"]
            return [call("channel_attach", path=chart["content"][1]["file"], title="Tickets")]
        return [""]

    slack = await converse(tmp_path, agent_file(tmp_path, body), script)
    attached = dict(results)["channel_attach"]
    assert "error" not in attached, attached
    assert slack.count("files.completeUploadExternal") == 1


@pytest.mark.process
async def test_a_server_that_does_not_start_leaves_the_app_serving(tmp_path: Path) -> None:
    """A server that cannot start makes its tools absent; the app starts and answers with the others."""
    body = TICKETS + '\n[mcp.broken]\ncommand = ["no-such-mcp-command"]\n'
    body = 'tools = ["channel_reply", "tickets_get_ticket", "broken_*"]\n' + body
    offered: list[list[str]] = []

    def script(turn: Turn) -> list[Any]:
        offered.append(turn.tools)
        return [call("channel_reply", text="still here")] if turn.step == 0 else [""]

    slack = await converse(tmp_path, agent_file(tmp_path, body), script)
    assert [m["text"] for m in slack.bot_messages("C1")] == ["still here"]
    assert not any(t.startswith("broken_") for t in offered[0])
    assert offered[0] == ["channel_reply", "tickets_get_ticket"]


@pytest.mark.process
async def test_tools_naming_a_missing_tool_fails_start_up_listing_mcp_tools(tmp_path: Path) -> None:
    """A tools entry that selects nothing stops start-up, and the error lists the MCP tools too."""
    body = 'tools = ["channel_reply", "tickets_serch_tickets"]\n' + TICKETS
    async with FakeSlack() as slack:
        harness = AppHarness(
            slack, model=scripted(lambda t: [""]), data_dir=tmp_path, agent_file=agent_file(tmp_path, body)
        )
        with pytest.raises(StartupError, match=r"'tickets_serch_tickets'.*tickets_search_tickets"):
            await harness.start()
        await harness.stop()


async def test_a_missing_variable_stops_start_up_naming_it(tmp_path: Path) -> None:
    """${VAR} in an MCP server's env that is not set stops start-up with the variable named."""
    body = TICKETS.replace("${TICKETS_DB:-memory}", "${THREADBOUND_TEST_UNSET_VAR}")
    async with FakeSlack() as slack:
        harness = AppHarness(
            slack, model=scripted(lambda t: [""]), data_dir=tmp_path, agent_file=agent_file(tmp_path, body)
        )
        with pytest.raises(
            StartupError, match=r"\[mcp.tickets\] env.TICKETS_DB .*THREADBOUND_TEST_UNSET_VAR is not set"
        ):
            await harness.start()


@pytest.mark.process
async def test_check_shows_one_line_per_mcp_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`check` starts each MCP server: ok with its tool count, or the reason; `tools` may name MCP tools."""
    monkeypatch.chdir(tmp_path)
    body = 'tools = ["channel_reply", "tickets_*", "broken_thing", "tickets_nope"]\n'
    body += TICKETS + '\n[mcp.broken]\ncommand = ["no-such-mcp-command"]\n'
    async with FakeSlack() as slack:
        settings = settings_for(slack, tmp_path / "data", agent_file=agent_file(tmp_path, body))
        out = io.StringIO()
        code = await run_checks(settings, model=False, out=out)
    lines = out.getvalue().splitlines()
    [tickets] = [line for line in lines if "  mcp tickets  " in line]
    assert tickets.startswith("PASS") and "ok, 10 tools (1 eager, 11 listed by the server)" in tickets
    # What the server says of its tools (MCP annotations): how many only read, which may destroy.
    assert (
        "destructive: tickets_close_ticket" in tickets and " read-only" in tickets and "over stdio" in tickets
    )
    [broken] = [line for line in lines if "  mcp broken  " in line]
    assert broken.startswith("WARN") and "no-such-mcp-command" in broken
    failed = [line for line in lines if line.startswith("FAIL")]
    assert code == 1 and len(failed) == 1, lines
    assert "'tickets_nope'" in failed[0] and "tickets_search_tickets" in failed[0]


@pytest.mark.process
async def test_stdio_servers_start_with_the_app_and_stop_with_it(tmp_path: Path) -> None:
    """The app starts each stdio server before it serves and ends its process when it shuts down."""
    async with FakeSlack() as slack:
        harness = AppHarness(
            slack, model=scripted(lambda t: [""]), data_dir=tmp_path, agent_file=agent_file(tmp_path, TICKETS)
        )
        await harness.start()
        try:
            assert harness.service is not None
            [server] = harness.service.mcp.servers
            found = harness.service.mcp.lookup("tickets_whoami")
            assert found is not None
            pid = (await server.call(found[1], {}))["pid"]
        finally:
            await harness.stop()
    try:
        await asyncio.to_thread(psutil.Process(pid).wait)  # the test's timeout bounds the wait
    except psutil.NoSuchProcess:
        pass
