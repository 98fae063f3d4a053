"""``python -m app check``: the configuration, checked against the real services.

One line per finding: ``PASS``, ``WARN``, ``FAIL`` or ``SKIP``, the check's name,
and what was found or what to do; ``INFO`` lines state each profile's effective policy, and the
``posture`` lines summarise the production posture (``app.ops.posture``). The exit code is 1
when anything FAILed.
Secrets never reach the output: every line is scrubbed of the configured ones (of
:data:`MIN_SECRET_CHARS` or more) and of anything shaped like a Slack token or an API key.
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO
from urllib.parse import urlsplit

from app.agent.agent_file import AgentFile
from app.agent.approval_policy import approver_warnings
from app.agent.mcp.personal import PersonalServer
from app.agent.mcp.servers import McpServers, McpTool
from app.intake.socket_mode import SocketModeError, check_transport, open_connection_url
from app.settings import Settings, bot_token_problem, describe_database, signing_secret_problem
from channel.errors import ChannelError
from channel.skills import SkillLibrary
from channel.slack import SlackIdentity, fetch_identity
from channel.slack.scopes import BASE_SCOPES, FEATURE_SCOPES, features_from_scopes, missing_scopes, purpose
from channel.tools import AUTOMATIC, CATALOG
from storage import StoreError, open_store, sqlite_path

from .paas import ephemeral_disk_warning
from .posture import group_scope_line, posture_lines, profile_lines

# Seconds before a hung service counts as failed (the Postgres driver and OpenAI client have their own).
_DB_TIMEOUT = 30.0
_MODEL_TIMEOUT = 60.0
# Generous enough for a model that spends a few tokens before answering; still a trivial cost.
_MODEL_MAX_TOKENS = 16
_REINSTALL = "add it and reinstall the app (see slack-manifest.json)"
_BAD_TOKEN_CODES = ("invalid_auth", "not_authed", "token_revoked", "token_expired", "account_inactive")
_LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
# Real keys and tokens are far longer; masking a short value garbles ordinary text that happens to
# equal it (a placeholder key "ollama" and MODEL=openai-chat:ollama), and hides nothing worth hiding.
MIN_SECRET_CHARS = 12
# Anything shaped like a Slack token or an OpenAI/Anthropic key, configured or not.
_KEY_SHAPES = re.compile(
    r"(?<![A-Za-z0-9])(?:xox[abeoprs]-[A-Za-z0-9-]{6,}|xapp-[A-Za-z0-9-]{6,}|sk-[A-Za-z0-9_-]{16,})"
)


@dataclass
class _Report:
    out: TextIO
    secrets: list[str]
    failed: bool = False
    lines: list[str] = field(default_factory=list)

    def line(self, status: str, name: str, detail: str) -> None:
        for secret in self.secrets:
            detail = detail.replace(secret, "***")
        detail = _KEY_SHAPES.sub("***", detail)
        self.failed = self.failed or status == "FAIL"
        text = f"{status:<4}  {name:<14}  {detail}"
        self.lines.append(text)
        print(text, file=self.out, flush=True)


def _secrets(settings: Settings) -> list[str]:
    values = list(settings.secret_values())
    try:
        values.append(urlsplit(settings.database_url).password or "")
    except ValueError:
        pass
    # Longest first, so a secret containing another is replaced whole.
    return sorted({v for v in values if len(v) >= MIN_SECRET_CHARS}, key=len, reverse=True)


def _short(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def auth_failure(exc: ChannelError, api_url: str) -> str:
    """What a failed ``auth.test`` means for the settings, in one line (shared with start-up)."""
    code = exc.provider_code or ""
    if code in _BAD_TOKEN_CODES:
        return "SLACK_BOT_TOKEN is invalid or revoked: reinstall the app and copy the Bot User OAuth Token"
    if code == "transport":
        return f"cannot reach Slack at {api_url}: check SLACK_API_URL and the network"
    return f"auth.test failed ({code or exc.message}): check SLACK_BOT_TOKEN and SLACK_API_URL"


async def _check_token(settings: Settings, report: _Report) -> SlackIdentity | None:
    token = settings.slack_bot_token.get_secret_value()
    if not token:
        report.line("FAIL", "token", "SLACK_BOT_TOKEN is not set: copy the Bot User OAuth Token (xoxb-…)")
        return None
    shape = bot_token_problem(token)
    if shape:  # no call to Slack with a credential of the wrong kind
        report.line("FAIL", "token", shape)
        return None
    try:
        identity = await fetch_identity(token, settings.slack_api_url)
    except ChannelError as exc:
        report.line("FAIL", "token", auth_failure(exc, settings.slack_api_url))
        return None
    if not identity.bot_id:
        detail = "SLACK_BOT_TOKEN is not a bot token: use the Bot User OAuth Token (xoxb-…)"
        report.line("FAIL", "token", detail)
        return None
    team = identity.team_url or identity.team_id
    report.line("PASS", "token", f"bot @{identity.bot_name or identity.user_id} in {team}")
    return identity


def _check_agent_sessions(identity: SlackIdentity, report: _Report, mode: str) -> None:
    """One line on Slack's agent sessions (status, title, Stop): on where the install granted
    ``assistant:write`` (declared an agent: ``manifest --agent-view``), else what turns them on."""
    if mode == "off":
        report.line("SKIP", "agent sessions", "off (AGENT_SESSIONS=off): no status or Stop button")
        return
    if features_from_scopes(identity.scopes).sessions:
        detail = "on (assistant:write granted): a status and a Stop button while a run works"
        report.line("PASS", "agent sessions", detail)
        return
    detail = (
        "off (no assistant:write): no status or Stop button on conversations; declare the app an agent "
        "(manifest --agent-view) and reinstall to have them"
    )
    report.line("SKIP", "agent sessions", detail)


def _check_scopes(identity: SlackIdentity | None, report: _Report, sessions: str = "auto") -> None:
    if identity is None:
        report.line("SKIP", "scopes", "needs a valid token")
        return
    if not identity.scopes:
        report.line("WARN", "scopes", "Slack reported no granted scopes (x-oauth-scopes): not checked")
        return
    missing = missing_scopes(identity.scopes)
    if not missing:
        report.line("PASS", "scopes", f"all {len(identity.scopes)} granted scopes cover every tool")
        _check_agent_sessions(identity, report, sessions)
        return
    for scope, tools in missing.items():
        disables = f" (disables {', '.join(tools)})" if tools else ""
        if scope in BASE_SCOPES:
            detail = f"{scope} is missing: needed to {purpose(scope)}{disables}; {_REINSTALL}"
            report.line("FAIL", "scopes", detail)
        elif tools:
            report.line("WARN", "scopes", f"{scope} is missing: disables {', '.join(tools)}; {_REINSTALL}")
        else:
            report.line("WARN", "scopes", f"{scope} is missing: cannot {purpose(scope)}; {_REINSTALL}")
    _check_agent_sessions(identity, report, sessions)


async def _check_app_token(settings: Settings, report: _Report) -> None:
    """Socket Mode only: the app token's shape, then ``apps.connections.open`` (no connection is made)."""
    try:
        check_transport(settings)
        if settings.socket_mode:
            await open_connection_url(settings.slack_app_token.get_secret_value(), settings.slack_api_url)
    except SocketModeError as exc:
        report.line("FAIL", "app token", str(exc))
        return
    if settings.socket_mode:
        both = " and over HTTP (SLACK_HTTP_EVENTS=true)" if settings.http_events else ""
        report.line("PASS", "app token", f"opens Socket Mode connections: deliveries over the socket{both}")


