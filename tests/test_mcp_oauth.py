"""Per-person MCP servers end to end: the real app over HTTP, the Slack emulator, and an MCP server
that requires OAuth (``tests/support/mcp_oauth.py``) in a process of its own."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent

from app.agent.mcp.vault import TokenVault, new_key
from app.traces import instrument_agents
from tests.support import events
from tests.support.harness import AppHarness, free_port
from tests.support.models import Turn, call, scripted
from threadbound_emulator import FakeSlack
from threadbound_emulator.browser import links_for, open_link

ROOT = Path(__file__).resolve().parents[1]
EXPORTER = InMemorySpanExporter()


class _WhileTesting(SimpleSpanProcessor):
    """Exports only while a test here runs: the global provider cannot be unset afterwards."""

    active = False

    def on_end(self, span: ReadableSpan) -> None:
        if self.active:
            super().on_end(span)


PROCESSOR = _WhileTesting(EXPORTER)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Every span of the test (with content: prompts, tool arguments and results) in memory."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    if PROCESSOR not in provider._active_span_processor._span_processors:  # tests/test_traces.py's set it
        provider.add_span_processor(PROCESSOR)
    EXPORTER.clear()
    PROCESSOR.active = True
    instrument_agents(include_content=True)
    try:
        yield EXPORTER
    finally:
        Agent.instrument_all(False)
        PROCESSOR.active = False


SERVER = [sys.executable, str(ROOT / "tests" / "support" / "mcp_oauth.py")]


@contextlib.asynccontextmanager
async def oauth_server() -> AsyncIterator[str]:
    """The OAuth-protected MCP server on its own port; yields its origin."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        *SERVER,
        "--port",
        str(port),
        cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        for _ in range(300):
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                if proc.returncode is not None:
                    raise RuntimeError("the OAuth MCP server exited") from None
                await asyncio.sleep(0.1)
                continue
            writer.close()
            await writer.wait_closed()
            break
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        await proc.wait()


async def control(origin: str, path: str) -> Any:
    async with aiohttp.ClientSession() as http, http.get(f"{origin}{path}") as response:
        return await response.json()


def whoami_script(models_saw: list[str]) -> Any:
    """The model: asked "whoami", it calls tickets_whoami (or tickets_connect before anyone connected)
    and replies with what the server answered; resumed by a connection, it tries again."""

    def script(turn: Turn) -> list[Any]:
        models_saw.append(repr(turn.messages))
        if turn.results:
            name, result = turn.results[-1]
            if name == "tickets_whoami" and isinstance(result, str):
                return [call("channel_reply", text=f"The service sees {result}")]
            return [""]
        if "tickets_whoami" in turn.tools:
            return [call("tickets_whoami")]
        return [call("tickets_connect")]

    return script


def agent_file(tmp_path: Path, origin: str) -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(
        f'[mcp.tickets]\nurl = "{origin}/mcp"\nauth = "per_person"\neager = ["*"]\ntimeout = 10\n',
        encoding="utf-8",
    )
    return path


