"""Configuration from the environment (and an optional ``.env``), validated once at start-up."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from storage import sqlite_path

CSV = Annotated[tuple[str, ...], NoDecode]

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# At least an hour: Slack retries a delivery for minutes, and a pruned key could be claimed twice.
_MIN_RETENTION_DAYS = 1 / 24
#: Postgres pool connections for the instance's own store trips beside its runs', and the fewest a
#: pool sized from MAX_CONCURRENT_RUNS gets (the size every pool had before it was derived).
POOL_SPARE = 4
POOL_MIN = 10

#: Where a newcomer finds each required setting; shown when it is missing.
WHERE_TO_GET = {
    "SLACK_BOT_TOKEN": "the Bot User OAuth Token (xoxb-…) on your Slack app's OAuth & Permissions page",
    "SLACK_SIGNING_SECRET": "the Signing Secret under your Slack app's Basic Information → App Credentials",
    "MODEL": "e.g. openai-chat:gpt-4o-mini or anthropic:claude-sonnet-4-5 (or `model` in agent.toml)",
    "OPENAI_API_KEY": "https://platform.openai.com/api-keys (only a custom OPENAI_BASE_URL may go without)",
    "ANTHROPIC_API_KEY": "https://console.anthropic.com/settings/keys",
}


def _csv(value: object) -> object:
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    return value


def _if_present(default: Path, present: Callable[[Path], bool]) -> Path | None:
    """``default`` when ``present`` finds it there (a conventional file or folder), else None."""
    return default if present(default) else None


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", extra="ignore", populate_by_name=True)

    slack_bot_token: SecretStr = SecretStr("")
    slack_signing_secret: SecretStr = SecretStr("")
    #: An app-level token (``xapp-…``): deliveries arrive over Socket Mode (``app/intake/socket_mode.py``).
    slack_app_token: SecretStr = SecretStr("")
    #: Whether POST /slack/events takes deliveries: unset means yes without SLACK_APP_TOKEN and no with it
    #: (Socket Mode); ``true`` with SLACK_APP_TOKEN takes both, ``false`` without it is refused.
    slack_http_events: bool | None = None
    slack_api_url: str = "https://slack.com/api/"
    slack_file_origins: CSV = ("https://files.slack.com",)

    data_dir: Path = Path("./data")
    database_url: str = ""
    #: Postgres connections one instance's pool may open; None: from ``max_concurrent_runs``
    #: (:attr:`resolved_database_pool_size`).
    database_pool_size: int | None = Field(default=None, ge=1)

    model: str = ""
    openai_api_key: SecretStr = SecretStr("")
    openai_base_url: str = ""
    anthropic_api_key: SecretStr = SecretStr("")
    agent_file: Path | None = None
    #: MCP servers in the common ``{"mcpServers": {...}}`` JSON format, besides the agent file's.
    mcp_config: Path | None = None
    skills_dir: Path | None = None

    #: Interface the server listens on.
    host: str = "0.0.0.0"
    port: int = Field(default=3000, ge=1, le=65535)
    #: ``serve`` answers Slack's deliveries from a process of its own (``app/intake/edge_process.py``),
    #: so runs never slow an acknowledgement; ``false`` serves them from a thread (one process, ~25 MB less).
    edge_process: bool = True
    #: Seconds the service loop may go without a heartbeat before ``/healthz`` (answered by the edge's
    #: process or thread) says 503, so a liveness probe restarts a wedged service; 0: never.
    health_deadline_s: float = Field(default=30.0, ge=0)
    #: Seconds SIGTERM waits for running turns before leases are released (Heroku allows 30).
    shutdown_grace: float = Field(default=20.0, ge=0)
    #: Seconds one agent run may take before it ends with an apology.
    run_timeout: float = Field(default=300.0, gt=0)
    #: Agent runs one instance works on at once; more conversations wait in the durable inbox.
    max_concurrent_runs: int = Field(default=64, ge=1)
    #: Most transcript messages sent to the model (older turns are dropped at a prompt boundary).
    history_limit: int = Field(default=400, ge=1)
    #: Tokens of history (about 4 characters each) past which older turns are summarised once by the
    #: model and sent as that summary (``app/runs/compaction.py``); 0 (the default, as the contract says:
    #: none) turns compaction off and leaves HISTORY_LIMIT as the only bound.
    compact_after_tokens: int = Field(default=0, ge=0)
    #: Input plus output tokens per UTC day: per requesting person, and for the whole install (0: none).
    user_daily_token_budget: int = Field(default=0, ge=0)
    daily_token_budget: int = Field(default=0, ge=0)
    #: A small "1,234 tokens · 2 requests" line under each answer.
    usage_footer: bool = False
    #: Seconds one Slack write may keep waiting out rate limits (429) before it fails ``rate_limited``.
    write_deadline: float = Field(default=300.0, gt=0)
    #: Seconds after its attempt began that a Slack write whose answer was lost (a cut connection, a
    #: timeout, a gateway's 5xx) may still be applied: it counts as maybe applied until then. The
    #: attempt's timeout (30 s) and a margin; lower it only for tests.
    write_in_flight: float = Field(default=35.0, gt=0)
    #: Seconds a conversation lease lives without a heartbeat.
    lease_ttl: float = Field(default=60.0, gt=0)
    #: Seconds between sweeps for conversations whose owner died.
    sweep_interval: float = Field(default=30.0, gt=0)
    #: Days ingress dedupe keys are kept (Slack retries for minutes); the sweep prunes older ones hourly.
    claim_retention_days: float = 7.0
    #: Largest request body accepted on /slack/events, in bytes.
    max_body_bytes: int = Field(default=1_048_576, ge=1)

    # Access control (empty means everyone).
    allowed_channels: CSV = ()
    allowed_users: CSV = ()
    allow_bots: bool = False
    allow_dms: bool = True
    #: User IDs who may decide any approval, besides the person whose message led to the call.
    approvers: CSV = ()
    #: Seconds an approval card stays open; after that the call counts as ``expired``.
    approval_ttl: float = Field(default=86_400.0, gt=0)
    #: Seconds an MCP server's question (a form card) waits for its answer before the call hears ``cancel``.
    mcp_elicitation_timeout_s: float = Field(default=300.0, gt=0, le=3600)
    #: Who decides approvals: ``requester`` (the person whose message led to the call, or anyone in
    #: ``APPROVERS``) or ``approvers`` (only people in ``APPROVERS``).
    approval_by: Literal["requester", "approvers"] = "requester"
    #: Serve people from other organisations in Slack Connect channels (else ignored, with a log line).
    allow_external_users: bool = False
    #: Serve the workspace's guests (single- and multi-channel); a profile's ``guests`` overrides it.
    allow_guests: bool = False
    #: Pending follow-ups (``channel_follow_up``) across the install; each task has at most 10.
    follow_ups_max: int = Field(default=1000, ge=0)
    #: Pending follow-ups one person's requests may have across the install.
    follow_ups_per_person_max: int = Field(default=50, ge=0)
    #: Follow-ups runs no person started (a follow-up firing, an expiry) may schedule in a row.
    follow_ups_unattended_max: int = Field(default=1, ge=0)
    #: Conversations one person's messages may have running at once; more wait their turn.
    user_max_runs: int = Field(default=4, ge=1)
    #: Disk a task's fetched and produced files may use; past it a fetch is refused (``file_refused``).
    task_files_max_bytes: int = Field(default=524_288_000, ge=1)
    #: Disk the files one person's requests saved may use across tasks, and every task's files
    #: together (0: no cap); past either a fetch is refused like past the task's.
    user_files_max_bytes: int = Field(default=0, ge=0)
    files_max_bytes: int = Field(default=0, ge=0)
    #: A task's files are removed after this many days without activity (the task and handles stay).
    files_ttl_days: float = Field(default=7.0, gt=0)
    #: The slash command's name in the manifest (``/threadbound``) and in its own help.
    slash_command: str = Field(default="/threadbound", pattern=r"^/[a-z0-9_-]{1,31}$")

    #: Progress while a run works: "auto" (status, else a reaction), "status", "reaction", "off".
    progress: str = "auto"
    progress_emoji: str = "eyes"
    #: ``auto``: answers stream into the thread as they are written; ``off``: posted whole.
    stream: str = "auto"
    #: Slack's agent sessions (status, title, Stop): ``auto`` where the install grants ``assistant:write``
    #: (the app is declared an agent), ``on`` tried on every install, ``off`` never.
    agent_sessions: Literal["auto", "on", "off"] = "auto"
    #: Include a short preview of message text in the delivery's log line (off: no text in any line).
    log_previews: bool = False
    #: When set, GET /metrics requires ``Authorization: Bearer <token>``.
    metrics_token: SecretStr = SecretStr("")
    log_level: str = "INFO"
    #: ``json`` (one object per line), ``text`` (for people), or empty: text on a terminal, else JSON.
    log_format: str = ""
    #: OTLP/HTTP endpoint for traces (``app/traces.py``; needs the ``otel`` extra); empty: no traces.
    otel_exporter_otlp_endpoint: str = ""
    otel_service_name: str = "threadbound"
    #: Put prompts, answers, tool arguments and results in spans (off: ids and outcomes only).
    trace_content: bool = False
    #: Fernet key(s), comma-separated (the first encrypts), for per-person MCP tokens at rest
    #: (``app/agent/mcp/vault.py``); required when an MCP server has ``auth = "per_person"``.
    mcp_token_key: SecretStr = SecretStr("")
    #: The app's public base URL (``https://threadbound.example.com``): per-person MCP servers send
    #: people back to ``$PUBLIC_URL/oauth/callback``.
    public_url: str = ""

    @field_validator("slack_file_origins", "allowed_channels", "allowed_users", "approvers", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return _csv(value)

    @field_validator("log_format")
    @classmethod
    def _log_format(cls, value: str) -> str:
        chosen = value.strip().lower()
        if chosen not in ("", "auto", "json", "text"):
            raise ValueError("use json or text (unset: text on a terminal, JSON otherwise)")
        return "" if chosen == "auto" else chosen

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        level = value.strip().upper()
        if level not in LOG_LEVELS:
            raise ValueError(f"use one of {', '.join(LOG_LEVELS)}")
        return level

    @field_validator("claim_retention_days")
    @classmethod
    def _retention(cls, value: float) -> float:
        if value < _MIN_RETENTION_DAYS:
            raise ValueError(
                "must be at least 1 hour (0.042 days), since Slack retries a delivery for minutes"
            )
        return value

    @field_validator("approval_by")
    @classmethod
    def _approvers_named(cls, value: str, info: ValidationInfo) -> str:
        if value == "approvers" and not info.data.get("approvers"):
            raise ValueError("only APPROVERS would decide, and APPROVERS is empty: set it to user IDs")
        return value

    def secret_values(self) -> tuple[str, ...]:
        """The values of every secret setting (tokens, keys), set or empty; logs and ``check`` mask them."""
        secret = [name for name, f in type(self).model_fields.items() if f.annotation is SecretStr]
        return tuple(getattr(self, name).get_secret_value() for name in secret)

    @property
    def socket_mode(self) -> bool:
        """Deliveries arrive over Socket Mode (SLACK_APP_TOKEN is set)."""
        return bool(self.slack_app_token.get_secret_value())

    @property
    def http_events(self) -> bool:
        """POST /slack/events takes Slack deliveries (see ``slack_http_events``)."""
        if self.slack_http_events is None:
            return not self.socket_mode
        return self.slack_http_events

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'threadbound.db'}"

    @property
    def resolved_database_pool_size(self) -> int:
        """DATABASE_POOL_SIZE, else a connection for every second run (a run holds one only for
        the length of a store trip; most of its time goes to the model and Slack) and
        :data:`POOL_SPARE` for the instance's own trips (heartbeats, sweeps, takeovers), at least
        :data:`POOL_MIN`: 36 at the default 64 runs, so two instances and their edges stay under
        Postgres's default ``max_connections`` of 100."""
        if self.database_pool_size is not None:
            return self.database_pool_size
        return max(POOL_MIN, -(-self.max_concurrent_runs // 2) + POOL_SPARE)

    @property
    def resolved_agent_file(self) -> Path | None:
        """``AGENT_FILE``, else ``./agent.toml`` when there is one."""
        return self.agent_file or _if_present(Path("agent.toml"), Path.is_file)

    @property
    def resolved_skills_dir(self) -> Path | None:
        """``SKILLS_DIR``, else ``./skills`` when there is one."""
        return self.skills_dir or _if_present(Path("skills"), Path.is_dir)


def model_key_missing(model: str, settings: Settings) -> str | None:
    """The API key setting ``model`` needs and does not have, or None.

    Anthropic always needs a key; OpenAI models need one unless ``OPENAI_BASE_URL`` names another
    server (vLLM, Ollama and other local servers often take none)."""
    provider = model.partition(":")[0]
    if provider == "anthropic" and not settings.anthropic_api_key.get_secret_value():
        return "ANTHROPIC_API_KEY"
    if (
        provider in ("openai", "openai-chat")
        and not settings.openai_api_key.get_secret_value()
        and not settings.openai_base_url
    ):
        return "OPENAI_API_KEY"
    return None


def app_token_problem(token: str) -> str | None:
    """What is wrong with the shape of a SLACK_APP_TOKEN (naming what was probably pasted), or None."""
    if token.startswith("xapp-"):
        return None
    pasted = _pasted(token)
    looks = f" — this looks like {pasted}" if pasted else ""
    return f"SLACK_APP_TOKEN must start with xapp-{looks}: copy the app-level token from Basic Information"


def _pasted(token: str) -> str:
    """What a Slack credential of the wrong kind probably is, for messages ("" when unrecognisable)."""
    kinds = {
        "xoxb-": "the bot token (xoxb-)",
        "xoxp-": "a user token (xoxp-)",
        "xoxe": "a refresh token (xoxe…)",
        "xapp-": "an app-level token (xapp-)",
        "xoxa-": "a workspace app token (xoxa-)",
    }
    for prefix, kind in kinds.items():
        if token.startswith(prefix):
            return kind
    if len(token) == 32 and all(c in "0123456789abcdef" for c in token):
        return "a signing secret or client secret"
    if token.startswith(("sk-", "sk-ant-")):
        return "a model API key"
    return ""


def bot_token_problem(token: str) -> str | None:
    """What is wrong with the shape of a (non-empty) SLACK_BOT_TOKEN, naming what was probably
    pasted, or None. Checked before any network call."""
    token = token.strip()
    if not token or token.startswith("xoxb-"):
        return None
    pasted = _pasted(token)
    looks = f" — this looks like {pasted}" if pasted else ""
    return (
        f"SLACK_BOT_TOKEN must start with xoxb-{looks}: copy the Bot User OAuth Token from your "
        "Slack app's OAuth & Permissions page"
    )


def signing_secret_problem(secret: str) -> str | None:
    """A SLACK_SIGNING_SECRET that is plainly a token instead, or None."""
    if not secret.startswith(("xox", "xapp-")):
        return None
    return (
        f"SLACK_SIGNING_SECRET is not a token — this looks like {_pasted(secret) or 'a Slack token'}: copy "
        "the Signing Secret under Basic Information → App Credentials"
    )


def credential_shape_problems(settings: Settings) -> list[str]:
    """Slack credentials of the wrong shape, one line each (empty ones are not checked here)."""
    problems = [
        bot_token_problem(settings.slack_bot_token.get_secret_value()),
        signing_secret_problem(settings.slack_signing_secret.get_secret_value()),
    ]
    return [p for p in problems if p]


def missing_settings(settings: Settings, model: str | None, *, webhook: bool = True) -> list[str]:
    """Required settings that are empty, in the order a newcomer sets them up.

    ``model`` is the model name in effect (``MODEL`` or the agent file's), or None when the caller
    supplies a model object and none is required. Without the ``webhook`` (``run``, or Socket Mode
    without HTTP deliveries) no request arrives to verify, so the signing secret is not required."""
    required = [("SLACK_BOT_TOKEN", settings.slack_bot_token)]
    if webhook:
        required.append(("SLACK_SIGNING_SECRET", settings.slack_signing_secret))
    missing = [name for name, value in required if not value.get_secret_value()]
    if model is not None:
        key = model_key_missing(model, settings) if model else None
        missing += ["MODEL"] if not model else [key] if key else []
    return missing


def missing_report(missing: list[str]) -> str:
    """Every missing required setting, each with where to get it, and what to do next."""
    width = max(len(name) for name in missing)
    count = f"{len(missing)} required setting{'s are' if len(missing) > 1 else ' is'} not set:"
    rows = [f"  {name:<{width}}  {WHERE_TO_GET[name]}" for name in missing]
    them = "them" if len(missing) > 1 else "it"
    advice = f"Set {them} in the environment or in ./.env (NAME=value lines), then run `python -m app check`."
    lines = [count, *rows, advice]
    if "SLACK_BOT_TOKEN" in missing:
        lines.append(
            "No Slack app yet? `python -m app playground --demo` tries it in a browser, "
            "without Slack or a key"
        )
    return "\n".join(lines)


def describe_database(url: str) -> str:
    """The database a URL names, for messages: never the URL itself, which may carry a password."""
    if url.lower().startswith("sqlite:"):
        try:
            return f"SQLite {sqlite_path(url)}"
        except ValueError:
            return "SQLite"
    try:
        parts = urlsplit(url)
        where = f"{parts.hostname or 'localhost'}:{parts.port or 5432}{parts.path}"
    except ValueError:
        return "the database"
    return f"Postgres {where}"


# Pydantic's wording for the constraints above, said as a person would.
_CONSTRAINTS = {
    "greater_than_equal": "must be at least {ge}",
    "greater_than": "must be greater than {gt}",
    "less_than_equal": "must be at most {le}",
    "int_parsing": "must be a whole number",
    "float_parsing": "must be a number",
    "bool_parsing": "must be true or false",
}


def explain(exc: ValidationError) -> list[str]:
    """One line per invalid setting: ``NAME=value is invalid: what to do`` (secrets never echoed)."""
    lines = []
    for error in exc.errors():
        name = ".".join(map(str, error["loc"])).upper()
        field = Settings.model_fields.get(name.lower())
        secret = field is not None and field.annotation is SecretStr
        value = error.get("input")
        shown = f"={value}" if isinstance(value, str) and not secret and len(value) <= 80 else ""
        template = _CONSTRAINTS.get(error["type"])
        if template is not None:
            ctx = {k: f"{v:g}" if isinstance(v, float) else v for k, v in error.get("ctx", {}).items()}
            why = template.format(**ctx)
        elif error["type"] == "value_error":
            why = str(error["ctx"]["error"])
        else:
            why = error["msg"]
        lines.append(f"{name}{shown} is invalid: {why}")
    return lines


def settings_without_invalid(exc: ValidationError) -> Settings | None:
    """The settings with each invalid value of ``exc`` replaced by its default (None when they still
    do not load): start-up then names the missing ones too, not only the invalid ones."""
    defaults = {}
    for error in exc.errors():
        name = str(error["loc"][0]).lower() if error["loc"] else ""
        if name in Settings.model_fields:
            defaults[name] = Settings.model_fields[name].get_default(call_default_factory=True)
    try:
        return Settings(**defaults)
    except ValidationError:
        return None


def load_settings(**overrides: object) -> Settings:
    return Settings(**overrides)  # type: ignore[arg-type]


__all__ = [
    "LOG_LEVELS",
    "WHERE_TO_GET",
    "Settings",
    "app_token_problem",
    "bot_token_problem",
    "credential_shape_problems",
    "describe_database",
    "explain",
    "load_settings",
    "missing_report",
    "missing_settings",
    "model_key_missing",
    "settings_without_invalid",
    "signing_secret_problem",
]
