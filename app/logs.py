"""Structured logs, with request- and run-scoped fields: JSON, one object per line, or text for people.

``LOG_FORMAT=json|text`` chooses; unset, a terminal gets text and anything else (a PaaS log
drain, a file) gets JSON. Both carry the same fields and the same redaction.

Fields bound with :func:`bind` (``event_id``, ``task``, ``run``, ``tool``…) ride on
every line logged inside the block, through contextvars, so a delivery and a run
can be followed across modules; :func:`open_scope`/:func:`close_scope` do the same
for a scope that begins and ends in two callbacks (a run's hooks). Secrets never
reach a line: the formatter replaces any configured secret (the bot token, the
signing secret, API keys) and anything shaped like a Slack token. Message text
appears only as a short :func:`preview`, and only when ``LOG_PREVIEWS`` is on.

:func:`capture` collects the JSON lines a block logs, for tests.
"""

from __future__ import annotations

import contextvars
import io
import json
import logging
import re
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from .settings import Settings

_FIELDS: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("log_fields", default={})  # noqa: B039
_TOKEN_SHAPE = re.compile(r"xox[abposr]-[A-Za-z0-9-]{6,}")
#: Characters of message text a log line may carry.
PREVIEW_CHARS = 40
# Library chatter at INFO (or DEBUG) would log request details and message bodies; keep it to warnings.
_NOISY = (
    "slack_bolt",
    "slack_sdk",
    "aiohttp.access",
    "httpx",
    "httpx2",
    "openai",
    "anthropic",
    "google_genai",
    "groq",
    "mistralai",
    "botocore",
)

Scope = contextvars.Token[dict[str, Any]]
#: Secrets learnt after start-up (MCP server URLs' queries, expanded ``${VAR}`` values), redacted
#: from every line like the configured ones.
_LEARNT: set[str] = set()


def add_secrets(values: Iterable[str]) -> None:
    """Redact ``values`` (those of at least 6 characters) from every log line from now on."""
    _LEARNT.update(v for v in values if len(v) >= 6)


@contextmanager
def bind(**fields: Any) -> Iterator[None]:
    merged = {**_FIELDS.get(), **{k: v for k, v in fields.items() if v is not None}}
    token = _FIELDS.set(merged)
    try:
        yield
    finally:
        _FIELDS.reset(token)


def open_scope(**fields: Any) -> Scope:
    """Bind exactly ``fields`` (dropping what the caller had bound) until :func:`close_scope`.

    For a scope whose start and end are two callbacks awaited in one task, such as a run's
    hooks; replacing rather than merging keeps a delivery's ``event_id`` off a later run."""
    return _FIELDS.set({k: v for k, v in fields.items() if v is not None})


def close_scope(scope: Scope) -> None:
    try:
        _FIELDS.reset(scope)
    except ValueError:  # closed from another context than it was opened in: nothing of ours to undo
        pass


def preview(text: str) -> str:
    """The first :data:`PREVIEW_CHARS` characters of ``text``, whitespace collapsed."""
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"


class JsonFormatter(logging.Formatter):
    def __init__(self, secrets: tuple[str, ...] = ()) -> None:
        super().__init__()
        self._secrets = tuple(s for s in secrets if len(s) >= 6)

    def redact(self, text: str) -> str:
        for secret in (*self._secrets, *sorted(_LEARNT, key=len, reverse=True)):
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


class TextFormatter(JsonFormatter):
    """``14:03:07 WARNING app.service  message  key=value …``: the JSON line's fields, for a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        fields = {**_FIELDS.get()}
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict):
            fields.update(extra)
        when = time.strftime("%H:%M:%S", time.localtime(record.created))
        pairs = " ".join(f"{k}={_text_value(v)}" for k, v in fields.items())
        line = f"{when} {record.levelname:<7} {record.name}  {record.getMessage()}"
        line += f"  {pairs}" if pairs else ""
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return self.redact(line)


def _text_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return json.dumps(text, ensure_ascii=False) if (" " in text or not text) else text


def formatter(settings: Settings, stream: Any) -> logging.Formatter:
    """The formatter ``LOG_FORMAT`` asks for (unset: text when ``stream`` is a terminal)."""
    chosen = settings.log_format
    if not chosen:
        isatty = getattr(stream, "isatty", None)
        chosen = "text" if callable(isatty) and isatty() else "json"
    cls = TextFormatter if chosen == "text" else JsonFormatter
    return cls(settings.secret_values())


class HeldLogLines:
    """Lines logged during start-up, held back until :meth:`release` (start-up worked: they are
    written) or :meth:`discard` (it failed: only its one ``cannot start:`` line is printed)."""

    def __init__(self) -> None:
        self.records: list[logging.LogRecord] = []
        self._handler: logging.Handler | None = None
        self._targets: list[logging.Handler] = []

    def _hold(self) -> None:
        root = logging.getLogger()
        self._targets = list(root.handlers)
        held = self

        class _Collect(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                held.records.append(record)

        self._handler = _Collect()
        for target in self._targets:
            root.removeHandler(target)
        root.addHandler(self._handler)

    def _restore(self) -> None:
        root = logging.getLogger()
        if self._handler is not None:
            root.removeHandler(self._handler)
            self._handler = None
            for target in self._targets:
                root.addHandler(target)

    def release(self) -> None:
        """Write what was held and log directly from now on."""
        if self._handler is None:
            return
        self._restore()
        for record in self.records:
            for target in self._targets:
                if record.levelno >= target.level:
                    target.handle(record)
        self.records.clear()

    def discard(self) -> None:
        self._restore()
        self.records.clear()


@contextmanager
def held_until_started() -> Iterator[HeldLogLines]:
    """Hold log lines back during start-up (:class:`HeldLogLines`); released on leaving unless discarded."""
    held = HeldLogLines()
    held._hold()
    try:
        yield held
    finally:
        held.release()


def configure_logging(settings: Settings, stream: Any = None) -> logging.Handler:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter(settings, stream or sys.stderr))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(settings.log_level.upper())
    for noisy in _NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return handler


def event(logger: logging.Logger, message: str, *, level: int = logging.INFO, **fields: Any) -> None:
    """Log one structured line with extra fields (e.g. ``outcome``, ``duration_ms``)."""
    logger.log(level, message, extra={"fields": fields})


class Captured:
    """What :func:`capture` collected: the raw text and the parsed lines."""

    def __init__(self) -> None:
        self.stream = io.StringIO()

    @property
    def text(self) -> str:
        return self.stream.getvalue()

    def lines(self, message: str | None = None) -> list[dict[str, Any]]:
        """Every JSON line, or those whose ``message`` equals ``message``."""
        parsed = [json.loads(line) for line in self.text.splitlines() if line.strip()]
        return [p for p in parsed if message is None or p.get("message") == message]


@contextmanager
def capture(settings: Settings, level: int = logging.DEBUG) -> Iterator[Captured]:
    """Collect every line logged in the block exactly as production formats it (tests)."""
    captured = Captured()
    handler = logging.StreamHandler(captured.stream)
    handler.setFormatter(JsonFormatter(settings.secret_values()))
    root = logging.getLogger()
    noisy = {name: logging.getLogger(name).level for name in _NOISY}
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(level)
    for name in _NOISY:
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        yield captured
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        for name, value in noisy.items():
            logging.getLogger(name).setLevel(value)