@pytest.mark.process
async def test_each_person_connects_privately_and_calls_as_themselves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, spans: InMemorySpanExporter
) -> None:
    """Alice is asked privately, connects, and the task resumes with the server seeing Alice; Bob in
    the same thread is asked and seen as Bob; an expired token is refreshed, a revoked one asks
    again; no token reaches a log line, a trace (content on), the model, Slack or the database file."""
    caplog.set_level(logging.DEBUG)
    models_saw: list[str] = []
    key = new_key()
    async with oauth_server() as origin, FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        slack.add_user("U2", "bob", display_name="Bob")
        port = free_port()
        async with AppHarness(
            slack,
            model=scripted(whoami_script(models_saw)),
            data_dir=tmp_path / "data",
            agent_file=agent_file(tmp_path, origin),
            mcp_token_key=key,
            public_url=f"http://127.0.0.1:{port}",
            bind_port=port,
        ) as app:

            async def say(user: str, thread: str | None = None) -> str:
                ts = slack.add_message("C1", "<@UBOT> whoami", user=user, thread_ts=thread)
                await app.deliver(events.app_mention("C1", user, "<@UBOT> whoami", ts, thread_ts=thread))
                await app.idle()
                return ts

            async def connect(user: str, name: str) -> None:
                [link] = links_for(slack, user)[-1:]
                status, page = await open_link(link, name)
                assert status == 200 and "Connected tickets" in page, page
                await app.idle()

            root = await say("U1")
            assert slack.bot_messages("C1") == []  # nothing public: Alice was asked privately
            [(_, shown_to, thread, text)] = slack.ephemerals
            assert (shown_to, thread) == ("U1", root) and "connect" in text
            await connect("U1", "alice")
            assert [m["text"] for m in slack.bot_messages("C1")] == ["The service sees alice"]

            await say("U2", root)  # Bob, same thread: his own link, his own identity
            assert [e[1] for e in slack.ephemerals] == ["U1", "U2"]
            await connect("U2", "bob")
            assert slack.bot_messages("C1")[-1]["text"] == "The service sees bob"

            await say("U1", root)  # Alice again: her stored token, no new link
            assert len(slack.ephemerals) == 2
            assert slack.bot_messages("C1")[-1]["text"] == "The service sees alice"

            # Alice's token expired (as the store remembers it): refreshed before the call, no link.
            tokens, vault = app.service.store.mcp_tokens, TokenVault(key)  # type: ignore[union-attr]
            kept = vault.open(await tokens.get("tickets", "U1"))
            assert kept is not None
            kept["expires_at"] = 1.0
            await tokens.put("tickets", "U1", vault.seal(kept), now=1.0)
            issued_before = len((await control(origin, "/test/tokens"))["issued"])
            await say("U1", root)
            assert len(slack.ephemerals) == 2
            assert slack.bot_messages("C1")[-1]["text"] == "The service sees alice"
            assert len((await control(origin, "/test/tokens"))["issued"]) == issued_before + 2

            # Revoked at the server: the stored token is removed and Alice is asked again.
            await control(origin, "/test/revoke?user=alice")
            replies = len(slack.bot_messages("C1"))
            await say("U1", root)
            assert [e[1] for e in slack.ephemerals] == ["U1", "U2", "U1"]
            assert len(slack.bot_messages("C1")) == replies
            assert await tokens.get("tickets", "U1") is None
            await connect("U1", "alice")
            assert slack.bot_messages("C1")[-1]["text"] == "The service sees alice"

            # Expired and its refresh refused: removed, and Alice is asked again.
            kept = vault.open(await tokens.get("tickets", "U1"))
            assert kept is not None
            kept["expires_at"] = 1.0
            await tokens.put("tickets", "U1", vault.seal(kept), now=1.0)
            await control(origin, "/test/revoke?user=alice")
            await say("U1", root)
            assert [e[1] for e in slack.ephemerals] == ["U1", "U2", "U1", "U1"]
            assert await tokens.get("tickets", "U1") is None

        seen = (await control(origin, "/test/seen"))["seen"]
        assert seen == ["alice", "bob", "alice", "alice", "alice"]
        canaries = (await control(origin, "/test/tokens"))["issued"]
    assert len(canaries) >= 8
    logged = "\n".join(r.getMessage() + str(r.exc_info or "") for r in caplog.records)
    posted = repr(slack.ephemerals) + repr([m["text"] for m in slack.bot_messages()])
    stored = b"".join(p.read_bytes() for p in (tmp_path / "data").glob("threadbound.db*") if p.is_file())
    finished = spans.get_finished_spans()
    assert any("tickets_whoami" in repr(s.attributes) for s in finished)  # content is traced
    traced = repr(
        [[s.name, dict(s.attributes or {}), [dict(e.attributes or {}) for e in s.events]] for s in finished]
    )
    for canary in canaries:
        assert canary not in logged
        assert all(canary not in seen_by_model for seen_by_model in models_saw)
        assert canary not in posted
        assert canary not in traced
        assert canary.encode() not in stored