def _check_signing_secret(settings: Settings, report: _Report) -> None:
    if settings.socket_mode and not settings.http_events:
        report.line("SKIP", "signing secret", "not needed: deliveries come over Socket Mode only")
    elif problem := signing_secret_problem(settings.slack_signing_secret.get_secret_value()):
        report.line("FAIL", "signing secret", problem)
    elif settings.slack_signing_secret.get_secret_value():
        report.line("PASS", "signing secret", "set")
    else:
        detail = "SLACK_SIGNING_SECRET is not set: copy it from Basic Information → App Credentials"
        report.line("FAIL", "signing secret", detail)


def _origin_problem(origin: str) -> tuple[str, str] | None:
    """``(status, what is wrong)`` for one SLACK_FILE_ORIGINS entry, or None if it is a good https origin."""
    try:
        parts = urlsplit(origin)
        host = parts.hostname or ""
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        host, parts = "", urlsplit("")
    if parts.scheme not in ("http", "https") or not host:
        return "FAIL", f"{origin!r} is not an origin: use https://HOST, e.g. https://files.slack.com"
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        return "FAIL", f"{origin!r} must be scheme://host[:port] only, with no path, query or user"
    if parts.scheme == "http":
        if host in _LOCAL_HOSTS:
            return "WARN", f"{origin} is plain http: fine for local testing, never for Slack"
        return "FAIL", f"{origin} must be https (http only for localhost testing)"
    return None


