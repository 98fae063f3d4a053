"""The first hour, second pass: the example agent file on the base install, MCP servers that are down
said as such, agent-file lines, every wrong setting named at once, and `check` in an empty folder."""

from __future__ import annotations

import ast
import io
import logging
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from app.__main__ import main
from app.agent.agent_file import AgentFile
from app.agent.approval_gate import warn_unmatched_approval
from app.agent.mcp.servers import McpServers
from app.ops.check import run_checks
from app.settings import Settings
from channel.tools import CATALOG

ROOT = Path(__file__).resolve().parents[1]


def test_the_example_mcp_server_needs_only_the_base_install() -> None:
    """examples/mcp_tickets.py imports the standard library and the MCP SDK only (which
    pydantic-ai-slim[mcp] brings with `pip install -e .`), never fastmcp or the test helpers."""
    source = ROOT / AgentFile.load(ROOT / "agent.example.toml").mcp[0].command[-1]
    modules = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module.split(".")[0])
    assert modules - set(sys.stdlib_module_names) == {"mcp"}, modules


@pytest.mark.process
async def test_the_example_agent_file_starts_its_mcp_server_and_every_entry_matches(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`cp agent.example.toml agent.toml` works: its server starts and offers tickets_* tools, and
    every tools and approval entry names a tool that is there (no "check its spelling")."""
    monkeypatch.setenv("TICKETS_DB", str(tmp_path / "tickets.json"))
    agent = AgentFile.load(ROOT / "agent.example.toml")
    servers = McpServers(agent.mcp)
    await servers.start()
    try:
        assert servers.unavailable() == {}
        names = {t.name for t in servers.tools}
    finally:
        await servers.stop()
    assert {"tickets_get_ticket", "tickets_search_tickets", "tickets_close_ticket"} <= names
    for entry in (*(agent.tools or ()), *agent.approval):
        assert entry in CATALOG or any(Path(n).match(entry) for n in names), entry


@pytest.mark.process
async def test_a_server_that_exits_at_once_is_unavailable_with_its_last_stderr_lines(tmp_path: Path) -> None:
    """A stdio server that dies before answering is reported unavailable with what it printed to
    stderr (a missing module, say), not only "Connection closed"."""
    script = tmp_path / "broken.py"
    script.write_text(
        "import sys\nprint('loading the tracker', file=sys.stderr)\n"
        "print(\"ModuleNotFoundError: No module named 'trackerlib'\", file=sys.stderr)\nsys.exit(1)\n"
    )
    (tmp_path / "agent.toml").write_text(f'[mcp.tickets]\ncommand = ["python", "{script}"]\n')
    servers = McpServers(AgentFile.load(tmp_path / "agent.toml").mcp)
    await servers.start()
    await servers.stop()
    why = servers.unavailable()["tickets"]
    assert (
        "its stderr ended with: loading the tracker | ModuleNotFoundError: No module named 'trackerlib'"
        in why
    )


def test_an_approval_entry_of_a_server_that_is_down_is_not_called_a_typo(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With its MCP server unavailable, `tickets_close_ticket` in `approval` is said to belong to an
    unavailable server; a real typo is still called one."""
    tools = SimpleNamespace(channel_tools=[CATALOG["channel_reply"]], host_tools=[])
    with caplog.at_level(logging.WARNING, logger="app.agent.approval_gate"):
        warn_unmatched_approval(["tickets_close_ticket", "chanel_retract"], tools, {"tickets": "down"})
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "approval entry 'tickets_close_ticket' is for MCP server tickets, which is unavailable (above)",
        "approval entry 'chanel_retract' matches no tool offered now; check its spelling",
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('model = "x:y"\n\ntools = "channel_reply"\n', "agent.toml, line 3: tools must be a list"),
        ('model = "x:y"\nmodle = "x"\n', "agent.toml, line 2: unknown keys ['modle']"),
        ("\n\nmax_requests_per_run = 0\n", "agent.toml, line 3: max_requests_per_run must be"),
        ('prompts = "hi"\n', "agent.toml, line 1: prompts must be a list"),
        (
            'model = "x:y"\n\n[mcp.tickets]\ncommand = ["x"]\nurl = "https://x"\n',
            "agent.toml, line 3 [mcp.tickets]",
        ),
    ],
)
def test_agent_file_mistakes_name_the_line(tmp_path: Path, text: str, message: str) -> None:
    """A mistake in the agent file names the file and the line of the key (or of its [mcp.NAME])."""
    (tmp_path / "agent.toml").write_text(text)
    with pytest.raises(ValueError) as caught:
        AgentFile.load(tmp_path / "agent.toml")
    assert str(caught.value).startswith(str(tmp_path / message.split(",")[0]) + message[len("agent.toml") :])


def test_start_up_names_every_wrong_and_missing_setting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two invalid values, a bot token of the wrong kind and two missing settings: one start names
    all five."""
    monkeypatch.chdir(tmp_path)
    for name in ("MODEL", "SLACK_SIGNING_SECRET", "AGENT_FILE", "DATABASE_URL", "SLACK_APP_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PORT", "abc")
    monkeypatch.setenv("SHUTDOWN_GRACE", "-1")
    monkeypatch.setenv("SLACK_BOT_TOKEN", "0123456789abcdef0123456789abcdef")
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert "threadbound: PORT=abc is invalid: must be a whole number" in err
    assert "threadbound: SHUTDOWN_GRACE=-1 is invalid: must be at least 0" in err
    assert "SLACK_BOT_TOKEN must start with xoxb-" in err
    assert "2 required settings are not set:" in err
    assert "  SLACK_SIGNING_SECRET  " in err and "  MODEL  " in err


async def test_check_no_model_in_an_empty_folder_neither_fails_on_model_nor_creates_the_database(
    tmp_path: Path,
) -> None:
    """`check --no-model` with no MODEL warns about it instead of failing, and `check` leaves an
    empty folder empty: the SQLite file is reported as created by serve, not made by check."""
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, data_dir=tmp_path / "data", agent_file=None, skills_dir=None, model=""
    )
    out = io.StringIO()
    await run_checks(settings, model=False, out=out)
    lines = out.getvalue().splitlines()
    [model] = [line for line in lines if "  model  " in line]
    assert model.startswith("WARN") and "MODEL is not set" in model
    [database] = [line for line in lines if "  database  " in line]
    assert database.startswith("PASS") and "does not exist yet; serve creates it" in database
    assert _empty(tmp_path)


def _empty(folder: Path) -> bool:
    return not any(folder.iterdir())


def test_help_examples_say_threadbound(capsys: pytest.CaptureFixture[str]) -> None:
    """`--help` shows examples as `threadbound COMMAND` and says `python -m app` is the same program."""
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    examples = out.split("examples:")[1]
    assert "  threadbound serve" in examples and "  python -m app serve" not in examples
    assert "`python -m app COMMAND` works wherever `threadbound COMMAND` does" in " ".join(out.split())
