"""MCP_CONFIG (the common ``{"mcpServers": {...}}`` JSON) merged with the agent file's ``[mcp.*]``, and
skills in the Agent Skills layout (``NAME/SKILL.md``) beside flat ``*.md`` files."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from app.agent.agent_file import AgentFile
from app.agent.mcp.config import McpConfigError
from app.agent.mcp.json_config import load_mcp_json
from app.ops.check import run_checks
from app.service import StartupError
from channel.skills import SkillLibrary
from tests.support import events
from tests.support.harness import AppHarness, settings_for
from tests.support.models import Turn, call, scripted
from threadbound_emulator import FakeSlack

PYTHON = sys.executable
TICKETS_SERVER = str(Path(__file__).parent / "support" / "mcp_tickets.py")


def write(path: Path, data: Any) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def desk(**extra: Any) -> dict[str, Any]:
    """The tickets server as a Claude Desktop-style stdio entry."""
    return {
        "command": PYTHON,
        "args": [TICKETS_SERVER],
        "env": {"TICKETS_DB": "${TICKETS_DB:-memory}"},
        **extra,
    }


def test_stdio_and_http_entries_become_server_configs(tmp_path: Path) -> None:
    """command/args/env make a stdio server, url/headers an HTTP one; names are lower-cased with - as _,
    our own keys (eager, exclude, timeout) apply, and disabled entries are left out."""
    path = write(
        tmp_path / "mcp.json",
        {
            "mcpServers": {
                "Ticket-Desk": desk(eager=["get_ticket"], exclude=["exit_server"], timeout=5),
                "docs": {"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"X-Key": "${K}"}},
                "old": {"command": "old-server", "disabled": True},
            }
        },
    )
    stdio, http = load_mcp_json(path)
    assert (stdio.name, stdio.command, stdio.transport) == ("ticket_desk", (PYTHON, TICKETS_SERVER), "stdio")
    assert stdio.env == (("TICKETS_DB", "${TICKETS_DB:-memory}"),)
    assert (stdio.eager, stdio.exclude, stdio.timeout) == (("get_ticket",), ("exit_server",), 5.0)
    assert stdio.cwd == tmp_path
    assert (http.name, http.url, http.headers, http.transport) == (
        "docs",
        "https://mcp.example.com/mcp",
        (("X-Key", "${K}"),),
        "http",
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", r"is not valid JSON: .*line 1"),
        ({"servers": {}}, r'expected \{"mcpServers"'),
        (
            {"mcpServers": {"s": {"type": "sse", "url": "https://x.example/sse"}}},
            r"SSE servers are not supported",
        ),
        ({"mcpServers": {"s": {"command": "x", "url": "https://x.example"}}}, r"unknown keys \['url'\]"),
        ({"mcpServers": {"s": {"command": ["x"]}}}, r'"command" must be a string'),
        ({"mcpServers": {"s": {"url": "ftp://x"}}}, r'MCP_CONFIG .* "s": url must be an http'),
        ({"mcpServers": {"a-b": {"command": "x"}, "a_b": {"command": "y"}}}, r"same name 'a_b'"),
    ],
)
def test_a_bad_file_is_one_line_naming_it(tmp_path: Path, content: Any, message: str) -> None:
    """Invalid JSON, a wrong top level, SSE, stray keys and bad values are refused, file and server named."""
    path = write(tmp_path / "mcp.json", content)
    with pytest.raises(McpConfigError, match=message):
        load_mcp_json(path)


def test_a_missing_variable_names_the_json_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """${VAR} that is not set, in a JSON server's env, is named with the server as the file writes it."""
    monkeypatch.delenv("THREADBOUND_UNSET_FOR_TEST", raising=False)
    entry = desk(env={"TOKEN": "${THREADBOUND_UNSET_FOR_TEST}"})
    [server] = load_mcp_json(write(tmp_path / "mcp.json", {"mcpServers": {"Ticket-Desk": entry}}))
    with pytest.raises(
        McpConfigError, match=r'^MCP_CONFIG "Ticket-Desk" env.TOKEN uses \$\{THREADBOUND_UNSET'
    ):
        server.resolve({})


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    """MCP_CONFIG naming no file stops start-up with what to do."""
    with pytest.raises(McpConfigError, match=r"does not exist: create it or unset MCP_CONFIG"):
        load_mcp_json(tmp_path / "nope.json")


