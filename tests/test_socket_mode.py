"""Socket Mode end to end: the app's deliveries over the emulator's WebSocket, same claims, same answers."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError

from app import logs
from app.agent.approval_cards import APPROVE
from app.intake.http import HTTP_EVENTS_OFF
from app.playground.workspace import ignored_settings, playground_settings
from app.service import Service, StartupError
from tests.support import events
from tests.support.fake_model import FakeOpenAI, StuckFirst
from tests.support.harness import SIGNING_SECRET, AppHarness, settings_for
from tests.support.models import Turn, call, echo_model, scripted
from tests.support.postgres import fresh_schema
from tests.support.process import ServerProcess
from tests.support.waiting import eventually
from threadbound_emulator import Envelope, FakeSlack

WITHIN = 10.0


def _workspace(slack: FakeSlack) -> None:
    slack.add_channel("C1", "general")
    slack.add_user("U1", "alice", display_name="Alice")


def _replies(slack: FakeSlack, root: str) -> list[dict[str, Any]]:
    return [m for m in slack.bot_messages("C1") if m.get("thread_ts") == root]


async def _mention(slack: FakeSlack, text: str = "<@UBOT> hello") -> tuple[str, Envelope]:
    root = slack.add_message("C1", text, user="U1")
    envelope = events.over_socket(slack, events.app_mention("C1", "U1", text, root))
    return root, envelope


async def _acked(slack: FakeSlack, envelope: Envelope) -> None:
    async with asyncio.timeout(WITHIN):
        await slack.socket.wait_acked(envelope)


# -- the emulator's side of the protocol ------------------------------------------------------------


async def test_the_emulator_speaks_slacks_envelope_protocol() -> None:
    """apps.connections.open takes only the app token; the socket says hello, sends envelopes with
    Slack's fields, takes acks, and sends an envelope unacknowledged when its socket closed again."""
    async with FakeSlack() as slack, aiohttp.ClientSession() as http:
        client = slack.web_client()
        with pytest.raises(SlackApiError) as bot_token:
            await client.apps_connections_open(app_token=slack.token)
        assert bot_token.value.response["error"] == "not_allowed_token_type"
        url = str((await client.apps_connections_open(app_token=slack.app_token))["url"])
        async with http.ws_connect(url) as ws:
            assert (await ws.receive_json())["type"] == "hello"
            envelope = slack.socket.event(events.app_mention("C1", "U1", "<@UBOT> hi", "1.000001"))
            sent = await ws.receive_json()
            assert {k: sent[k] for k in ("envelope_id", "type", "retry_attempt")} == {
                "envelope_id": envelope.envelope_id,
                "type": "events_api",
                "retry_attempt": 0,
            }
            assert sent["payload"]["event"]["type"] == "app_mention"
        # Closed without an ack: the next connection gets it again, as a retry.
        again_url = str((await client.apps_connections_open(app_token=slack.app_token))["url"])
        async with http.ws_connect(again_url) as ws:
            assert (await ws.receive_json())["type"] == "hello"
            again = await ws.receive_json()
            assert again["envelope_id"] == envelope.envelope_id and again["retry_attempt"] == 1
            await ws.send_json({"envelope_id": envelope.envelope_id})
            await _acked(slack, envelope)
        # A ticket opens one connection only.
        async with http.get(url) as refused:
            assert refused.status == 401


# -- the app over the socket -----------------------------------------------------------------------


async def test_a_mention_over_the_socket_is_answered_in_its_thread(tmp_path: Path) -> None:
    """With SLACK_APP_TOKEN and no signing secret, a mention sent over the socket is acknowledged
    and answered in its thread, exactly as over HTTP."""
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path, socket_mode=True) as app:
            root, envelope = await _mention(slack)
            await _acked(slack, envelope)
            await app.idle()
        [reply] = _replies(slack, root)
        assert "hello" in reply["text"]
        assert slack.count("apps.connections.open") == 1


async def test_a_redelivered_envelope_is_answered_once(tmp_path: Path) -> None:
    """An envelope whose ack Slack did not get comes again with retry_attempt 1: acknowledged
    again, answered once (the claim dedupes it); each delivery's log line names the envelope and
    the attempt, and the app token appears in no log line."""
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path, socket_mode=True) as app:
            with logs.capture(app.settings) as captured:
                slack.socket.hold_acks()
                root, envelope = await _mention(slack)
                async with asyncio.timeout(WITHIN):
                    await slack.socket.wait_held_ack(envelope)
                slack.socket.release_acks()
                assert slack.socket.redeliver_unacked() == [envelope]
                await _acked(slack, envelope)
                assert envelope.retry_attempt == 1
                await app.idle()
        assert len(_replies(slack, root)) == 1
        lines = captured.lines("delivery")
        assert [(line["outcome"], line.get("retry_attempt")) for line in lines] == [
            ("claimed", None),
            ("duplicate", 1),
        ]
        assert {line["envelope_id"] for line in lines} == {envelope.envelope_id}
        assert slack.app_token not in captured.text