def _check_file_origins(settings: Settings, report: _Report) -> None:
    origins = settings.slack_file_origins
    if not origins:
        detail = "SLACK_FILE_ORIGINS is empty: channel_fetch_file refuses every file"
        report.line("WARN", "file origins", detail)
        return
    problems = [p for p in (_origin_problem(o) for o in origins) if p is not None]
    for status, detail in problems:
        report.line(status, "file origins", detail)
    if not problems:
        report.line("PASS", "file origins", ", ".join(origins))


def _sqlite_not_yet(url: str) -> tuple[str, str] | None:
    """``(status, detail)`` for a SQLite file that does not exist yet: ``check`` creates nothing
    (``serve`` creates it), so it says whether it could be created. None when the file exists or
    the URL is not SQLite."""
    if not url.lower().startswith("sqlite:"):
        return None
    try:
        path = sqlite_path(url)
    except ValueError:
        return None  # open_store names the problem
    if path.exists():
        return None
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not os.access(folder, os.W_OK | os.X_OK):
        return "FAIL", f"SQLite {path} does not exist and {folder} is not writable: check DATA_DIR"
    return "PASS", f"SQLite {path} does not exist yet; serve creates it (not created by check)"


async def _check_database(settings: Settings, report: _Report) -> None:
    url = settings.resolved_database_url
    if (not_yet := _sqlite_not_yet(url)) is not None:
        status, detail = not_yet
        warning = ephemeral_disk_warning(settings) if status == "PASS" else None
        report.line(
            "WARN" if warning else status, "database", f"{detail}, but {warning}" if warning else detail
        )
        return
    try:
        store = open_store(url)
    except ValueError as exc:
        report.line("FAIL", "database", f"{exc}")
        return
    what = describe_database(url)
    try:
        async with asyncio.timeout(_DB_TIMEOUT):
            await store.migrate()
            await store.ping()
    except (StoreError, OSError, TimeoutError) as exc:
        report.line("FAIL", "database", f"{what}: {_short(exc)}; check DATABASE_URL")
        return
    finally:
        await store.close()
    warning = ephemeral_disk_warning(settings)
    if warning:
        report.line("WARN", "database", f"{what} works, but {warning}")
    else:
        report.line("PASS", "database", f"{what}: reachable, schema up to date")


