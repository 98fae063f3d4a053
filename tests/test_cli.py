"""The command line: every start-up mistake ends in one line naming the setting or file and what to do,
with a non-zero exit and no traceback. Most tests run ``python -m app`` as a real process."""

from __future__ import annotations

import argparse
import asyncio
import io
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.__main__ import _parser, main
from app.settings import Settings, missing_settings
from tests.support import events
from tests.support.fake_model import FakeOpenAI
from tests.support.harness import AppHarness
from tests.support.models import echo_model
from threadbound_emulator import FakeSlack

TOKEN = "xoxb-1111-2222-cli-test-token"
#: Everything `serve` requires, so a test can break exactly one thing.
GOOD = {
    "SLACK_BOT_TOKEN": TOKEN,
    "SLACK_SIGNING_SECRET": "test-signing-secret",
    "MODEL": "openai-chat:gpt-4o-mini",
    "OPENAI_API_KEY": "sk-test-0123456789abcdef",
}
ADVICE = "Set {} in the environment or in ./.env (NAME=value lines), then run `python -m app check`."
DEMO = "No Slack app yet? `python -m app playground --demo` tries it in a browser, without Slack or a key"


def clean_env(cwd: Path, **values: str) -> dict[str, str]:
    """Only PATH and the given settings: the developer's own SLACK_* or MODEL never leak in. PYTHONPATH
    (set by conftest.py) keeps the process on this checkout's code, whatever the venv's install points at."""
    path = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}
    return {"PATH": os.environ["PATH"], "HOME": str(cwd), **path, **values}


