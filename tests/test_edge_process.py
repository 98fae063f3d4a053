"""The HTTP edge's own process (``app.intake.edge_process``, ``app.intake.edge_child``) under the real
``python -m app serve``: who listens, what it answers itself and what it hands to the service,
and that either process's death ends the other."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import aiohttp
import psutil
import pytest

from tests.support import events
from tests.support.fake_model import FakeOpenAI
from tests.support.harness import SIGNING_SECRET
from tests.support.process import ServerProcess, server_env
from tests.support.waiting import eventually
from threadbound_emulator import FakeSlack

pytestmark = pytest.mark.process


def _listener(pid: int, port: int) -> psutil.Process | None:
    """The process (``pid`` or one of its children) listening on ``port``."""
    parent = psutil.Process(pid)
    for proc in (parent, *parent.children(recursive=True)):
        try:
            if any(
                c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN
                for c in proc.net_connections()
            ):
                return proc
        except psutil.NoSuchProcess:
            continue
    return None


def _edge_of(server: ServerProcess) -> psutil.Process:
    """The edge's process of a served app: a child of it, listening on its port."""
    edge = _listener(server.pid, server.port)
    assert edge is not None and edge.pid != server.pid, server.tail()
    return edge


def _served(
    slack: FakeSlack, llm: FakeOpenAI, tmp_path: Path, log: str = "serve", **extra: str
) -> ServerProcess:
    """The real ``python -m app serve`` on the fakes, its data and log in ``tmp_path``."""
    env = server_env(slack, llm, DATA_DIR=str(tmp_path / "data"), **extra)
    return ServerProcess(env, cwd=tmp_path, log_path=tmp_path / f"{log}.log")


def _slack(slack: FakeSlack) -> None:
    slack.add_channel("C1", "general")
    slack.add_user("U1", "alice", display_name="Alice")


def _model() -> FakeOpenAI:
    return FakeOpenAI()  # echoes the question with channel_reply, then "done"


async def test_the_edge_acks_in_a_process_of_its_own_and_hands_the_rest_to_the_service(
    tmp_path: Path,
) -> None:
    """A child of the service listens on PORT, the service itself does not. A mention is acked there
    and answered by the service's run (the wake-up crossed); the delivery is counted in the
    service's /metrics (the outcome crossed; its token checked there); /readyz, a url_verification
    and a click are answered by the service through the child."""
    async with FakeSlack() as slack, _model() as llm, aiohttp.ClientSession() as http:
        _slack(slack)
        async with _served(slack, llm, tmp_path, METRICS_TOKEN="m-secret") as server:
            edge = _edge_of(server)
            assert edge.ppid() == server.pid

            root = slack.add_message("C1", "<@UBOT> question", user="U1")
            mention = events.app_mention("C1", "U1", "<@UBOT> question", root)
            answer = await events.deliver(http, f"{server.url}/slack/events", mention, SIGNING_SECRET)
            assert answer.status == 200
            await eventually(lambda: any("echo: " in m.get("text", "") for m in slack.bot_messages("C1")))

            async with http.get(f"{server.url}/metrics") as refused:
                assert refused.status == 401  # the service's answer, through the edge
            bearer = {"Authorization": "Bearer m-secret"}  # forwarded with the request
            async with http.get(f"{server.url}/metrics", headers=bearer) as metrics:
                text = await metrics.text()
            assert metrics.status == 200
            assert 'threadbound_deliveries_total{outcome="claimed"} 1.0' in text, text[:2000]
            async with http.get(f"{server.url}/readyz") as ready:
                assert ready.status == 200 and (await ready.json())["ok"] is True
            challenge = await events.deliver(
                http, f"{server.url}/slack/events", events.url_verification("c-42"), SIGNING_SECRET
            )
            assert challenge.status == 200 and "c-42" in await challenge.text()
            click = events.block_actions(
                channel="C1", user="U1", message_ts=root, action_id="unknown_action", value="x"
            )
            clicked = await events.deliver_interaction(
                http, f"{server.url}/slack/events", click, SIGNING_SECRET
            )
            assert clicked.status == 200
            unsigned = await http.post(f"{server.url}/slack/events", data=b"{}")
            assert unsigned.status == 401  # refused by the edge itself, before anything is handed on
        assert server.proc is not None and server.proc.returncode == 0, server.tail()
        assert not psutil.pid_exists(edge.pid) or edge.status() == psutil.STATUS_ZOMBIE