@pytest.mark.process
async def test_a_declined_or_reused_link_resumes_the_task_saying_so(tmp_path: Path) -> None:
    """Declining resumes the task with "declined" (the model reads it); a forged state is refused."""
    prompts: list[str] = []

    def script(turn: Turn) -> list[Any]:
        prompts.append(turn.prompt)
        if turn.results or "declined" in turn.prompt:
            return ["OK, not connected."] if not turn.results else [""]
        return [call("tickets_connect")]

    async with oauth_server() as origin, FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        port = free_port()
        async with AppHarness(
            slack,
            model=scripted(script),
            data_dir=tmp_path / "data",
            agent_file=agent_file(tmp_path, origin),
            mcp_token_key=new_key(),
            public_url=f"http://127.0.0.1:{port}",
            bind_port=port,
        ) as app:
            ts = slack.add_message("C1", "<@UBOT> connect me", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> connect me", ts))
            await app.idle()
            [link] = links_for(slack, "U1")
            status, page = await open_link(link, "nobody")
            assert status == 200 and "did not connect" in page
            await app.idle()
            assert any("Alice declined to connect the tickets service" in p for p in prompts)
            assert [m["text"] for m in slack.bot_messages("C1")] == ["OK, not connected."]
            # A state the app never made changes nothing.
            response = await app.get("/oauth/callback?code=x&state=forged")
            assert response.status == 400


async def test_start_up_refuses_per_person_servers_without_a_key(tmp_path: Path) -> None:
    """No MCP_TOKEN_KEY (or no PUBLIC_URL): start-up stops, naming the setting."""
    from app.service import StartupError

    async with FakeSlack() as slack:
        for overrides, named in (({}, "MCP_TOKEN_KEY"), ({"mcp_token_key": new_key()}, "PUBLIC_URL")):
            with pytest.raises(StartupError, match=named):
                async with AppHarness(
                    slack,
                    model=scripted(lambda turn: [""]),
                    data_dir=tmp_path / "data",
                    agent_file=agent_file(tmp_path, "http://127.0.0.1:9"),
                    **overrides,
                ):
                    pass


def test_per_person_is_for_url_servers_and_its_client_comes_from_the_environment(tmp_path: Path) -> None:
    """auth = "per_person" parses with client_id/secret (${VAR} expanded, the secret redacted); it is
    refused on a command server, with headers, or misspelt; client keys need it."""
    from app.agent.mcp.config import McpConfigError, parse_servers

    source = tmp_path / "agent.toml"
    source.write_text("", encoding="utf-8")
    table = {"url": "https://t.example/mcp", "auth": "per_person", "client_id": "tb", "client_secret": "${S}"}
    [server] = parse_servers({"tickets": table}, source=source)
    resolved = server.resolve({"S": "client-secret-value"})
    assert server.per_person and (resolved.client_id, resolved.client_secret) == ("tb", "client-secret-value")
    assert resolved.redact("x client-secret-value") == "x [redacted]"
    for bad, said in (
        ({"command": ["x"], "auth": "per_person"}, "for url servers"),
        ({**table, "headers": {"A": "b"}}, "takes no headers"),
        ({"url": "https://t.example/mcp", "auth": "oauth"}, 'must be "per_person"'),
        ({"url": "https://t.example/mcp", "client_id": "tb"}, "need auth"),
    ):
        with pytest.raises(McpConfigError, match=said):
            parse_servers({"tickets": bad}, source=source)


@pytest.mark.process
async def test_the_playground_connects_a_per_person_server(tmp_path: Path) -> None:
    """In the playground, Alice's private note carries the connect link; the page opens it as her (the
    emulator's browser), the task resumes, and the page's state never holds a token."""
    from app.playground import GENERAL, Playground
    from app.playground.guard import TOKEN_HEADER
    from app.settings import Settings

    async with oauth_server() as origin:
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None,
            data_dir=tmp_path,
            agent_file=agent_file(tmp_path, origin),
            skills_dir=None,
            sweep_interval=3600.0,
            shutdown_grace=5.0,
        )
        async with Playground(settings, model=scripted(whoami_script([]))) as pg:
            assert pg.service is not None
            await pg.post("U0ALICE", GENERAL, "@threadbound whoami")
            await pg.service.runner.idle()
            [conversation] = [c for c in pg.snapshot()["conversations"] if c["id"] == GENERAL]
            [note] = conversation["ephemerals"]
            assert note["user"] == "U0ALICE" and len(note["links"]) == 1
            async with aiohttp.ClientSession(headers={TOKEN_HEADER: pg.page_token}) as http:
                body = {"as": "U0BOB", "url": note["links"][0]}
                async with http.post(f"{pg.url}api/open-link", json=body) as response:
                    assert response.status == 400  # not Bob's link
                body["as"] = "U0ALICE"
                async with http.post(f"{pg.url}api/open-link", json=body) as response:
                    opened = await response.json()
            assert opened["status"] == 200 and "Connected tickets" in opened["page"]
            await pg.service.runner.idle()
            state = repr(pg.snapshot())
            assert "The service sees alice" in state
        canaries = (await control(origin, "/test/tokens"))["issued"]
    assert canaries and not any(c in state for c in canaries)


