"""Configuration from the environment (and an optional ``.env``), validated once at start-up."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

CSV = Annotated[tuple[str, ...], NoDecode]


def _csv(value: object) -> object:
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    return value


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", extra="ignore", populate_by_name=True)

    slack_bot_token: SecretStr = SecretStr("")
    slack_signing_secret: SecretStr = SecretStr("")
    slack_api_url: str = "https://slack.com/api/"
    slack_file_origins: CSV = ("https://files.slack.com",)

    data_dir: Path = Path("./data")
    database_url: str = ""

    model: str = ""
    openai_api_key: SecretStr = SecretStr("")
    openai_base_url: str = ""
    anthropic_api_key: SecretStr = SecretStr("")
    agent_file: Path | None = None
    skills_dir: Path | None = None

    port: int = 3000
    #: Seconds SIGTERM waits for running turns before leases are released (Heroku allows 30).
    shutdown_grace: float = 20.0
    #: Seconds one agent run may take before it ends with an apology.
    run_timeout: float = 300.0
    #: Agent runs one instance works on at once; more conversations wait in the durable inbox.
    max_concurrent_runs: int = 64
    #: Most transcript messages sent to the model (older turns are dropped at a prompt boundary).
    history_limit: int = 400
    #: Seconds one Slack write may keep waiting out rate limits (429) before it fails ``rate_limited``.
    write_deadline: float = Field(default=300.0, gt=0)
    #: Seconds a conversation lease lives without a heartbeat.
    lease_ttl: float = 60.0
    #: Seconds between sweeps for conversations whose owner died.
    sweep_interval: float = 30.0
    #: Days ingress dedupe keys are kept (Slack retries for minutes); the sweep prunes older ones hourly.
    # At least an hour: Slack retries a delivery for minutes, and a pruned key could be claimed twice.
    claim_retention_days: float = Field(default=7.0, ge=1 / 24)
    #: Largest request body accepted on /slack/events, in bytes.
    max_body_bytes: int = 1_048_576

    # Access control (empty means everyone).
    allowed_channels: CSV = ()
    allowed_users: CSV = ()
    allow_bots: bool = False
    allow_dms: bool = True

    #: Progress while a run works: "auto" (status, else a reaction), "status", "reaction", "off".
    progress: str = "auto"
    progress_emoji: str = "eyes"
    #: Include a short preview of message text in logs.
    log_previews: bool = True
    #: When set, GET /metrics requires ``Authorization: Bearer <token>``.
    metrics_token: SecretStr = SecretStr("")
    log_level: str = "INFO"

    @field_validator("slack_file_origins", "allowed_channels", "allowed_users", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return _csv(value)

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'threadbound.db'}"

    @property
    def resolved_agent_file(self) -> Path | None:
        if self.agent_file is not None:
            return self.agent_file
        default = Path("agent.toml")
        return default if default.is_file() else None

    @property
    def resolved_skills_dir(self) -> Path | None:
        if self.skills_dir is not None:
            return self.skills_dir
        default = Path("skills")
        return default if default.is_dir() else None


def load_settings(**overrides: object) -> Settings:
    return Settings(**overrides)  # type: ignore[arg-type]


__all__ = ["Settings", "load_settings"]
