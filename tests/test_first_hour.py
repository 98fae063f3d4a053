"""The first hour, as a new user meets it: credentials of the wrong kind named before any network call,
a failed start that prints only its one line, and logs a person can read in a terminal."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.logs import configure_logging, held_until_started
from app.ops.check import run_checks
from app.settings import Settings, bot_token_problem
from threadbound_emulator import FakeSlack

GOOD = {
    "SLACK_SIGNING_SECRET": "0123456789abcdef0123456789abcdef",
    "MODEL": "openai-chat:gpt-4o-mini",
    "OPENAI_API_KEY": "sk-test-0123456789abcdef",
}


def serve(cwd: Path, **values: str) -> tuple[int, str]:
    """``python -m app serve`` with exactly ``values``: (exit code, stderr)."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(cwd),
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        **values,
    }
    proc = subprocess.run(
        [sys.executable, "-m", "app", "serve"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    return proc.returncode, proc.stderr


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.parametrize(
    ("pasted", "looks_like"),
    [
        ("0123456789abcdef0123456789abcdef", "a signing secret or client secret"),
        ("xoxp-1111-2222-3333-abcdef", "a user token (xoxp-)"),
        ("xapp-1-A111-2222-abcdef", "an app-level token (xapp-)"),
        ("sk-ant-api03-abcdef", "a model API key"),
    ],
)
def test_a_bot_token_of_the_wrong_kind_names_what_was_pasted(pasted: str, looks_like: str) -> None:
    """SLACK_BOT_TOKEN not starting with xoxb- is refused, saying what the value looks like."""
    assert bot_token_problem(pasted) == (
        f"SLACK_BOT_TOKEN must start with xoxb- — this looks like {looks_like}: copy the Bot User OAuth "
        "Token from your Slack app's OAuth & Permissions page"
    )
    assert bot_token_problem("xoxb-1111-2222-abcdef") is None


@pytest.mark.process
def test_serve_refuses_a_wrong_token_before_any_network_call(tmp_path: Path) -> None:
    """serve with a signing secret pasted as the bot token exits 2 with one line, without calling Slack
    (SLACK_API_URL points nowhere: a call would say it cannot reach Slack)."""
    code, err = serve(
        tmp_path,
        SLACK_BOT_TOKEN="fedcba9876543210fedcba9876543210",
        SLACK_API_URL="http://127.0.0.1:9/api/",
        **GOOD,
    )
    assert code == 2
    assert err.splitlines() == [
        "threadbound: cannot start: SLACK_BOT_TOKEN must start with xoxb- — this looks like a signing secret "
        "or client secret: copy the Bot User OAuth Token from your Slack app's OAuth & Permissions page"
    ]


async def test_check_refuses_a_wrong_token_without_calling_slack(tmp_path: Path) -> None:
    """`check` fails the token line for a user token and sends nothing to Slack."""
    async with FakeSlack() as slack:
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None,
            slack_bot_token="xoxp-1111-2222-3333-abcdef",
            slack_api_url=slack.api_url,
            data_dir=tmp_path,
            **{k.lower(): v for k, v in GOOD.items()},
        )
        out = io.StringIO()
        assert await run_checks(settings, model=False, out=out) == 1
        assert slack.count("auth.test") == 0
    [line] = [line for line in out.getvalue().splitlines() if "  token  " in line]
    assert line.startswith("FAIL") and "this looks like a user token (xoxp-)" in line


@pytest.mark.process
def test_a_failed_start_prints_only_its_one_line(tmp_path: Path) -> None:
    """On Heroku (an ephemeral-disk warning is logged first) with Slack unreachable, stderr is exactly the
    one `cannot start:` line: the lines logged while starting are dropped with the failed start."""
    code, err = serve(
        tmp_path,
        DYNO="web.1",
        SLACK_BOT_TOKEN="xoxb-1111-2222-first-hour",
        SLACK_API_URL="http://127.0.0.1:9/api/",
        **GOOD,
    )
    assert code == 2
    assert err.splitlines() == [
        "threadbound: cannot start: cannot reach Slack at http://127.0.0.1:9/api/: check SLACK_API_URL and "
        "the network"
    ]


def test_held_lines_are_written_once_released() -> None:
    """Start-up lines held back are written, in order, once start-up succeeded."""
    stream = io.StringIO()
    configure_logging(Settings(_env_file=None, log_format="json"), stream)  # type: ignore[call-arg]
    with held_until_started() as held:
        logging.getLogger("t").warning("first")
        logging.getLogger("t").warning("second")
        assert stream.getvalue() == ""
        held.release()
        logging.getLogger("t").warning("third")
    assert [json.loads(line)["message"] for line in stream.getvalue().splitlines()] == [
        "first",
        "second",
        "third",
    ]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("log_format", "stream_cls", "text"),
    [
        ("", _Terminal, True),
        ("", io.StringIO, False),
        ("json", _Terminal, False),
        ("text", io.StringIO, True),
    ],
)
def test_log_format_is_text_on_a_terminal_and_json_elsewhere(
    log_format: str, stream_cls: type[io.StringIO], text: bool
) -> None:
    """LOG_FORMAT=text|json chooses; unset, a terminal gets text lines and anything else JSON. Both redact
    the bot token and carry the bound fields."""
    token = "xoxb-1111-2222-redact-me"
    stream = stream_cls()
    settings = Settings(_env_file=None, log_format=log_format, slack_bot_token=token)  # type: ignore[call-arg]
    configure_logging(settings, stream)
    logging.getLogger("app.test").warning("token %s leaked", token, extra={"fields": {"task": "T1", "n": 2}})
    line = stream.getvalue().strip()
    assert token not in line
    if text:
        assert " WARNING app.test  token [redacted] leaked  task=T1 n=2" in line
    else:
        assert json.loads(line)["task"] == "T1"


def test_an_unknown_log_format_is_refused() -> None:
    """LOG_FORMAT other than json or text is one invalid-setting line."""
    with pytest.raises(ValueError, match="use json or text"):
        Settings(_env_file=None, log_format="yaml")  # type: ignore[call-arg]
