"""Real MCP servers nobody here wrote, through the whole app: the reference "everything" server (npm
``@modelcontextprotocol/server-everything``, pinned in tests/fixtures/mcp-everything and installed by
.ci/run) and the reference time server (PyPI ``mcp-server-time``, pinned in the test extra)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import events
from tests.support.harness import AppHarness
from tests.support.models import Turn, call, scripted
from threadbound_emulator import FakeSlack

PYTHON = sys.executable.replace("\\", "/")
EVERYTHING = (
    Path(__file__).parent
    / "fixtures"
    / "mcp-everything"
    / "node_modules"
    / "@modelcontextprotocol"
    / "server-everything"
    / "dist"
    / "index.js"
)
NODE = shutil.which("node")

needs_everything = pytest.mark.skipif(
    NODE is None or not EVERYTHING.is_file(),
    reason="the MCP 'everything' server is not installed: needs node, and "
    "`npm ci` in tests/fixtures/mcp-everything (.ci/run does it)",
)
needs_time = pytest.mark.skipif(
    importlib.util.find_spec("mcp_server_time") is None,
    reason="mcp-server-time is not installed (it is in the test extra: pip install -e '.[test]')",
)


async def converse(tmp_path: Path, agent: str, script: Any, **settings: Any) -> tuple[FakeSlack, Path]:
    path = tmp_path / "agent.toml"
    path.write_text(agent, encoding="utf-8")
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        async with AppHarness(
            slack, model=scripted(script), data_dir=tmp_path / "data", agent_file=path, **settings
        ) as app:
            ts = slack.add_message("C1", "<@UBOT> go", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> go", ts))
            await app.idle()
        return slack, tmp_path / "data"


@pytest.mark.process
@needs_time
async def test_the_reference_time_server_answers_through_tool_search(tmp_path: Path) -> None:
    seen: list[tuple[str, Any]] = []

    def script(turn: Turn) -> list[Any]:
        seen.extend(turn.results)
        if turn.step == 0:
            return [call("tool_search", query="current time in a timezone", limit=1)]
        if turn.step == 1:
            return [call("time_get_current_time", timezone="UTC")]
        if turn.step == 2:
            [(_, now)] = turn.results
            return [call("channel_reply", text=f"It is {now['datetime']} in {now['timezone']}.")]
        return [""]

    agent = f"""
[mcp.time]
command = ["{PYTHON}", "-m", "mcp_server_time", "--local-timezone", "UTC"]
timeout = 20
"""
    slack, _ = await converse(tmp_path, agent, script)
    [(_, found)] = [r for r in seen if r[0] == "tool_search"]
    assert [e["name"] for e in found["enabled"]] == ["time_get_current_time"]
    [reply] = [m["text"] for m in slack.bot_messages("C1")]
    assert reply.startswith("It is 20") and reply.endswith(" in UTC.")


@pytest.mark.process
@needs_everything
async def test_the_reference_everything_server_samples_links_images_and_progress(tmp_path: Path) -> None:
    """Sampling (allowed for the server) is answered by the app's model; resource links and an image
    land in the task's directory; a long operation's progress shows as the thread's status; the
    tools the server registers once it knows the client can sample are found."""
    seen: list[tuple[str, Any]] = []
    sampled: list[str] = []

    def script(turn: Turn) -> list[Any]:
        if "sampling-canary" in turn.prompt:  # the server's sampling request, not the run
            sampled.append(turn.prompt)
            return ["a sampled answer"]
        seen.extend(turn.results)
        steps = [
            [call("ev_trigger-sampling-request", prompt="sampling-canary", maxTokens=50)],
            [call("ev_get-resource-links", count=2)],
            [call("ev_get-tiny-image")],
            [call("ev_trigger-long-running-operation", duration=2.5, steps=2)],
        ]
        return steps[turn.step] if turn.step < len(steps) else ["done"]

    agent = f"""
[mcp.ev]
command = ["{NODE}", "{EVERYTHING.as_posix()}", "stdio"]
eager = ["*"]
sampling = true
sampling_max_tokens = 40
timeout = 30
"""
    slack, data = await converse(tmp_path, agent, script, stream="off")
    results = dict(seen)
    assert sampled and "a sampled answer" in str(results["ev_trigger-sampling-request"])
    links = results["ev_get-resource-links"]["content"]
    files = [part for part in links if isinstance(part, dict) and "file" in part]
    assert len(files) == 2 and all(f["uri"].startswith("demo://resource/") for f in files)
    image = results["ev_get-tiny-image"]
    [png] = [
        part for part in image["content"] if isinstance(part, dict) and part.get("media_type") == "image/png"
    ]
    task_dir = next((data / "tasks").iterdir())
    assert (task_dir / png["file"]).read_bytes().startswith(b"\x89PNG")
    for f in files:
        assert (task_dir / f["file"]).stat().st_size == f["size"] > 0
    statuses = [c.params.get("status", "") for c in slack.calls_to("assistant.threads.setStatus")]
    assert any("(2 of 2" in s for s in statuses), statuses


@pytest.mark.process
@needs_everything
async def test_the_reference_everything_server_asks_its_form_in_the_thread(tmp_path: Path) -> None:
    """The everything server's elicitation tool (registered because the client declares elicitation):
    its form (text, yes/no, numbers, one-of and many-of lists) becomes a card; Alice's answer reaches it."""
    from tests.test_mcp_elicitation import click, form_card

    seen: list[tuple[str, Any]] = []

    def script(turn: Turn) -> list[Any]:
        seen.extend(turn.results)
        return [call("ev_trigger-elicitation-request")] if turn.step == 0 else [""]

    path = tmp_path / "agent.toml"
    path.write_text(f'[mcp.ev]\ncommand = ["{NODE}", "{EVERYTHING.as_posix()}", "stdio"]\neager = ["*"]\n')
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice")
        async with AppHarness(
            slack, model=scripted(script), data_dir=tmp_path / "data", agent_file=path
        ) as app:
            ts = slack.add_message("C1", "<@UBOT> go", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> go", ts))
            card = await form_card(slack)
            kinds = {b["element"]["type"] for b in card["blocks"] if b["type"] == "input"}
            assert {"plain_text_input", "static_select", "multi_static_select", "number_input"} <= kinds
            await app.click(click(slack, card, "U1", "threadbound_form_submit", {"name": "Alice"}))
            await app.idle()
    [(_, result)] = [r for r in seen if r[0] == "ev_trigger-elicitation-request"]
    assert "User provided the requested information" in json.dumps(result)
    assert "Alice" in json.dumps(result)