async def test_the_ack_waits_for_the_claim_and_a_store_failure_is_not_acked(tmp_path: Path) -> None:
    """A delivery the store could not claim (5xx) is not acknowledged, so Slack sends it again; once
    the store is back the retry is claimed, acknowledged and answered."""
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path, socket_mode=True) as app:
            assert app.service is not None
            store = app.service.store
            real_claim = store.claim_message
            failing = asyncio.Event()

            async def broken(**kwargs: Any) -> Any:
                from storage import StoreError

                failing.set()
                raise StoreError("database is down")

            store.claim_message = broken  # type: ignore[method-assign]
            root, envelope = await _mention(slack)
            async with asyncio.timeout(WITHIN):
                await failing.wait()
            await app.idle()
            assert not envelope.acked.is_set()
            store.claim_message = real_claim  # type: ignore[method-assign]
            slack.socket.redeliver_unacked()
            await _acked(slack, envelope)
            await app.idle()
        assert len(_replies(slack, root)) == 1


async def test_stopping_lets_a_delivery_being_claimed_finish_and_be_acked(tmp_path: Path) -> None:
    """A shutdown that begins while a delivery is being claimed stops taking new envelopes, lets
    the claim finish and sends its ack before the socket closes, so Slack has nothing to resend."""
    async with FakeSlack() as slack:
        _workspace(slack)
        app = AppHarness(slack, model=echo_model(), data_dir=tmp_path, socket_mode=True)
        await app.start()
        assert app.service is not None
        store = app.service.store
        real_claim = store.claim_message
        claiming, go_on = asyncio.Event(), asyncio.Event()

        async def slow_claim(**kwargs: Any) -> Any:
            claiming.set()
            await go_on.wait()
            return await real_claim(**kwargs)

        store.claim_message = slow_claim  # type: ignore[method-assign]
        _, envelope = await _mention(slack)
        async with asyncio.timeout(WITHIN):
            await claiming.wait()
        stopping = asyncio.create_task(app.stop())
        await asyncio.sleep(0.1)  # the stop is under way, waiting for the claim
        assert not stopping.done()
        go_on.set()
        async with asyncio.timeout(WITHIN):
            await stopping
        assert envelope.acked.is_set() and envelope.retry_attempt == 0
        assert slack.socket.connections == []


async def test_disconnects_and_a_dropped_socket_are_survived(tmp_path: Path) -> None:
    """Slack's disconnect (refresh_requested, then warning) and a socket cut without a close frame
    each lead to a new connection; a mention sent while the app reconnects is answered once."""
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path, socket_mode=True) as app:
            roots = []
            for opened, way in enumerate(("refresh_requested", "warning", "drop"), start=2):
                if way == "drop":
                    slack.socket.drop()
                else:
                    await slack.socket.disconnect(way)
                root, envelope = await _mention(slack, f"<@UBOT> after {way}")
                roots.append(root)
                async with asyncio.timeout(WITHIN):
                    await slack.socket.wait_connections(1, opened=opened)
                await _acked(slack, envelope)
            await app.idle()
        assert [len(_replies(slack, root)) for root in roots] == [1, 1, 1]
        assert slack.count("apps.connections.open") == 4


async def test_http_deliveries_are_refused_in_socket_mode_unless_both_are_configured(tmp_path: Path) -> None:
    """In Socket Mode POST /slack/events answers 404 naming SLACK_HTTP_EVENTS, while /healthz and
    /readyz still serve; with SLACK_HTTP_EVENTS=true and a signing secret both transports deliver."""
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path, socket_mode=True) as app:
            root = slack.add_message("C1", "<@UBOT> over http", user="U1")
            refused = await app.deliver(events.app_mention("C1", "U1", "<@UBOT> over http", root))
            assert refused.status == 404 and await refused.text() == HTTP_EVENTS_OFF
            assert (await app.get("/healthz")).status == 200
            ready = await app.get("/readyz")
            assert ready.status == 200 and (await ready.json())["socket_mode"] is True
            await app.idle()
            assert _replies(slack, root) == []
        both: dict[str, Any] = {"slack_http_events": True, "slack_signing_secret": SIGNING_SECRET}
        data = tmp_path / "both"
        async with AppHarness(slack, model=echo_model(), data_dir=data, socket_mode=True, **both) as app:
            http_root = slack.add_message("C1", "<@UBOT> by http", user="U1")
            sent = await app.deliver(events.app_mention("C1", "U1", "<@UBOT> by http", http_root))
            assert sent.status == 200
            socket_root, envelope = await _mention(slack, "<@UBOT> by socket")
            await _acked(slack, envelope)
            await app.idle()
        assert len(_replies(slack, http_root)) == 1 and len(_replies(slack, socket_root)) == 1