@pytest.mark.process
async def test_a_follow_up_acts_with_the_token_of_whoever_scheduled_it(tmp_path: Path) -> None:
    """Alice schedules a follow-up; Bob (not connected) writes in the thread after her; when it fires
    the call goes out with Alice's token, and nobody is asked to connect."""
    base = whoami_script([])

    def script(turn: Turn) -> list[Any]:
        if "remind" in turn.prompt and not turn.results:
            return [call("tool_search", query="follow up later", limit=1)]
        if turn.results and turn.results[-1][0] == "tool_search":
            return [call("channel_follow_up", after="20m", note="whoami for Alice")]
        if turn.results and turn.results[-1][0] == "channel_follow_up":
            return ["Scheduled."]
        return base(turn)

    async with oauth_server() as origin, FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        slack.add_user("U2", "bob", display_name="Bob")
        port = free_port()
        async with AppHarness(
            slack,
            model=scripted(script),
            data_dir=tmp_path / "data",
            agent_file=agent_file(tmp_path, origin),
            mcp_token_key=new_key(),
            public_url=f"http://127.0.0.1:{port}",
            bind_port=port,
        ) as app:
            assert app.service is not None and app.service.follow_ups is not None
            root = slack.add_message("C1", "<@UBOT> whoami", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> whoami", root))
            await app.idle()
            await open_link(links_for(slack, "U1")[0], "alice")
            await app.idle()
            for user, text in (("U1", "<@UBOT> remind me"), ("U2", "<@UBOT> whoami")):
                ts = slack.add_message("C1", text, user=user, thread_ts=root)
                await app.deliver(events.app_mention("C1", user, text, ts, thread_ts=root))
                await app.idle()
            assert [e[1] for e in slack.ephemerals] == ["U1", "U2"]  # Bob was asked for his own
            [scheduled] = await app.service.store.pending_follow_ups(limit=10)
            assert len(await app.service.follow_ups.fire(now=scheduled.due_at + 1)) == 1
            await app.idle()
            assert [e[1] for e in slack.ephemerals] == ["U1", "U2"]
            assert slack.bot_messages("C1")[-1]["text"] == "The service sees alice"
        assert (await control(origin, "/test/seen"))["seen"] == ["alice", "alice"]


async def test_check_names_a_per_person_server_without_anyones_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`check` says the server acts per person and shows no token (it holds none)."""
    import io

    from app.ops.check import run_checks
    from tests.support.harness import settings_for

    monkeypatch.chdir(tmp_path)
    async with FakeSlack() as slack:
        settings = settings_for(
            slack, tmp_path / "data", agent_file=agent_file(tmp_path, "http://127.0.0.1:9")
        )
        out = io.StringIO()
        await run_checks(settings, model=False, out=out)
    [line] = [line for line in out.getvalue().splitlines() if "  mcp tickets  " in line]
    assert line.startswith("PASS") and "acts per person" in line


@pytest.mark.process
async def test_serve_hands_the_callback_from_its_edge_process_to_the_service(tmp_path: Path) -> None:
    """Under ``serve`` the edge's own process forwards ``GET /oauth/callback`` to the service, which
    answers it: a forged state is refused with the service's page."""
    from tests.support.fake_model import FakeOpenAI
    from tests.support.process import ServerProcess, server_env

    async with FakeSlack() as slack, FakeOpenAI() as llm, aiohttp.ClientSession() as http:
        env = server_env(
            slack,
            llm,
            DATA_DIR=str(tmp_path / "data"),
            AGENT_FILE=str(agent_file(tmp_path, "http://127.0.0.1:9")),
            MCP_TOKEN_KEY=new_key(),
            PUBLIC_URL="http://127.0.0.1:1",
        )
        async with ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "serve.log") as server:
            async with http.get(f"{server.url}/oauth/callback?code=x&state=forged") as answer:
                assert answer.status == 400 and "not known here" in await answer.text()


