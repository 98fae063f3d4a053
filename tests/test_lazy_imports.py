"""What a server process loads: only the libraries its configuration uses.

Every server process the tests and a deployment start pays for each module it imports. fastmcp and
the MCP SDK are about half of ``import app.service`` and are needed only when the agent file or
``MCP_CONFIG`` names a server; a provider SDK only for the configured model; the OpenTelemetry SDK
only when tracing is on. These tests check ``sys.modules`` of real processes (never a duration).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.process import ServerProcess
from threadbound_emulator import FakeSlack

pytestmark = pytest.mark.process
ROOT = Path(__file__).resolve().parents[1]

#: Loaded only when configured: MCP servers, another provider's SDK, tracing, the other commands.
NOT_SERVING = (
    "fastmcp",
    "mcp",
    "pydantic_ai.mcp",
    "anthropic",
    "opentelemetry.sdk",
    "app.playground",
    "threadbound_emulator",
    "bench",
)


def loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    """The ``names`` that are among ``modules``, a package counting when any of its modules is."""
    return [n for n in names if any(m == n or m.startswith(f"{n}.") for m in modules)]


def test_importing_the_service_loads_no_mcp_provider_or_tracing_library() -> None:
    """``import app.service`` (what ``serve`` and ``run`` import) loads none of fastmcp, the MCP SDK,
    a provider SDK or the OpenTelemetry SDK."""
    script = "import json, sys\nimport app.service\nprint(json.dumps(sorted(sys.modules)))\n"
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    modules = json.loads(proc.stdout)
    assert "app.agent.mcp.servers" in modules  # the module is imported; its SDKs are not
    assert loaded(modules, (*NOT_SERVING, "openai")) == []


async def test_a_server_without_mcp_servers_never_loads_fastmcp(slack: FakeSlack, tmp_path: Path) -> None:
    """``python -m app serve`` with no MCP server configured answers /healthz and shuts down having
    loaded the configured model's SDK (openai) and none of fastmcp, the MCP SDK, another provider's
    SDK or the OpenTelemetry SDK."""
    dump = tmp_path / "modules.json"
    script = tmp_path / "serve_and_dump.py"
    script.write_text(
        "import atexit, json, sys\n"
        f"atexit.register(lambda: open({str(dump)!r}, 'w').write(json.dumps(sorted(sys.modules))))\n"
        "from app.__main__ import main\n"
        "sys.exit(main(['serve']))\n"
    )
    env = {
        "SLACK_BOT_TOKEN": slack.token,
        "SLACK_API_URL": slack.api_url,
        "DATA_DIR": str(tmp_path / "data"),
        "MODEL": "openai-chat:fake",
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",  # never called: nobody writes to the bot
        "OPENAI_API_KEY": "x",
    }
    server = ServerProcess(
        env, cwd=tmp_path, log_path=tmp_path / "server.log", argv=[sys.executable, str(script)]
    )
    async with server:
        pass
    assert server.proc is not None and server.proc.returncode == 0, server.tail()
    modules = json.loads(dump.read_text())
    assert "app.service" in modules and loaded(modules, ("openai",)) == ["openai"]
    assert loaded(modules, NOT_SERVING) == []