def _react_then_report(turn: Turn) -> list[Any]:
    """Asks to react to the person's message (a gated call), then replies with the call's outcome."""
    handle = re.search(r'"message": "(msg_[A-Za-z0-9_-]+)"', turn.prompt or "")
    if handle is not None:
        return [call("channel_react", message=handle.group(1), emoji="tada")]
    reacted = [r for name, r in turn.results if name == "channel_react"]
    if reacted:
        return [call("channel_reply", text="outcome: " + ("ok" if "error" not in reacted[0] else "refused"))]
    return [""]


async def test_an_approval_click_over_the_socket_runs_the_call(tmp_path: Path) -> None:
    """Interactivity over the socket: the requester's click on an approval card arrives as an
    interactive envelope, is acknowledged, and the gated call runs once."""
    agent = tmp_path / "agent.toml"
    agent.write_text('approval = ["channel_react"]\n', encoding="utf-8")
    model = scripted(_react_then_report)
    async with FakeSlack() as slack:
        _workspace(slack)
        gated: dict[str, Any] = {"agent_file": agent, "socket_mode": True}
        async with AppHarness(slack, model=model, data_dir=tmp_path, **gated) as app:
            root, envelope = await _mention(slack, "<@UBOT> please react")
            await _acked(slack, envelope)
            await app.idle()
            [card] = [m for m in _replies(slack, root) if any(b["type"] == "actions" for b in m["blocks"])]
            actions = next(b for b in card["blocks"] if b["type"] == "actions")
            value = next(e["value"] for e in actions["elements"] if e["action_id"] == APPROVE)
            click = events.block_actions(
                channel="C1", user="U1", message_ts=card["ts"], thread_ts=root, action_id=APPROVE, value=value
            )
            clicked = events.over_socket(slack, click)
            assert clicked.type == "interactive"
            await _acked(slack, clicked)
            assert app.service is not None and app.service.approvals is not None
            await app.idle()
            await app.service.approvals.idle()
            await app.idle()
        assert slack.count("reactions.add") == 1
        outcomes = [m["text"] for m in _replies(slack, root) if m["text"].startswith("outcome")]
        assert outcomes == ["outcome: ok"]


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        ("xoxb-1-2-abc", "SLACK_APP_TOKEN must start with xapp- — this looks like the bot token (xoxb-)"),
        ("0123456789abcdef0123456789abcdef", "this looks like a signing secret"),
        ("xapp-1-A1-1-revoked", "SLACK_APP_TOKEN is invalid or revoked"),
    ],
)
async def test_a_bad_app_token_stops_start_with_one_line(tmp_path: Path, token: str, expected: str) -> None:
    """A wrong-shaped app token is refused before any network call, a revoked one by
    apps.connections.open; either way one line names SLACK_APP_TOKEN and what to do."""
    async with FakeSlack() as slack:
        settings = settings_for(slack, tmp_path, slack_app_token=token, slack_signing_secret="")
        with pytest.raises(StartupError) as refused:
            await Service.create(settings, model=echo_model())
        assert expected in str(refused.value) and "\n" not in str(refused.value)
        calls = [call.method for call in slack.calls]
        assert calls == ([] if token.startswith(("xoxb", "0")) else ["apps.connections.open"])