async def test_a_killed_edge_takes_the_service_with_it_and_a_killed_service_its_edge(tmp_path: Path) -> None:
    """SIGKILL of the edge's process: the service dies by SIGKILL too (as the one process would
    have). SIGKILL of the service: the kernel ends its edge, and the port is free again."""
    async with FakeSlack() as slack, _model() as llm:
        _slack(slack)
        first = _served(slack, llm, tmp_path, "first")
        async with first:
            edge = _edge_of(first)
            edge.kill()
            assert await first.wait(within=10) == -signal.SIGKILL
        assert "the HTTP edge process died (signal 9)" in (tmp_path / "first.log").read_text()

        second = _served(slack, llm, tmp_path, "second")
        async with second:
            edge = _edge_of(second)
            second.kill()
            assert await second.wait(within=10) == -signal.SIGKILL
            await eventually(
                lambda: not edge.is_running() or edge.status() == psutil.STATUS_ZOMBIE, within=10
            )


async def test_sigterm_to_the_edge_alone_stops_the_service_gracefully(tmp_path: Path) -> None:
    """Someone signals only the edge's process: it stops serving and exits 0, and the service
    follows with its own graceful stop (exit 0), not a crash."""
    async with FakeSlack() as slack, _model() as llm:
        _slack(slack)
        server = _served(slack, llm, tmp_path, "serve")
        async with server:
            edge = _edge_of(server)
            edge.send_signal(signal.SIGTERM)
            assert await server.wait(within=20) == 0, server.tail()
        log = (tmp_path / "serve.log").read_text()
        assert "the HTTP edge process stopped; stopping the service" in log
        assert "stopped after" in log


async def test_edge_process_false_serves_from_the_one_process(tmp_path: Path) -> None:
    """EDGE_PROCESS=false: the service listens itself (the edge on a thread) and has no child."""
    async with FakeSlack() as slack, _model() as llm, aiohttp.ClientSession() as http:
        _slack(slack)
        async with _served(slack, llm, tmp_path, EDGE_PROCESS="false") as server:
            edge = _listener(server.pid, server.port)
            assert edge is not None and edge.pid == server.pid
            assert psutil.Process(server.pid).children() == []
            root = slack.add_message("C1", "<@UBOT> question", user="U1")
            mention = events.app_mention("C1", "U1", "<@UBOT> question", root)
            answer = await events.deliver(http, f"{server.url}/slack/events", mention, SIGNING_SECRET)
            assert answer.status == 200
            await eventually(lambda: any("echo: " in m.get("text", "") for m in slack.bot_messages("C1")))


async def test_the_service_failing_to_start_leaves_no_edge_behind(tmp_path: Path) -> None:
    """The edge is forked before the service starts; a start that fails (Slack refuses the token)
    ends it too, so nothing keeps the port."""
    async with FakeSlack() as slack, _model() as llm:
        _slack(slack)
        server = _served(slack, llm, tmp_path, SLACK_BOT_TOKEN="xoxb-wrong")
        with pytest.raises(Exception):  # noqa: B017 - whatever the harness raises for a failed start
            await asyncio.wait_for(server.start(), 30)
        await server.stop()
        log = (tmp_path / "serve.log").read_text()
        assert "cannot start" in log, log
        children = [p for p in psutil.process_iter(["cmdline", "cwd"]) if _in(p, tmp_path)]
        assert children == []


def _in(proc: psutil.Process, where: Path) -> bool:
    try:
        return proc.cwd() == str(where)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


