"""Structured JSON logs, one object per line, with request- and run-scoped fields.

Fields bound with :func:`bind` (``event_id``, ``task``, ``run``, ``tool``…) ride on
every line logged inside the block, through contextvars, so a delivery and a run
can be followed across modules. Secrets never reach a line: the formatter
replaces any configured secret (the bot token, the signing secret, API keys)
and anything shaped like a Slack token.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .settings import Settings

_FIELDS: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("log_fields", default={})  # noqa: B039
_TOKEN_SHAPE = re.compile(r"xox[abposr]-[A-Za-z0-9-]{6,}")


@contextmanager
def bind(**fields: Any) -> Iterator[None]:
    merged = {**_FIELDS.get(), **{k: v for k, v in fields.items() if v is not None}}
    token = _FIELDS.set(merged)
    try:
        yield
    finally:
        _FIELDS.reset(token)


class JsonFormatter(logging.Formatter):
    def __init__(self, secrets: tuple[str, ...] = ()) -> None:
        super().__init__()
        self._secrets = tuple(s for s in secrets if len(s) >= 6)

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "[redacted]")
        return _TOKEN_SHAPE.sub("xox?-[redacted]", text)

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **_FIELDS.get(),
        }
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict):
            data.update(extra)
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return self.redact(json.dumps(data, default=str, ensure_ascii=False))


def configure_logging(settings: Settings, stream: Any = None) -> logging.Handler:
    secrets = (
        settings.slack_bot_token.get_secret_value(),
        settings.slack_signing_secret.get_secret_value(),
        settings.openai_api_key.get_secret_value(),
        settings.anthropic_api_key.get_secret_value(),
    )
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter(secrets))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(settings.log_level.upper())
    # Library chatter at INFO would log request details; keep it to warnings.
    for noisy in ("slack_bolt", "slack_sdk", "aiohttp.access", "httpx", "httpx2", "openai", "anthropic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return handler


def event(logger: logging.Logger, message: str, **fields: Any) -> None:
    """Log one structured line with extra fields (e.g. ``outcome``, ``duration_ms``)."""
    logger.info(message, extra={"fields": fields})