@pytest.mark.process
def test_serve_with_a_bot_token_as_app_token_prints_one_line(tmp_path: Path) -> None:
    """`serve` with the bot token pasted into SLACK_APP_TOKEN (and no signing secret, which Socket
    Mode does not need) exits 2 with exactly one line naming what was pasted, no traceback."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "SLACK_BOT_TOKEN": "xoxb-1111-2222-bot",
        "SLACK_APP_TOKEN": "xoxb-1111-2222-bot",
        "SLACK_API_URL": "http://127.0.0.1:9/api/",  # never called: the shape is checked first
        "MODEL": "openai-chat:gpt-4o-mini",
        "OPENAI_API_KEY": "sk-test-0123456789abcdef",
    }
    serve = [sys.executable, "-m", "app", "serve"]
    proc = subprocess.run(serve, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 2
    assert proc.stderr == (
        "threadbound: cannot start: SLACK_APP_TOKEN must start with xapp- — this looks like the bot token "
        "(xoxb-): copy the app-level token from Basic Information\n"
    )


async def test_the_playground_keeps_http_and_names_the_app_token_it_ignores(tmp_path: Path) -> None:
    """The playground delivers over signed HTTP: a SLACK_APP_TOKEN in the environment is cleared
    for its app and named among the settings it ignores."""
    async with FakeSlack() as slack:
        settings = settings_for(slack, tmp_path, slack_app_token="xapp-1-A1-1-real")
        assert "SLACK_APP_TOKEN" in ignored_settings(settings)
        local = playground_settings(settings, slack, "secret")
        assert not local.socket_mode and local.http_events


async def test_http_events_off_without_an_app_token_is_refused(tmp_path: Path) -> None:
    """SLACK_HTTP_EVENTS=false without SLACK_APP_TOKEN would leave Slack no way in: refused at start."""
    async with FakeSlack() as slack:
        settings = settings_for(slack, tmp_path, slack_http_events=False)
        with pytest.raises(StartupError, match="SLACK_HTTP_EVENTS=false without SLACK_APP_TOKEN"):
            await Service.create(settings, model=echo_model())


# -- several connections, and a crash between claim and ack -----------------------------------------


async def test_two_instances_each_with_a_connection_answer_every_mention_once(tmp_path: Path) -> None:
    """Two instances on one Postgres, one socket each: Slack spreads the envelopes over both, the
    app_mention and message envelopes of one message land on different sockets, and every message
    is answered exactly once."""
    async with fresh_schema("tb_socket") as pg:
        url = pg.url
        async with FakeSlack() as slack:
            _workspace(slack)
            shared: dict[str, Any] = {"socket_mode": True, "database_url": url}
            one, two = (AppHarness(slack, model=echo_model(), data_dir=tmp_path / n, **shared) for n in "ab")
            async with one, two:
                assert len(slack.socket.connections) == 2
                sent: list[tuple[str, list[Envelope]]] = []
                for n in range(3):
                    text = f"<@UBOT> question {n}"
                    root = slack.add_message("C1", text, user="U1")
                    pair = [
                        events.app_mention("C1", "U1", text, root),
                        events.message("C1", "U1", text, root),
                    ]
                    sent.append((root, [events.over_socket(slack, body) for body in pair]))
                for _, envelopes in sent:
                    for envelope in envelopes:
                        await _acked(slack, envelope)
                # Either instance may run a conversation (the other's start-up sweep, or its look
                # at the inbox after a lease it held): wait for every answer, then for both to settle.
                await eventually(lambda: all(_replies(slack, root) for root, _ in sent))
                await one.idle()
                await two.idle()
                await one.idle()
            used = {envelope.sent_on[0] for _, envelopes in sent for envelope in envelopes}
            assert len(used) == 2
            assert [len(_replies(slack, root)) for root, _ in sent] == [1, 1, 1]


@pytest.mark.process
async def test_a_crash_between_claim_and_ack_is_answered_once(tmp_path: Path) -> None:
    """`serve` in Socket Mode is killed (SIGKILL) after the claim committed but before Slack got the
    ack (the emulator holds it, as if lost): Slack redelivers the envelope to the restarted process,
    which acknowledges the duplicate and answers the message once."""
    model = StuckFirst()
    async with FakeSlack() as slack, FakeOpenAI(model) as llm:
        _workspace(slack)
        env = {
            "SLACK_BOT_TOKEN": slack.token,
            "SLACK_APP_TOKEN": slack.app_token,
            "SLACK_API_URL": slack.api_url,
            "DATA_DIR": str(tmp_path / "data"),
            "MODEL": "openai-chat:fake",
            "OPENAI_BASE_URL": llm.base_url,
            "OPENAI_API_KEY": "x",
            "LEASE_TTL": "600",  # an answer within the test's bound cannot come from lease expiry
            "SWEEP_INTERVAL": "3600",
            "PROGRESS": "off",
        }
        first = ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "first.log")
        await first.start()
        try:
            async with asyncio.timeout(30):
                await slack.socket.wait_connections(1, opened=1)
            slack.socket.hold_acks()
            root, envelope = await _mention(slack, "<@UBOT> are you there")
            async with asyncio.timeout(30):
                await slack.socket.wait_held_ack(envelope)  # sent only once the claim committed
                await model.first_request.wait()
        finally:
            first.kill()
            await first.wait()
        slack.socket.release_acks()
        second = ServerProcess(env, cwd=tmp_path, log_path=tmp_path / "second.log")
        await second.start()
        try:
            await _acked(slack, envelope)
            await eventually(lambda: len(_replies(slack, root)) >= 1, within=30)
        finally:
            model.release.set()
            await second.stop()
        assert envelope.retry_attempt == 1
        [reply] = _replies(slack, root)
        assert "are you there" in reply["text"]