def app(cwd: Path, *args: str, **values: str) -> tuple[int, str, str]:
    """Run ``python -m app ARGS`` in ``cwd`` with exactly ``values`` as the environment."""
    proc = subprocess.run(
        [sys.executable, "-m", "app", *args],
        cwd=cwd,
        env=clean_env(cwd, **values),
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """main() configures the root logger for the whole process; put it back for the next test."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    """In-process ``main(args)`` in ``tmp_path`` with exactly the given settings; returns stderr of an exit 2.

    Cheaper than a process, for errors whose wording is the point; the process tests pin exit and stderr."""

    def run(*args: str, **values: str) -> str:
        monkeypatch.chdir(tmp_path)
        for name in Settings.model_fields:
            monkeypatch.delenv(name.upper(), raising=False)
        for name, value in values.items():
            monkeypatch.setenv(name, value)
        err = io.StringIO()
        monkeypatch.setattr(sys, "stderr", err)
        assert main(list(args)) == 2, err.getvalue()
        return err.getvalue()

    return run


def refused(cwd: Path, *args: str, **values: str) -> str:
    """stderr of a run that must exit 2 without a traceback."""
    code, _, err = app(cwd, *args, **values)
    assert "Traceback" not in err, err
    assert code == 2, err
    return err


# -- required settings ---------------------------------------------------------------------------


@pytest.mark.process
def test_serve_reports_every_missing_setting_at_once(tmp_path: Path) -> None:
    """With nothing set, serve lists all three required settings with where to get each, then the advice."""
    assert refused(tmp_path, "serve").splitlines() == [
        "threadbound: cannot start: 3 required settings are not set:",
        "  SLACK_BOT_TOKEN       the Bot User OAuth Token (xoxb-…) "
        "on your Slack app's OAuth & Permissions page",
        "  SLACK_SIGNING_SECRET  the Signing Secret "
        "under your Slack app's Basic Information → App Credentials",
        "  MODEL                 e.g. openai-chat:gpt-4o-mini or anthropic:claude-sonnet-4-5 "
        "(or `model` in agent.toml)",
        ADVICE.format("them"),
        DEMO,
    ]


@pytest.mark.process
@pytest.mark.parametrize("command", ["serve", "run"])
def test_missing_settings_are_reported_before_the_service_is_imported(tmp_path: Path, command: str) -> None:
    """A missing setting is refused before pydantic-ai, MCP or Bolt are imported, in the same words."""
    argv = [command] if command == "serve" else [command, "--channel", "C1", "hi"]
    script = (
        "import sys\n"
        "from app.__main__ import main\n"
        f"code = main({argv!r})\n"
        "print([m for m in ('app.service', 'pydantic_ai', 'fastmcp', 'slack_bolt') if m in sys.modules])\n"
        "sys.exit(code)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=clean_env(tmp_path, SLACK_SIGNING_SECRET="s", MODEL="openai-chat:gpt-4o-mini"),
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert proc.returncode == 2 and proc.stdout == "[]\n", proc.stderr
    assert proc.stderr.splitlines()[:2] == [
        "threadbound: cannot start: 2 required settings are not set:",
        "  SLACK_BOT_TOKEN  the Bot User OAuth Token (xoxb-…) on your Slack app's OAuth & Permissions page",
    ]


def test_run_needs_no_signing_secret(here: Callable[..., str]) -> None:
    """`run` serves no webhook, so with nothing set it asks only for the token and the model."""
    assert here("run", "--channel", "C1", "hi").splitlines() == [
        "threadbound: cannot start: 2 required settings are not set:",
        "  SLACK_BOT_TOKEN  the Bot User OAuth Token (xoxb-…) on your Slack app's OAuth & Permissions page",
        "  MODEL            e.g. openai-chat:gpt-4o-mini or anthropic:claude-sonnet-4-5 "
        "(or `model` in agent.toml)",
        ADVICE.format("them"),
        DEMO,
    ]


@pytest.mark.process
def test_anthropic_model_without_key_is_refused_by_serve(tmp_path: Path) -> None:
    """MODEL=anthropic:… without ANTHROPIC_API_KEY names the key and where to get it, no traceback."""
    values = {**GOOD, "MODEL": "anthropic:claude-sonnet-4-5"}
    assert refused(tmp_path, "serve", **values).splitlines() == [
        "threadbound: cannot start: 1 required setting is not set:",
        "  ANTHROPIC_API_KEY  https://console.anthropic.com/settings/keys",
        ADVICE.format("it"),
    ]


@pytest.mark.process
def test_anthropic_model_without_key_fails_one_check_line(tmp_path: Path) -> None:
    """`check` reports the missing Anthropic key as one FAIL line and exits 1, no traceback."""
    values = {"MODEL": "anthropic:claude-sonnet-4-5", "DATA_DIR": str(tmp_path / "data")}
    code, out, err = app(tmp_path, "check", **values)
    assert "Traceback" not in err and code == 1
    assert (
        "FAIL  model           ANTHROPIC_API_KEY is not set, and MODEL=anthropic:claude-sonnet-4-5 needs it: "
        "https://console.anthropic.com/settings/keys"
    ) in out.splitlines()


@pytest.mark.process
def test_openai_model_without_key_is_refused_unless_a_base_url_is_set(tmp_path: Path) -> None:
    """An OpenAI model needs OPENAI_API_KEY; only a custom OPENAI_BASE_URL (a local server) may go without."""
    values = {k: v for k, v in GOOD.items() if k != "OPENAI_API_KEY"}
    assert refused(tmp_path, "serve", **values).splitlines()[1] == (
        "  OPENAI_API_KEY  https://platform.openai.com/api-keys "
        "(only a custom OPENAI_BASE_URL may go without)"
    )
    local = Settings(_env_file=None, model="openai-chat:qwen", openai_base_url="http://127.0.0.1:8000/v1")  # type: ignore[call-arg]
    assert missing_settings(local, local.model) == ["SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET"]
    hosted = Settings(_env_file=None, model="openai:gpt-4o")  # type: ignore[call-arg]
    assert missing_settings(hosted, hosted.model)[-1] == "OPENAI_API_KEY"


# -- invalid values --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "line"),
    [
        ("LOG_LEVEL=LOUD", "LOG_LEVEL=LOUD is invalid: use one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
        ("MAX_CONCURRENT_RUNS=0", "MAX_CONCURRENT_RUNS=0 is invalid: must be at least 1"),
        ("RUN_TIMEOUT=-1", "RUN_TIMEOUT=-1 is invalid: must be greater than 0"),
        (
            "CLAIM_RETENTION_DAYS=0",
            "CLAIM_RETENTION_DAYS=0 is invalid: must be at least 1 hour (0.042 days), "
            "since Slack retries a delivery for minutes",
        ),
        ("PORT=http", "PORT=http is invalid: must be a whole number"),
    ],
)
def test_an_invalid_setting_is_one_line(here: Callable[..., str], setting: str, line: str) -> None:
    """A value out of range or of the wrong kind is one line naming the variable and the rule, exit 2."""
    name, _, value = setting.partition("=")
    assert here("serve", **{**GOOD, name: value}) == f"threadbound: {line}\n"


@pytest.mark.process
def test_an_invalid_log_level_ends_the_process_without_a_traceback(tmp_path: Path) -> None:
    """LOG_LEVEL=LOUD (once a ValueError traceback from logging) is one line and exit 2 from the process."""
    expected = "threadbound: LOG_LEVEL=LOUD is invalid: use one of DEBUG, INFO, WARNING, ERROR, CRITICAL\n"
    assert refused(tmp_path, "serve", **GOOD, LOG_LEVEL="LOUD") == expected


@pytest.mark.process
def test_invalid_settings_are_read_from_dotenv_too(tmp_path: Path) -> None:
    """A bad value in .env is reported like one in the environment, and `check` refuses it as well."""
    (tmp_path / ".env").write_text("LOG_LEVEL=LOUD\n")
    expected = "threadbound: LOG_LEVEL=LOUD is invalid: use one of DEBUG, INFO, WARNING, ERROR, CRITICAL\n"
    assert refused(tmp_path, "check") == expected


def test_a_missing_skills_dir_is_refused(here: Callable[..., str]) -> None:
    """SKILLS_DIR naming no directory stops start-up instead of silently offering no skills."""
    err = here("serve", **GOOD, SKILLS_DIR="skils")
    assert (
        err
        == "threadbound: cannot start: SKILLS_DIR skils is not a directory: create it or unset SKILLS_DIR\n"
    )


# -- the store ---------------------------------------------------------------------------------------


def test_a_mysql_url_is_one_line_without_the_password(here: Callable[..., str]) -> None:
    """DATABASE_URL=mysql://… names the supported schemes and never echoes the URL's password."""
    err = here("serve", **GOOD, DATABASE_URL="mysql://app:hunter2pass@db/threadbound")
    assert err == (
        "threadbound: cannot start: unsupported DATABASE_URL scheme 'mysql': "
        "use sqlite:///path/to/threadbound.db or postgresql://user:password@host:5432/dbname\n"
    )


@pytest.mark.process
def test_a_data_dir_that_cannot_be_created_is_one_line(tmp_path: Path) -> None:
    """DATA_DIR where a file stands cannot hold the store: one line naming DATA_DIR, exit 2."""
    (tmp_path / "taken").write_text("a file, not a folder")
    err = refused(tmp_path, "serve", **GOOD, DATA_DIR="taken")
    assert err == (
        "threadbound: cannot start: DATA_DIR taken cannot be created (File exists): "
        "point DATA_DIR at a writable directory\n"
    )


def test_a_store_that_cannot_open_is_one_line(tmp_path: Path, here: Callable[..., str]) -> None:
    """A SQLite file that is not a database ends start-up with the reason and what to check."""
    (tmp_path / "broken.db").write_text("not a database at all, just text" * 100)
    err = here("serve", **GOOD, DATABASE_URL="sqlite:///broken.db")
    assert err == (
        "threadbound: cannot start: cannot open the store (SQLite broken.db): "
        "sqlite: file is not a database; check DATABASE_URL and DATA_DIR\n"
    )


# -- the agent file -----------------------------------------------------------------------------------


def test_broken_agent_toml_names_the_file_and_line(tmp_path: Path, here: Callable[..., str]) -> None:
    """An agent.toml with a TOML error names the file and the line, also for an error at the end."""
    (tmp_path / "agent.toml").write_text('tools = ["channel_reply"]\ninstructions =')
    err = here("serve", **GOOD)
    assert (
        err == "threadbound: cannot start: agent.toml is not valid TOML: Invalid value (at the end, line 2)\n"
    )
    (tmp_path / "agent.toml").write_text('model = "openai-chat:x"\ninstructions = "unclosed\n')
    err = here("serve", **GOOD)
    assert err == (
        "threadbound: cannot start: agent.toml is not valid TOML: "
        "Illegal character '\\n' (at line 2, column 25)\n"
    )


def test_instructions_naming_a_missing_file_are_refused(tmp_path: Path, here: Callable[..., str]) -> None:
    """instructions = "prompt.md" with no prompt.md is an error, not instructions that read "prompt.md"."""
    (tmp_path / "agent.toml").write_text('instructions = "prompt.md"\n')
    err = here("serve", **GOOD)
    assert err == (
        "threadbound: cannot start: agent.toml, line 1: instructions file prompt.md does not exist "
        "(a one-line value ending in .md or .txt is a path; write inline instructions on several lines)\n"
    )


# -- listening ---------------------------------------------------------------------------------------


@pytest.mark.process
async def test_a_port_in_use_ends_serve_quickly_with_one_line(tmp_path: Path) -> None:
    """With the port taken (HOST and PORT read from .env), serve exits 2 naming the port; it does not hang."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        (tmp_path / ".env").write_text(f"HOST=127.0.0.1\nPORT={port}\n")
        async with FakeSlack(token=TOKEN) as slack:
            env = clean_env(tmp_path, **GOOD, SLACK_API_URL=slack.api_url, DATA_DIR=str(tmp_path / "data"))
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "app", "serve", cwd=tmp_path, env=env, stderr=asyncio.subprocess.PIPE
            )
            _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert err.decode().splitlines()[-1] == (
        f"threadbound: cannot start: port {port} is already in use (127.0.0.1:{port}): "
        "stop the other server or set another PORT"
    )
    assert proc.returncode == 2 and b"Traceback" not in err


def test_host_is_read_from_dotenv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HOST in .env reaches the settings like every other variable."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HOST", raising=False)
    (tmp_path / ".env").write_text("HOST=127.0.0.1\n")
    assert Settings().host == "127.0.0.1"


async def test_bolt_does_not_warn_that_the_token_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """With SLACK_BOT_TOKEN in the environment Bolt logs no "token will be ignored" warning, and a request
    through Bolt (url_verification, an event) costs no auth.test beyond the one at start-up."""
    monkeypatch.setenv("SLACK_BOT_TOKEN", TOKEN)
    async with FakeSlack(token=TOKEN) as slack:
        with caplog.at_level(logging.DEBUG, logger="slack_bolt"):
            async with AppHarness(slack, model=echo_model(), data_dir=tmp_path) as app:
                challenge = await app.deliver(events.url_verification("abc123"))
                assert challenge.status == 200 and "abc123" in await challenge.text()
                ts = slack.add_message("C1", "<@UBOT> hi", user="U1")
                assert (await app.deliver(events.app_mention("C1", "U1", "<@UBOT> hi", ts))).status == 200
                await app.idle()
        assert slack.count("auth.test") == 1
    bolt = [r.getMessage() for r in caplog.records if r.name.startswith("slack_bolt")]
    assert [m for m in bolt if "ignored" in m or "unused" in m] == [], bolt


# -- run: which channel ---------------------------------------------------------------------------


def run_env(slack: FakeSlack, tmp_path: Path, llm_url: str = "http://127.0.0.1:9/v1") -> dict[str, str]:
    return {
        "SLACK_BOT_TOKEN": slack.token,  # and no signing secret: run serves no requests to verify
        "SLACK_API_URL": slack.api_url,
        "DATA_DIR": str(tmp_path / "data"),
        "MODEL": "openai-chat:fake",
        "OPENAI_BASE_URL": llm_url,
    }


async def run_in_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: dict[str, str], *args: str
) -> int:
    monkeypatch.chdir(tmp_path)
    for name in Settings.model_fields:
        monkeypatch.delenv(name.upper(), raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return await asyncio.to_thread(main, ["run", *args])


@pytest.mark.process
async def test_run_into_an_unknown_channel_is_one_line(tmp_path: Path) -> None:
    """`run --channel` with an ID Slack does not know exits 2 saying to check the ID; nothing is posted."""
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        proc = await asyncio.create_subprocess_exec(
            *[sys.executable, "-m", "app", "run", "--channel", "C0NOPE", "hello"],
            cwd=tmp_path,
            env=clean_env(tmp_path, **run_env(slack, tmp_path)),
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        assert slack.count("chat.postMessage") == 0
    assert err.decode() == (
        "threadbound: channel C0NOPE was not found: check the ID (C…, G… or D…, the last part of the "
        "channel's link); for a private channel, invite the bot first\n"
    )
    assert proc.returncode == 2


async def test_run_into_a_channel_without_the_bot_says_to_invite_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A public channel the bot is not in is refused before any post, naming the /invite to type."""
    async with FakeSlack() as slack:
        slack.add_channel("C2", "random", is_member=False)
        code = await run_in_process(
            monkeypatch, tmp_path, run_env(slack, tmp_path), "--channel", "#random", "hi"
        )
        assert slack.count("chat.postMessage") == 0
    assert code == 2
    assert capsys.readouterr().err == (
        "threadbound: the bot is not in #random (C2): "
        "invite it there with /invite @threadbound, then run again\n"
    )


async def test_run_with_an_unknown_channel_name_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A #name no listed channel has exits 2 saying to check the name or pass the ID."""
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        code = await run_in_process(
            monkeypatch, tmp_path, run_env(slack, tmp_path), "--channel", "#genral", "hi"
        )
    assert code == 2
    assert capsys.readouterr().err == (
        "threadbound: no public or private channel the bot is in is named #genral: check the name, "
        "or pass the channel ID (a private channel must have the bot invited first)\n"
    )


async def test_run_accepts_a_channel_name_found_on_a_later_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--channel '#releases'` is resolved through conversations.list, following its cursor past page one."""
    async with FakeSlack() as slack, FakeOpenAI() as llm:
        for n in range(250):
            slack.add_channel(f"C{n:04d}", f"team-{n}")
        slack.add_channel("C9999", "Releases")
        env = run_env(slack, tmp_path, llm.base_url)
        code = await run_in_process(monkeypatch, tmp_path, env, "--channel", "#releases", "announce it")
        assert code == 0
        assert slack.count("conversations.list") == 2
        assert len(slack.bot_messages("C9999")) == 1


async def test_run_into_a_thread_that_does_not_exist_is_one_line_before_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--thread` naming no thread in the channel exits 2 with one line, before any model request or post;
    a thread that exists is answered in."""
    async with FakeSlack() as slack, FakeOpenAI() as llm:
        slack.add_channel("C1", "general")
        root = slack.add_message("C1", "the release thread", user="U1")
        env = run_env(slack, tmp_path, llm.base_url)
        code = await run_in_process(
            monkeypatch, tmp_path, env, "--channel", "C1", "--thread", "1732900000.123456", "hi"
        )
        assert (code, llm.requests, slack.count("chat.postMessage")) == (2, [], 0)
        assert capsys.readouterr().err == (
            "threadbound: no thread 1732900000.123456 in C1: check the ts (its link ends "
            "p1732900000123456), or leave out --thread to start a new one\n"
        )
        code = await run_in_process(
            monkeypatch, tmp_path, env, "--channel", "C1", "--thread", "yesterday", "hi"
        )
        assert code == 2 and "is not a message ts" in capsys.readouterr().err
        code = await run_in_process(monkeypatch, tmp_path, env, "--channel", "C1", "--thread", root, "hi")
        assert code == 0
        [reply] = slack.bot_messages("C1")
        assert reply.get("thread_ts") == root


# -- help ------------------------------------------------------------------------------------------


def subcommands() -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


@pytest.mark.parametrize("command", sorted(subcommands()))
def test_every_subcommand_help_has_a_paragraph_and_examples(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m app COMMAND --help` describes the command in a paragraph and shows examples of it."""
    with pytest.raises(SystemExit) as exit:
        main([command, "--help"])
    assert exit.value.code == 0
    out = capsys.readouterr().out
    description = subcommands()[command].description or ""
    assert len(description.split()) >= 25, description  # a paragraph, not a label
    assert " ".join(description.split()[:6]) in " ".join(out.split())
    assert f"\nexamples:\n  threadbound {command}" in out


@pytest.mark.process
def test_top_level_help_lists_commands_and_examples(tmp_path: Path) -> None:
    """`python -m app --help` exits 0 listing every command, with examples and no settings needed."""
    code, out, err = app(tmp_path, "--help")
    assert code == 0 and err == ""
    assert all(f"\n    {command}" in out for command in subcommands())
    assert "\nexamples:\n  threadbound check" in out


# -- not hanging -----------------------------------------------------------------------------------


def test_a_store_that_never_answers_ends_start_up(
    here: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Postgres address that accepts connections and never answers ends start-up at the store
    timeout with one line, instead of hanging (the timeout is shortened for the test)."""
    from app import service as server

    monkeypatch.setattr(server, "STORE_OPEN_TIMEOUT", 0.5)
    with socket.socket() as silent:  # listens, so connecting succeeds, but nobody ever reads or writes
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        err = here("serve", **GOOD, DATABASE_URL=f"postgresql://app@127.0.0.1:{port}/threadbound")
    assert err == (
        f"threadbound: cannot start: cannot open the store (Postgres 127.0.0.1:{port}/threadbound): "
        "no answer within 0.5s; check DATABASE_URL and DATA_DIR\n"
    )


@pytest.mark.process
async def test_a_revoked_token_ends_start_up_with_one_line(tmp_path: Path) -> None:
    """A token Slack refuses at auth.test ends serve with exit 2 and what to do, not Slack's raw error."""
    async with FakeSlack(token=TOKEN) as slack:
        env = clean_env(
            tmp_path,
            **{**GOOD, "SLACK_BOT_TOKEN": "xoxb-revoked-0000"},
            SLACK_API_URL=slack.api_url,
            DATA_DIR=str(tmp_path / "data"),
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "app", "serve", cwd=tmp_path, env=env, stderr=asyncio.subprocess.PIPE
        )
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert err.decode().splitlines()[-1] == (
        "threadbound: cannot start: SLACK_BOT_TOKEN is invalid or revoked: "
        "reinstall the app and copy the Bot User OAuth Token"
    )
    assert proc.returncode == 2 and b"Traceback" not in err