async def test_agent_view_events_and_external_notes_reach_the_service(tmp_path: Path) -> None:
    """What only the service can do still happens when the edge acks: an ``assistant_thread_started``
    (handed to the service's web app) gets the agent file's suggested prompts, and a Slack Connect
    guest's mention (ignored at the edge) gets its one private note from the service."""
    agent = tmp_path / "agent.toml"
    agent.write_text('prompts = ["Summarise this thread"]\n')
    async with FakeSlack() as slack, _model() as llm, aiohttp.ClientSession() as http:
        _slack(slack)
        slack.add_channel("D1", "dm", is_im=True, user="U1")
        slack.add_user("UGUEST", "guest", display_name="Guest")
        async with _served(slack, llm, tmp_path, AGENT_FILE=str(agent)) as server:
            _edge_of(server)
            started = {
                "type": "assistant_thread_started",
                "assistant_thread": {"user_id": "U1", "channel_id": "D1", "thread_ts": "1700000000.000100"},
                "event_ts": "1700000000.000200",
            }
            url = f"{server.url}/slack/events"
            assert (
                await events.deliver(http, url, events.event_callback(started), SIGNING_SECRET)
            ).status == 200
            ts = slack.add_message("C1", "<@UBOT> hi", user="UGUEST")
            guest = events.app_mention("C1", "UGUEST", "<@UBOT> hi", ts)
            guest["event"]["team"] = guest["event"]["user_team"] = "TPARTNER"
            assert (await events.deliver(http, url, guest, SIGNING_SECRET)).status == 200
            await eventually(lambda: any(e[1] == "UGUEST" for e in slack.ephemerals))
        assert slack.suggested_prompts == [
            (
                "D1",
                "1700000000.000100",
                [{"title": "Summarise this thread", "message": "Summarise this thread"}],
            )
        ]
        notes = [e for e in slack.ephemerals if e[1] == "UGUEST"]
        assert len(notes) == 1 and "own organisation" in notes[0][3]
        assert slack.bot_messages("C1") == []


