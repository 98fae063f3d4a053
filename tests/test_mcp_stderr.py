"""A stdio MCP server's stderr reaches the log only through the scrubbing formatter: a secret it
prints (an expanded ``${VAR}``, or a literal credential in its env) never appears verbatim."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from app.agent.mcp.config import McpServerConfig
from app.agent.mcp.servers import McpServer
from app.logs import capture
from app.settings import Settings

EXPANDED = "expanded-secret-4711"
LITERAL = "literal-api-key-0815"
LEAKY = """
import os, sys
print("starting with token", os.environ["LEAKY_TOKEN"], file=sys.stderr)
print("and key", os.environ["API_KEY"], file=sys.stderr)
sys.exit(3)
"""


@pytest.mark.process
async def test_a_secret_a_stdio_server_prints_to_stderr_is_scrubbed(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The server prints its expanded token and its literal API key to stderr and exits: the log
    lines carry the server's name and "[redacted]", never the values; nothing bypasses the log."""
    script = tmp_path / "leaky.py"
    script.write_text(LEAKY, encoding="utf-8")
    config = McpServerConfig(
        name="leaky",
        command=(sys.executable, str(script)),
        env=(("LEAKY_TOKEN", "${LEAKY}"), ("API_KEY", LITERAL)),
        startup_timeout=10.0,
    )
    with capture(Settings(_env_file=None)) as logged:  # type: ignore[call-arg]
        server = McpServer(config, {"LEAKY": EXPANDED})
        await server.start()
        await server.stop()
    assert server.error is not None and "[redacted]" in server.error
    said = [line for line in logged.lines() if line.get("mcp_server") == "leaky"]
    assert [line["message"] for line in said] == [
        "starting with token [redacted]",
        "and key [redacted]",
    ]
    out, err = capfd.readouterr()
    for secret in (EXPANDED, LITERAL):
        assert secret not in logged.text and secret not in err and secret not in out
        assert secret not in server.error
