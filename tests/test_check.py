"""``python -m app check`` against FakeSlack and FakeOpenAI over real HTTP."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from app.ops.check import _Report, _secrets, run_checks
from app.settings import Settings
from tests.support import FakeOpenAI
from tests.support.harness import SIGNING_SECRET, settings_for
from threadbound_emulator import DEFAULT_SCOPES, FakeSlack

TOKEN = "xoxb-1111-2222-very-secret-token"
MODEL_KEY = "sk-fake-model-key-0123456789"


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # No ./agent.toml from the repo and no PaaS markers from the machine leak into a check.
    monkeypatch.chdir(tmp_path)
    for name in ("DYNO", "RENDER", "FLY_APP_NAME"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def llm() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(lambda request: FakeOpenAI.text("OK"), api_key=MODEL_KEY) as fake:
        yield fake


async def check(
    slack: FakeSlack, llm: FakeOpenAI, tmp_path: Path, *, run_model: bool = True, **overrides: Any
) -> tuple[int, list[str]]:
    values: dict[str, Any] = {
        "model": "openai-chat:fake",
        "openai_base_url": llm.base_url,
        "openai_api_key": MODEL_KEY,
        # check downloads nothing, so the real origin is the one a good configuration names.
        "slack_file_origins": ("https://files.slack.com",),
    }
    values.update(overrides)
    settings = settings_for(slack, tmp_path / "data", **values)
    out = io.StringIO()
    code = await run_checks(settings, model=run_model, out=out)
    text = out.getvalue()
    for secret in (TOKEN, SIGNING_SECRET, MODEL_KEY):
        assert secret not in text
    return code, text.splitlines()


def lines_of(lines: list[str], status: str, name: str) -> list[str]:
    return [line for line in lines if line.startswith(status) and f"  {name}  " in line]


async def test_good_configuration_passes(llm: FakeOpenAI, tmp_path: Path) -> None:
    """A complete install passes every check, the model with one real request."""
    async with FakeSlack(token=TOKEN) as slack:
        code, lines = await check(slack, llm, tmp_path)
    assert code == 0, lines
    checks = [line.split()[0] for line in lines if not line.startswith("INFO") and "  posture  " not in line]
    # PASS but a SKIP for agent sessions (not granted here), the SKIPs of what was not asked for.
    assert checks == ["PASS", "PASS", "SKIP"] + ["PASS"] * 3 + ["SKIP", "SKIP", "PASS"], lines
    assert lines_of(lines, "PASS", "token") and "@threadbound" in lines[0]
    assert llm.count == 1
    assert llm.requests[0]["max_completion_tokens"] <= 16


async def test_no_model_skips_the_model(llm: FakeOpenAI, tmp_path: Path) -> None:
    """--no-model makes no model request and reports the model as skipped."""
    async with FakeSlack(token=TOKEN) as slack:
        code, lines = await check(slack, llm, tmp_path, run_model=False)
    assert code == 0
    assert lines_of(lines, "SKIP", "model") == [
        "SKIP  model           openai-chat:fake configured; request skipped (--no-model)"
    ]
    assert llm.count == 0


async def test_no_model_still_fails_a_missing_key(llm: FakeOpenAI, tmp_path: Path) -> None:
    """--no-model skips only the request: a model whose key is missing still FAILs, naming the key."""
    async with FakeSlack(token=TOKEN) as slack:
        anthropic = {"model": "anthropic:claude-sonnet-4-5", "anthropic_api_key": ""}
        code, lines = await check(slack, llm, tmp_path, run_model=False, **anthropic)
    assert code == 1
    assert lines_of(lines, "FAIL", "model") == [
        "FAIL  model           ANTHROPIC_API_KEY is not set, and MODEL=anthropic:claude-sonnet-4-5 needs it: "
        "https://console.anthropic.com/settings/keys"
    ]


async def test_bad_token_fails_and_is_never_printed(llm: FakeOpenAI, tmp_path: Path) -> None:
    """A revoked token FAILs with the fix, skips the scope check, and is not echoed."""
    async with FakeSlack(token=TOKEN) as slack:
        code, lines = await check(slack, llm, tmp_path, run_model=False, slack_bot_token="xoxb-revoked-0000")
    assert code == 1
    (line,) = lines_of(lines, "FAIL", "token")
    assert "invalid or revoked" in line and "Bot User OAuth Token" in line
    assert "xoxb-revoked-0000" not in "\n".join(lines)
    assert lines_of(lines, "SKIP", "scopes")


async def test_missing_optional_scopes_warn_naming_tools(llm: FakeOpenAI, tmp_path: Path) -> None:
    """Without files:write and canvases:write the check WARNs, naming the tools they disable."""
    scopes = [s for s in DEFAULT_SCOPES if s not in ("files:write", "canvases:write")]
    async with FakeSlack(token=TOKEN, scopes=scopes) as slack:
        code, lines = await check(slack, llm, tmp_path, run_model=False)
    assert code == 0
    warned = lines_of(lines, "WARN", "scopes")
    assert any("files:write" in w and "channel_attach" in w for w in warned), lines
    assert any("canvases:write" in w and "channel_post_document" in w for w in warned), lines


@pytest.mark.parametrize(
    ("agent", "mode", "status", "says"),
    [
        (False, "auto", "SKIP", "manifest --agent-view"),
        (True, "auto", "PASS", "assistant:write granted"),
        (True, "off", "SKIP", "AGENT_SESSIONS=off"),
    ],
)
async def test_agent_sessions_are_reported_with_what_turns_them_on(
    llm: FakeOpenAI, tmp_path: Path, agent: bool, mode: str, status: str, says: str
) -> None:
    """One line says whether agent sessions (Slack's Stop) are on: declared an agent
    (``assistant:write``) and not turned off, else what to do."""
    scopes = [*DEFAULT_SCOPES, *(["assistant:write"] if agent else [])]
    async with FakeSlack(token=TOKEN, scopes=scopes) as slack:
        code, lines = await check(slack, llm, tmp_path, run_model=False, agent_sessions=mode)
    assert code == 0
    (line,) = lines_of(lines, status, "agent sessions")
    assert says in line, lines


async def test_missing_chat_write_fails(llm: FakeOpenAI, tmp_path: Path) -> None:
    """Without chat:write nothing can be answered: FAIL, naming the scope and the tools it takes."""
    scopes = [s for s in DEFAULT_SCOPES if s != "chat:write"]
    async with FakeSlack(token=TOKEN, scopes=scopes) as slack:
        code, lines = await check(slack, llm, tmp_path, run_model=False)
    assert code == 1
    (line,) = lines_of(lines, "FAIL", "scopes")
    assert "chat:write" in line and "channel_edit" in line and "reinstall" in line


async def test_empty_signing_secret_fails(llm: FakeOpenAI, tmp_path: Path) -> None:
    """An unset signing secret FAILs with where to find it."""
    async with FakeSlack(token=TOKEN) as slack:
        code, lines = await check(slack, llm, tmp_path, run_model=False, slack_signing_secret="")
    assert code == 1
    assert "App Credentials" in lines_of(lines, "FAIL", "signing secret")[0]


async def test_unreachable_database_fails(llm: FakeOpenAI, tmp_path: Path) -> None:
    """A Postgres nobody listens on FAILs with the driver's error, never the URL's password."""
    url = "postgresql://postgres:db-password-42@127.0.0.1:1/x"
    async with FakeSlack(token=TOKEN) as slack:
        code, lines = await check(slack, llm, tmp_path, run_model=False, database_url=url)
    assert code == 1
    (line,) = lines_of(lines, "FAIL", "database")
    assert "127.0.0.1:1" in line and "db-password-42" not in "\n".join(lines)


@pytest.mark.parametrize(
    ("origins", "status"),
    [
        (("http://127.0.0.1:9999",), "WARN"),
        (("https://files.slack.com/some/path",), "FAIL"),
        (("not an origin",), "FAIL"),
        (("http://files.example.com",), "FAIL"),
    ],
)
async def test_file_origins(llm: FakeOpenAI, tmp_path: Path, origins: tuple[str, ...], status: str) -> None:
    """Each SLACK_FILE_ORIGINS entry must be a bare https origin; local http only WARNs."""
    async with FakeSlack(token=TOKEN) as slack:
        code, lines = await check(slack, llm, tmp_path, run_model=False, slack_file_origins=origins)
    assert lines_of(lines, status, "file origins"), lines
    assert code == (1 if status == "FAIL" else 0)


async def test_agent_file_selecting_unsupported_tools_fails(llm: FakeOpenAI, tmp_path: Path) -> None:
    """An agent file naming an unknown tool, or one the scopes do not allow, FAILs per tool."""
    agent = tmp_path / "agent.toml"
    agent.write_text('tools = ["channel_reply", "channel_attach", "channel_teleport"]\n')
    scopes = [s for s in DEFAULT_SCOPES if s != "files:write"]
    async with FakeSlack(token=TOKEN, scopes=scopes) as slack:
        code, lines = await check(slack, llm, tmp_path, run_model=False, agent_file=agent)
    assert code == 1
    failed = lines_of(lines, "FAIL", "agent file")
    assert any("channel_attach" in f and "files:write" in f for f in failed), lines
    assert any("channel_teleport" in f for f in failed), lines


async def test_model_unset_fails(llm: FakeOpenAI, tmp_path: Path) -> None:
    """No MODEL (and no model in an agent file) FAILs with an example value."""
    async with FakeSlack(token=TOKEN) as slack:
        code, lines = await check(slack, llm, tmp_path, model="")
    assert code == 1
    assert "MODEL is not set" in lines_of(lines, "FAIL", "model")[0]


async def test_model_rejecting_the_key_fails_without_echoing_it(llm: FakeOpenAI, tmp_path: Path) -> None:
    """A model server refusing the key FAILs with a short error that does not contain the key."""
    wrong = "sk-wrong-key-9876543210"
    async with FakeSlack(token=TOKEN) as slack:
        code, lines = await check(slack, llm, tmp_path, openai_api_key=wrong)
    assert code == 1
    (line,) = lines_of(lines, "FAIL", "model")
    assert "openai-chat:fake" in line and wrong not in "\n".join(lines)


async def test_a_short_key_does_not_mask_ordinary_text(tmp_path: Path) -> None:
    """A placeholder key equal to part of the model name ("fake") leaves `openai-chat:fake` readable."""
    async with FakeOpenAI(lambda request: FakeOpenAI.text("OK"), api_key="fake") as local:
        async with FakeSlack(token=TOKEN) as slack:
            code, lines = await check(slack, local, tmp_path, openai_api_key="fake")
    assert code == 0, lines
    assert lines_of(lines, "PASS", "model") == ["PASS  model           openai-chat:fake answered"]


def test_report_masks_long_secrets_and_key_shapes_only() -> None:
    """Configured secrets of 12+ characters and anything shaped like a Slack token or API key become ***."""
    out = io.StringIO()
    report = _Report(out, ["a-long-configured-secret"])
    report.line(
        "FAIL",
        "model",
        "gpt-4o said a-long-configured-secret, xoxp-123456-abcdef, sk-proj-abcdefghij0123456789",
    )
    report.line("PASS", "model", "openai-chat:gpt-4o, sk-short, xoxb-1")
    assert out.getvalue().splitlines() == [
        "FAIL  model           gpt-4o said ***, ***, ***",
        "PASS  model           openai-chat:gpt-4o, sk-short, xoxb-1",
    ]
    assert _secrets(settings_for_keys("gpt-4o", "sk-a-real-looking-key-0123")) == [
        "sk-a-real-looking-key-0123"
    ]


def settings_for_keys(openai: str, anthropic: str) -> Settings:
    return Settings(_env_file=None, openai_api_key=openai, anthropic_api_key=anthropic)  # type: ignore[call-arg]


async def test_missing_skills_dir_fails(llm: FakeOpenAI, tmp_path: Path) -> None:
    """SKILLS_DIR naming no directory is a FAIL line saying what to do."""
    async with FakeSlack(token=TOKEN) as slack:
        code, lines = await check(slack, llm, tmp_path, run_model=False, skills_dir=tmp_path / "skils")
    assert code == 1
    assert lines_of(lines, "FAIL", "skills") == [
        f"FAIL  skills          SKILLS_DIR {tmp_path / 'skils'} is not a directory: "
        "create it or unset SKILLS_DIR"
    ]


async def test_broken_agent_file_fails_naming_the_line(llm: FakeOpenAI, tmp_path: Path) -> None:
    """A TOML error in the agent file is a FAIL line naming the file and the line."""
    agent = tmp_path / "agent.toml"
    agent.write_text('model = "openai-chat:fake"\ntools = [\n')
    async with FakeSlack(token=TOKEN) as slack:
        code, lines = await check(slack, llm, tmp_path, run_model=False, agent_file=agent)
    assert code == 1
    (line,) = lines_of(lines, "FAIL", "agent file")
    assert line.endswith(f"{agent} is not valid TOML: Invalid value (at the end, line 2)"), line


async def test_socket_mode_checks_the_app_token_and_needs_no_signing_secret(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    """With SLACK_APP_TOKEN, check opens nothing but asks apps.connections.open whether the token
    works (PASS), and the signing secret is not needed (SKIP); everything else still PASSes."""
    async with FakeSlack(token=TOKEN) as slack:
        code, lines = await check(
            slack, llm, tmp_path, slack_app_token=slack.app_token, slack_signing_secret="", run_model=False
        )
        assert slack.count("apps.connections.open") == 1 and slack.socket.opened == 0
    assert code == 0, lines
    assert lines_of(lines, "PASS", "app token") and lines_of(lines, "SKIP", "signing secret")


@pytest.mark.parametrize(
    ("token", "expected", "calls"),
    [
        ("xoxb-1111-2222-other", "SLACK_APP_TOKEN must start with xapp- — this looks like the bot token", 0),
        ("xapp-1-A1-1-revoked-token", "SLACK_APP_TOKEN is invalid or revoked", 1),
    ],
)
async def test_a_bad_app_token_fails_the_check(
    llm: FakeOpenAI, tmp_path: Path, token: str, expected: str, calls: int
) -> None:
    """A wrong-shaped app token FAILs before any call; one Slack refuses FAILs naming SLACK_APP_TOKEN."""
    async with FakeSlack(token=TOKEN) as slack:
        code, lines = await check(slack, llm, tmp_path, slack_app_token=token, run_model=False)
        assert slack.count("apps.connections.open") == calls
    assert code == 1
    [line] = lines_of(lines, "FAIL", "app token")
    assert expected in line and token not in line


def test_the_agent_file_and_skills_folder_default_to_the_conventional_names_when_present(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``./agent.toml`` (a file) and ``./skills`` (a folder) are used when present and nothing else is
    set; a setting wins; a folder named agent.toml or a file named skills is not taken."""
    monkeypatch.delenv("AGENT_FILE", raising=False)
    monkeypatch.delenv("SKILLS_DIR", raising=False)
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    assert settings.resolved_agent_file is None and settings.resolved_skills_dir is None
    (tmp_path / "agent.toml").mkdir()
    (tmp_path / "skills").write_text("")
    assert settings.resolved_agent_file is None and settings.resolved_skills_dir is None
    (tmp_path / "agent.toml").rmdir()
    (tmp_path / "skills").unlink()
    (tmp_path / "agent.toml").write_text("")
    (tmp_path / "skills").mkdir()
    assert settings.resolved_agent_file == Path("agent.toml")
    assert settings.resolved_skills_dir == Path("skills")
    chosen = Settings(_env_file=None, agent_file=tmp_path / "a.toml", skills_dir=tmp_path / "s")  # type: ignore[call-arg]
    assert chosen.resolved_agent_file == tmp_path / "a.toml" and chosen.resolved_skills_dir == tmp_path / "s"


async def test_check_prints_each_profile_and_the_production_posture(llm: FakeOpenAI, tmp_path: Path) -> None:
    """One INFO line per profile with its effective policy, a FAIL for @groups without
    usergroups:read, and posture lines that WARN for what a production install should close."""
    agent = tmp_path / "agent.toml"
    agent.write_text(
        'approval = ["channel_retract"]\n'
        '[profiles.support]\nchannels = ["#support", "C9"]\ntools = ["channel_reply"]\n'
        'users = ["@support-team"]\nguests = true\nuser_daily_token_budget = 5000\n',
        encoding="utf-8",
    )
    async with FakeSlack(token=TOKEN) as slack:
        code, lines = await check(slack, llm, tmp_path, agent_file=agent, metrics_token="m" * 20)
    assert code == 1, lines  # the group needs a scope this install lacks
    [default, support] = lines_of(lines, "INFO", "profile")
    assert "default (top-level keys" in default and "tools all" in default
    assert "approval channel_retract decided by the requester" in default
    assert "guests not served" in default and "users everyone" in default
    assert "support (#support, C9)" in support and "tools channel_reply" in support
    assert "users @support-team" in support and "guests served" in support
    assert "per person 5,000 tokens/day" in support
    assert "usergroups:read" in lines_of(lines, "FAIL", "profile")[0]
    posture = {
        line.split("  posture  ")[1].split(":")[0].strip(): line.split()[0]
        for line in lines
        if "  posture  " in line
    }
    assert posture == {
        "access": "WARN",  # the default profile serves everyone
        "guests": "WARN",
        "externals": "PASS",
        "approvals": "PASS",
        "budgets": "WARN",
        "/metrics": "PASS",
        "previews": "PASS",  # LOG_PREVIEWS is off by default
    }, lines