async def test_a_run_is_the_child_of_the_delivery_its_edge_acked(tmp_path: Path) -> None:
    """With tracing on, the edge's process exports the delivery's span and the service's run span
    is its child, in the same trace: the span context crosses the wire with the wake-up."""
    from aiohttp import web
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    spans: list[tuple[str, bytes, bytes, bytes]] = []

    async def collect(request: web.Request) -> web.Response:
        export = ExportTraceServiceRequest()
        export.ParseFromString(await request.read())
        for resource in export.resource_spans:
            for scope in resource.scope_spans:
                spans.extend((s.name, s.trace_id, s.span_id, s.parent_span_id) for s in scope.spans)
        return web.Response(body=b"", content_type="application/x-protobuf")

    collector = web.Application()
    collector.router.add_post("/v1/traces", collect)
    runner = web.AppRunner(collector, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with FakeSlack() as slack, _model() as llm, aiohttp.ClientSession() as http:
            _slack(slack)
            traced = {
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
                "OTEL_BSP_SCHEDULE_DELAY": "100",
            }
            async with _served(slack, llm, tmp_path, **traced) as server:
                _edge_of(server)
                root = slack.add_message("C1", "<@UBOT> question", user="U1")
                mention = events.app_mention("C1", "U1", "<@UBOT> question", root)
                assert (
                    await events.deliver(http, f"{server.url}/slack/events", mention, SIGNING_SECRET)
                ).status == 200
                await eventually(lambda: any("echo: " in m.get("text", "") for m in slack.bot_messages("C1")))
            # Stopped (SIGTERM): both processes flushed what they had queued.
        deliveries = [s for s in spans if s[0] == "threadbound delivery"]
        runs = [s for s in spans if s[0] == "threadbound run"]
        assert len(deliveries) == 1 and len(runs) == 1, [s[0] for s in spans]
        assert runs[0][1] == deliveries[0][1]  # one trace
        assert runs[0][3] == deliveries[0][2]  # the run's parent is the delivery
    finally:
        await runner.cleanup()


def test_no_edge_process_where_it_could_not_share_the_database_or_is_turned_off(tmp_path: Path) -> None:
    """The edge is served from a thread, not forked, when turned off, when deliveries come over
    Socket Mode only, and when the database is in-memory SQLite (a child would claim into a
    database of its own, which the service never reads)."""
    from app.intake.edge_process import fork_edge
    from app.settings import Settings

    base = {"slack_bot_token": "xoxb-1", "slack_signing_secret": "s", "data_dir": tmp_path, "port": 1}
    assert fork_edge(Settings(_env_file=None, **base, edge_process=False)) is None
    assert fork_edge(Settings(_env_file=None, **base, database_url="sqlite:///:memory:")) is None
    socket_only = Settings(_env_file=None, **base, slack_app_token="xapp-1")
    assert not socket_only.http_events and fork_edge(socket_only) is None


#: A stand-in for the edge's process: says it is ready, and on SIGTERM says a burst of last wake-ups
#: (more than one read of the socket holds), then exits.
_LAST_WORDS = """
import signal, socket, sys, time
wire = socket.socket(fileno=int(sys.argv[1]))
wire.makefile("rb").readline()  # the service's hello
stopping = []
signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
wire.sendall(b'{"t":"ready"}\\n')
while not stopping:
    time.sleep(0.01)
wire.sendall(b"".join(b'{"t":"wake","task":"T-%d","author":null}\\n' % n for n in range(60000)))
"""


async def test_what_the_edge_said_before_it_exited_is_heard_when_the_service_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Wake-ups the edge wrote just before it exited on SIGTERM (claims made in its last moment)
    reach the scheduler before the service's drain, as they did when one process did both."""
    import socket
    import subprocess
    import sys

    from aiohttp import web

    from app.intake.edge_process import EdgeProcess, Wiring

    ours, theirs = socket.socketpair()
    for end, option in (
        (theirs, getattr(socket, "SO_SNDBUFFORCE", 32)),
        (ours, getattr(socket, "SO_RCVBUFFORCE", 33)),
    ):
        try:  # room for all the last words at once: the child exits before the service reads them
            end.setsockopt(socket.SOL_SOCKET, option, 8 << 20)
        except OSError:
            pytest.skip("cannot enlarge a socket's buffer here (needs CAP_NET_ADMIN)")
    # Popen, not asyncio's: the EdgeProcess under test reaps it (asyncio's watcher would race it).
    child = subprocess.Popen(  # noqa: ASYNC220 - a fork and exec, nothing waited for
        [sys.executable, "-c", _LAST_WORDS, str(theirs.fileno())], pass_fds=(theirs.fileno(),)
    )
    theirs.close()
    woken: list[str] = []
    edge = EdgeProcess(child.pid, ours)
    wiring = Wiring(
        notify=lambda task, _author, _message: woken.append(task),
        delivered=None,
        external=None,
        ack_gate=None,
    )
    await edge.start(web.Application(), wiring, {"bot": {}, "shutdown_timeout": 1.0}, on_exit=lambda: None)
    assert woken == []
    real_kill = os.kill

    def kill_then_hold(pid: int, sig: int) -> None:
        # The loop is held while the child says its last words and exits: the service hears of the
        # exit before it has read them, the order a busy service can meet them in.
        real_kill(pid, sig)
        time.sleep(0.5)

    monkeypatch.setattr(os, "kill", kill_then_hold)
    await asyncio.wait_for(edge.stop(), 10)
    assert woken == [f"T-{n}" for n in range(60000)]


async def test_a_deliverys_log_line_waits_for_the_wake_up_it_queued() -> None:
    """In the edge's process the delivery's bookkeeping (log line, metrics) runs after the wire's
    write that its claim queued (the wake-up), not before it (app.intake.edge_child)."""
    from app.intake.edge_child import _after_the_wire

    order: list[str] = []
    loop = asyncio.get_running_loop()

    async def acker(body: dict[str, object]) -> tuple[int, str, object]:
        loop.call_soon(order.append, "wake-up written")  # what ToService.send queues at the claim
        return 200, "", lambda: order.append("log line")

    status, _, finish = await _after_the_wire(acker)({})  # type: ignore[arg-type]
    finish()  # called by the HTTP edge once the 200 is written
    assert status == 200 and order == []
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert order == ["wake-up written", "log line"]