async def _load_agent_file(
    settings: Settings, report: _Report, identity: SlackIdentity | None
) -> AgentFile | None:
    path = settings.resolved_agent_file
    try:
        agent_file = AgentFile.load(path, settings.mcp_config)
    except (ValueError, OSError) as exc:
        report.line("FAIL", "agent file" if path is not None else "mcp", f"{_short(exc)}")
        return None
    listed, unavailable = await _check_mcp(agent_file, report)
    mcp_tools = [t.name for t in listed]
    _check_approvers(settings, agent_file, listed, report)
    if path is None:
        detail = "none (AGENT_FILE unset, no ./agent.toml): every supported tool is offered"
        report.line("SKIP", "agent file", detail)
        return None
    if agent_file.tools is None:
        report.line("PASS", "agent file", f"{path}: offers every supported tool")
        return agent_file
    enabled = features_from_scopes(identity.scopes).enabled() if identity is not None else None
    known = [*CATALOG, *mcp_tools]
    problems = []
    for name in agent_file.tools:
        spec = CATALOG.get(name)
        if name in AUTOMATIC:
            continue
        if spec is None:
            matched = any(fnmatch.fnmatchcase(k, name) for k in known)
            # A tool of a server that did not start: that server's line already WARNed.
            if not matched and not any(name.startswith(f"{server}_") for server in unavailable):
                problems.append(f"unknown tool {name!r} (known: {', '.join(known)})")
        elif enabled is not None and spec.feature is not None and spec.feature not in enabled:
            needs = " or ".join(FEATURE_SCOPES.get(spec.feature, ()))
            problems.append(f"{name} needs the {needs} scope, which is not granted")
    for problem in problems:
        report.line("FAIL", "agent file", f"{path} selects {problem}: fix the tools list or the scopes")
    if not problems:
        checked = "" if enabled is not None else " (scopes not checked: no valid token)"
        report.line("PASS", "agent file", f"{path}: {len(agent_file.tools)} tools, all known{checked}")
    return agent_file


async def _check_mcp(agent_file: AgentFile, report: _Report) -> tuple[list[McpTool], dict[str, str]]:
    """Start every MCP server of the agent file, one line each; returns the tools and the
    servers that did not start (with why)."""
    if not agent_file.mcp:
        return [], {}
    try:
        servers = McpServers(agent_file.mcp, per_person=PersonalServer)
    except ValueError as exc:  # a ${VAR} that is not set: `serve` would refuse to start
        report.line("FAIL", "mcp", _short(exc))
        return [], {s.name: "not checked" for s in agent_file.mcp}
    await servers.start()
    try:
        for server in servers.servers:
            name = f"mcp {server.name}"
            if server.config.per_person:  # no one's token here: nothing of a person is shown
                report.line("PASS", name, "acts per person: its tools are listed once someone connects")
            elif server.error is not None:
                report.line("WARN", name, f"{server.error}; its tools are absent until it starts")
            else:
                eager = sum(t.starts == "active" for t in server.tools)
                counts = f"{len(server.tools)} tools ({eager} eager, {server.listed} listed by the server)"
                said = _annotated(server.tools)
                report.line("PASS", name, f"ok, {counts} over {server.config.transport}{said}")
    finally:
        await servers.stop()
    return list(servers.tools), servers.unavailable()


def _check_approvers(settings: Settings, agent_file: AgentFile, mcp: list[McpTool], report: _Report) -> None:
    """WARN when calls wait for approval but nobody besides the asker can give it (no ``APPROVERS``)."""
    policy = agent_file.approval_policy
    names = [n for n in CATALOG if policy.needs_approval(n)] + [
        t.name for t in mcp if policy.needs_approval(t.name, t)
    ]
    for warning in approver_warnings(names, settings.approvers, settings.approval_by):
        report.line("WARN", "approvals", warning)
    unmarked = [t.name for t in mcp if not t.read_only and not policy.needs_approval(t.name, t)]
    if unmarked:
        shown = ", ".join(unmarked[:5]) + (f" and {len(unmarked) - 5} more" if len(unmarked) > 5 else "")
        report.line(
            "WARN",
            "approvals",
            f'approval_default = "listed_only": {len(unmarked)} MCP tools not marked read-only run '
            f"without anyone's approval ({shown})",
        )


def _check_skills(settings: Settings, report: _Report) -> None:
    folder = settings.resolved_skills_dir
    if folder is None:
        report.line("SKIP", "skills", "none (SKILLS_DIR unset, no ./skills folder)")
    elif not folder.is_dir():
        detail = f"SKILLS_DIR {folder} is not a directory: create it or unset SKILLS_DIR"
        report.line("FAIL", "skills", detail)
    else:
        count = len(SkillLibrary.load(folder).names())
        report.line("PASS" if count else "WARN", "skills", f"{folder}: {count} skills (*.md and */SKILL.md)")