def test_servers_are_merged_and_a_name_in_both_is_refused(tmp_path: Path) -> None:
    """The agent file's servers come first, then the JSON's; the same name in both is an error naming both."""
    agent = write(tmp_path / "agent.toml", f'[mcp.tickets]\ncommand = ["{PYTHON}", "server.py"]\n')
    other = write(tmp_path / "mcp.json", {"mcpServers": {"desk": desk()}})
    merged = AgentFile.load(agent, other)
    assert [s.name for s in merged.mcp] == ["tickets", "desk"]
    clash = write(tmp_path / "clash.json", {"mcpServers": {"tickets": desk()}})
    with pytest.raises(ValueError, match=r"'tickets' is defined in both the agent file .* and MCP_CONFIG"):
        AgentFile.load(agent, clash)


async def test_a_name_in_both_stops_start_up(tmp_path: Path) -> None:
    """serve does not start when a server is named in both places (neither silently wins)."""
    agent = write(tmp_path / "agent.toml", f'[mcp.tickets]\ncommand = ["{PYTHON}", "server.py"]\n')
    clash = write(tmp_path / "mcp.json", {"mcpServers": {"tickets": desk()}})
    async with FakeSlack() as slack:
        harness = AppHarness(
            slack, model=scripted(lambda t: [""]), data_dir=tmp_path, agent_file=agent, mcp_config=clash
        )
        with pytest.raises(StartupError, match=r"defined in both"):
            await harness.start()
        await harness.stop()


@pytest.mark.process
async def test_a_json_server_is_called_and_gated_like_an_agent_file_one(tmp_path: Path) -> None:
    """A server from MCP_CONFIG offers its eager tool, and the agent file's approval globs gate it: the call
    waits for a card instead of running."""
    agent = write(tmp_path / "agent.toml", 'approval = ["ticket_desk_get_*"]\n')
    config = write(
        tmp_path / "mcp.json", {"mcpServers": {"ticket-desk": desk(eager=["get_ticket"], timeout=5)}}
    )
    offered: list[list[str]] = []
    ran: list[Any] = []

    def script(turn: Turn) -> list[Any]:
        offered.append(turn.tools)
        ran.extend(r for r in turn.results if r[0] == "ticket_desk_get_ticket")
        return [call("ticket_desk_get_ticket", ticket_id=1)] if turn.step == 0 else [""]

    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        async with AppHarness(
            slack, model=scripted(script), data_dir=tmp_path / "d", agent_file=agent, mcp_config=config
        ) as app:
            ts = slack.add_message("C1", "<@UBOT> read ticket 1", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> read ticket 1", ts))
            await app.idle()
        cards = [m for m in slack.bot_messages("C1") if any(b.get("type") == "actions" for b in m["blocks"])]
    assert "ticket_desk_get_ticket" in offered[0]
    assert len(cards) == 1 and "ticket_desk_get_ticket" in json.dumps(cards[0]["blocks"])
    assert ran == []


@pytest.mark.process
async def test_check_starts_json_servers_without_an_agent_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`check` reports each MCP_CONFIG server on its own line even when there is no agent file."""
    monkeypatch.chdir(tmp_path)
    config = write(tmp_path / "mcp.json", {"mcpServers": {"desk": desk()}})
    async with FakeSlack() as slack:
        settings = settings_for(slack, tmp_path / "data", mcp_config=config)
        out = io.StringIO()
        await run_checks(settings, model=False, out=out)
    [line] = [line for line in out.getvalue().splitlines() if "  mcp desk  " in line]
    assert line.startswith("PASS") and "over stdio" in line


# -- skills ------------------------------------------------------------------------------------------


def test_agent_skills_layout_and_flat_files_load_together(tmp_path: Path) -> None:
    """SKILLS_DIR/NAME/SKILL.md is a skill named by its front matter's name (else the folder), with its
    description (a folded block included) as the summary; flat *.md files keep working beside it."""
    (tmp_path / "pdf-forms").mkdir()
    write(
        tmp_path / "pdf-forms" / "SKILL.md",
        "---\nname: pdf-forms\ndescription: >\n  Fill in PDF forms\n  field by field.\nlicense: MIT\n"
        "---\n\n# PDF\nSteps.\n",
    )
    (tmp_path / "release").mkdir()
    write(tmp_path / "release" / "SKILL.md", "---\ndescription: Cut a release\n---\nDo it.\n")
    write(tmp_path / "triage.md", "# Triage incoming bugs\nRead the thread first.\n")
    (tmp_path / "empty-folder").mkdir()
    library = SkillLibrary.load(tmp_path)
    assert library.index() == {
        "skills": [
            {"name": "pdf-forms", "summary": "Fill in PDF forms field by field."},
            {"name": "release", "summary": "Cut a release"},
            {"name": "triage", "summary": "Triage incoming bugs"},
        ]
    }
    skill = library.get("pdf-forms")
    assert skill is not None and "Steps." in skill.body