@pytest.mark.process
async def test_an_unused_link_expires_and_the_task_hears_so(tmp_path: Path) -> None:
    """Past APPROVAL_TTL the sweep decides the link expired and the task resumes saying so; the link
    then opens on a page saying so, and changes nothing."""
    import time

    prompts: list[str] = []

    def script(turn: Turn) -> list[Any]:
        prompts.append(turn.prompt)
        if "expired" in turn.prompt:
            return ["The link expired; ask me again to connect."]
        return [call("tickets_connect")] if not turn.results else [""]

    async with oauth_server() as origin, FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        port = free_port()
        async with AppHarness(
            slack,
            model=scripted(script),
            data_dir=tmp_path / "data",
            agent_file=agent_file(tmp_path, origin),
            mcp_token_key=new_key(),
            public_url=f"http://127.0.0.1:{port}",
            bind_port=port,
            approval_ttl=600.0,
        ) as app:
            assert app.service is not None and app.service.mcp.access is not None
            ts = slack.add_message("C1", "<@UBOT> connect me", user="U1")
            await app.deliver(events.app_mention("C1", "U1", "<@UBOT> connect me", ts))
            await app.idle()
            access = app.service.mcp.access
            access.clock = lambda: time.time() + 601
            assert await access.sweep() == 1
            await app.idle()
            assert any("The link to connect the tickets service expired" in p for p in prompts)
            assert [m["text"] for m in slack.bot_messages("C1")] == [
                "The link expired; ask me again to connect."
            ]
            status, page = await open_link(links_for(slack, "U1")[0], "alice")
            assert status == 410 and "expired" in page
            assert await access.tokens.get("tickets", "U1") is None


async def test_a_person_disconnects_themselves_with_the_slash_command(tmp_path: Path) -> None:
    """``/threadbound disconnect tickets`` forgets the typing person's tokens only, and says so privately."""
    from tests.support.harness import SIGNING_SECRET
    from threadbound_emulator import events as emulated

    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        async with AppHarness(
            slack,
            model=scripted(lambda turn: [""]),
            data_dir=tmp_path / "data",
            agent_file=agent_file(tmp_path, "http://127.0.0.1:9"),
            mcp_token_key=new_key(),
            public_url="http://127.0.0.1:1",
        ) as app:
            assert app.service is not None
            tokens = app.service.store.mcp_tokens
            await tokens.put("tickets", "U1", "sealed-alice", now=1.0)
            await tokens.put("tickets", "U2", "sealed-bob", now=1.0)
            said = []
            for text in ("disconnect tickets", "disconnect tickets", "disconnect", "help"):
                payload = emulated.slash_command(slack, "C1", "U1", text, response_url=slack.response_url())
                raw, headers = emulated.command_body(payload, SIGNING_SECRET)
                response = await app.post_raw(raw, headers)
                assert response.status == 200
                said.append((await response.json())["text"])
            assert (
                said[0].startswith("Disconnected tickets") and said[1] == "You were not connected to tickets."
            )
            assert "`tickets`" in said[2] and "disconnect" in said[3]
            assert await tokens.get("tickets", "U1") is None
            assert await tokens.get("tickets", "U2") == "sealed-bob"