async def _check_model(
    settings: Settings, report: _Report, agent_file: AgentFile | None, *, request: bool = True
) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.exceptions import (
        ModelAuthenticationError,
        ModelConnectionError,
        ModelNotFoundError,
        OutputTokenLimitExceeded,
        UnexpectedModelBehavior,
    )

    from app.agent.models import build_model, credential_hint

    name = settings.model or (agent_file.model if agent_file is not None else "")
    if not name:
        detail = "MODEL is not set: e.g. MODEL=openai-chat:gpt-4o-mini or anthropic:claude-sonnet-4-5"
        # --no-model checks no model: a missing one is worth saying (serve needs it), not a failure.
        report.line("FAIL" if request else "WARN", "model", detail + ("" if request else " (--no-model)"))
        return
    try:
        model = build_model(name, settings)
    except ValueError as exc:
        report.line("FAIL", "model", _short(exc))
        return
    if not request:  # the name and key are checked; only the request is skipped
        report.line("SKIP", "model", f"{name} configured; request skipped (--no-model)")
        return
    try:
        async with asyncio.timeout(_MODEL_TIMEOUT):
            await Agent(model).run("Reply with OK", model_settings={"max_tokens": _MODEL_MAX_TOKENS})
    except OutputTokenLimitExceeded:
        pass  # it answered, just at length: the configuration works
    except UnexpectedModelBehavior as exc:
        report.line("WARN", "model", f"{name} answered, but oddly: {_short(exc)}")
        return
    except TimeoutError:
        report.line("FAIL", "model", f"{name}: no answer within {_MODEL_TIMEOUT:.0f}s; check OPENAI_BASE_URL")
        return
    except Exception as exc:
        # Any provider failure is a finding here, never a crash of the check.
        key = credential_hint(name)
        custom_url = name.startswith(("openai:", "openai-chat:"))
        where = "OPENAI_BASE_URL and the network" if custom_url else "the network"
        if isinstance(exc, ModelAuthenticationError):
            fix = f"check {key}"
        elif isinstance(exc, ModelConnectionError):
            fix = f"check {where}"
        elif isinstance(exc, ModelNotFoundError):
            fix = "check the model name in MODEL"
        else:
            fix = f"check MODEL, {key} and {where}"
        detail = f"{name}: {type(exc).__name__}: {_short(exc)}; {fix}"
        report.line("FAIL", "model", detail)
        return
    report.line("PASS", "model", f"{name} answered")


async def run_checks(settings: Settings, *, model: bool = True, out: TextIO | None = None) -> int:
    """Run every check, print one line per finding to ``out`` (stdout); 0 when nothing FAILed, else 1."""
    report = _Report(out or sys.stdout, _secrets(settings))
    identity = await _check_token(settings, report)
    _check_scopes(identity, report, settings.agent_sessions)
    await _check_app_token(settings, report)
    _check_signing_secret(settings, report)
    _check_file_origins(settings, report)
    await _check_database(settings, report)
    agent_file = await _load_agent_file(settings, report, identity)
    _check_skills(settings, report)
    await _check_model(settings, report, agent_file, request=model)
    _report_policy(settings, report, agent_file, identity)
    return 1 if report.failed else 0


def _report_policy(
    settings: Settings, report: _Report, agent_file: AgentFile | None, identity: SlackIdentity | None
) -> None:
    """Each profile's effective policy (INFO), then the production posture (``app.ops.posture``)."""
    loaded = agent_file or AgentFile()
    scopes = tuple(identity.scopes) if identity is not None and identity.scopes else None
    found = group_scope_line(loaded, scopes)
    for status, name, detail in [
        *profile_lines(settings, loaded),
        *([found] if found is not None else []),
        *posture_lines(settings, loaded),
    ]:
        report.line(status, name, detail)



def _annotated(tools: Sequence[McpTool]) -> str:
    """What the server says of its tools: ``; 3 read-only, destructive: tickets_close_ticket``."""
    read_only = sum(t.read_only for t in tools)
    destructive = [t.name for t in tools if t.destructive]
    said = f"; {read_only} read-only"
    return said + (f", destructive: {', '.join(destructive)}" if destructive else "")


__all__ = ["run_checks"]
