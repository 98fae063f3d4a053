"""Junk at the HTTP edge: unsigned or malformed requests get a 4xx and at most a warning line, never a 500."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest

from app import logs
from tests.support import events
from tests.support.harness import SIGNING_SECRET, AppHarness
from tests.support.models import echo_model
from threadbound_emulator import FakeSlack

NESTED = "[" * 50_000 + "]" * 50_000
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def _workspace(slack: FakeSlack) -> None:
    slack.add_user("U1", "alice")
    slack.add_channel("C1", "general")


def _quiet(captured: logs.Captured) -> None:
    """No ERROR line and no traceback; at most one warning line."""
    lines = captured.lines()
    assert [line for line in lines if line["level"] in ("ERROR", "CRITICAL")] == []
    assert "Traceback" not in captured.text and "exc_info" not in captured.text
    assert len([line for line in lines if line["level"] == "WARNING"]) <= 1


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        (b"{}", {"X-Slack-Request-Timestamp": "soon", "X-Slack-Signature": "v0=00"}),
        (b"{}", {"X-Slack-Request-Timestamp": "1e3", "X-Slack-Signature": "v0=00"}),
        (b"{}", {"X-Slack-Request-Timestamp": "\u0661\u0662", "X-Slack-Signature": "v0=00"}),
        (NESTED.encode(), {"Content-Type": "application/json"}),
        (urlencode({"payload": NESTED}).encode(), FORM),
        (b"{not json", {"Content-Type": "application/json"}),
        (b"\xff\xfe", {}),
    ],
    ids=[
        "word-timestamp",
        "float-timestamp",
        "arabic-digits",
        "nested-json",
        "nested-payload",
        "bad-json",
        "bytes",
    ],
)
async def test_unsigned_junk_is_a_401_with_at_most_one_warning(
    tmp_path: Path, body: bytes, headers: dict[str, str]
) -> None:
    """An unsigned request (a non-numeric timestamp, a deeply nested JSON or form payload, bad JSON)
    is refused before its body is parsed: 401, no ERROR line, no traceback."""
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path) as app:
            with logs.capture(app.settings, level=logging.DEBUG) as captured:
                for _ in range(3):
                    assert (await app.post_raw(body, headers)).status == 401
        _quiet(captured)
        assert slack.bot_messages() == []


@pytest.mark.parametrize(
    "body",
    [NESTED, "[1]", "123", '"text"', "payload=" + NESTED, "payload=%5B1%5D", "payload=%7Bnot"],
    ids=["nested-json", "list", "number", "string", "nested-payload", "list-payload", "bad-payload"],
)
async def test_a_signed_body_that_does_not_parse_to_an_object_is_a_400(tmp_path: Path, body: str) -> None:
    """Even correctly signed, a body that is too deep, not JSON or not an object is a 400, not a 500."""
    raw = body.encode()
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path) as app:
            headers = events.sign(raw, SIGNING_SECRET)
            if body.startswith("payload="):
                headers.update(FORM)
            with logs.capture(app.settings, level=logging.DEBUG) as captured:
                assert (await app.post_raw(raw, headers)).status == 400
        _quiet(captured)


async def test_a_wrong_or_stale_signature_is_refused_before_parsing(tmp_path: Path) -> None:
    """A signature made with another secret, or a fresh one on an old timestamp, gets 401; a correct
    one on the same body is accepted (the check is on the raw bytes Slack signed)."""
    envelope = events.app_mention("C1", "U1", "<@UBOT> hi", "1.000100")
    raw = json.dumps(envelope).encode()
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path) as app:
            assert (await app.post_raw(raw, events.sign(raw, "another-secret"))).status == 401
            old = events.sign(raw, SIGNING_SECRET, timestamp=int(time.time()) - 3600)
            assert (await app.post_raw(raw, old)).status == 401
            assert (await app.post_raw(raw, events.sign(raw, SIGNING_SECRET))).status == 200
            await app.idle()


async def test_readyz_tells_callers_only_ok_or_not_and_the_log_why(tmp_path: Path) -> None:
    """With the store down /readyz is a 503 saying ``{"ok": false}`` and nothing else (no database
    host, no error text); the reason is in a log line."""
    async with FakeSlack() as slack:
        _workspace(slack)
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path) as app:
            up = await app.get("/readyz")
            assert up.status == 200 and await up.json() == {"ok": True}
            assert app.service is not None
            await app.service.store.close()
            with logs.capture(app.settings, level=logging.INFO) as captured:
                down = await app.get("/readyz")
            assert down.status == 503 and await down.json() == {"ok": False}
        assert any("store" in line["message"] for line in captured.lines())


async def test_a_client_that_hangs_up_before_its_answer_still_has_its_delivery_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slack hanging up while the 200 is written loses nothing: the claim is saved, the delivery is
    counted and its run starts (no ERROR line, no traceback), and Slack's retry is deduped."""
    from aiohttp import web

    real_write_eof = web.Response.write_eof
    hung_up: list[bool] = []

    async def hang_up_once(self: web.Response, data: bytes = b"") -> None:
        request = getattr(self, "_req", None)  # the emulator answers through web.Response too
        if not hung_up and request is not None and request.path == "/slack/events":
            hung_up.append(True)
            raise ConnectionResetError("client went away")
        await real_write_eof(self, data)

    monkeypatch.setattr(web.Response, "write_eof", hang_up_once)
    async with FakeSlack() as slack:
        _workspace(slack)
        envelope = events.app_mention("C1", "U1", "<@UBOT> hi", slack.add_message("C1", "<@UBOT> hi", "U1"))
        async with AppHarness(slack, model=echo_model(), data_dir=tmp_path) as app:
            with logs.capture(app.settings, level=logging.DEBUG) as captured:
                try:
                    await app.deliver(envelope)
                except Exception:  # the client side sees the hang-up its own way
                    pass
                assert (await app.deliver(envelope, retry_num=1)).status == 200
                await app.idle()
        assert hung_up
        outcomes = [line.get("outcome") for line in captured.lines() if "outcome" in line]
        assert outcomes[:2] == ["claimed", "duplicate"], outcomes  # both deliveries logged and counted
        assert [line for line in captured.lines() if line["level"] in ("ERROR", "CRITICAL")] == []
        assert "Traceback" not in captured.text
        assert len(slack.bot_messages()) == 1


async def test_building_the_bolt_app_does_not_walk_the_call_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bolt names an unnamed app after its caller's file through ``inspect.stack()``, which reads
    the source of every frame and maps each loaded module to its file: a tenth of a second or more
    of every start (a restart that recovers a crashed run waits for it too). The app is named."""
    import inspect

    from app.intake.http import build_bolt
    from app.settings import Settings

    def no_stack(*args: object, **kwargs: object) -> list[inspect.FrameInfo]:
        raise AssertionError("inspect.stack() called while building the Bolt app")

    monkeypatch.setattr(inspect, "stack", no_stack)
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, slack_bot_token="xoxb-1", slack_signing_secret="secret"
    )
    bolt = build_bolt(settings, ingress=object())  # type: ignore[arg-type]
    assert bolt.name == "threadbound"
