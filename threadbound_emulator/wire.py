"""How Web API calls arrive and fail: parameter coercion, cursors, ``SlackError``, ``Method``.

Slack accepts the same parameter as a form string, a query string or a JSON value;
these helpers read each shape the way Slack does, so method handlers see one.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

JSON = dict[str, Any]
Params = dict[str, Any]


class SlackError(Exception):
    """Raised inside a method handler: answered as ``{"ok": false, "error": code, **extra}``."""

    def __init__(self, code: str, **extra: Any) -> None:
        super().__init__(code)
        self.code = code
        self.extra = extra


def ts_key(ts: str) -> tuple[int, int]:
    """A message ts as (seconds, microseconds), for ordering and equality."""
    secs, _, micros = ts.partition(".")
    return int(secs), int(micros or 0)


def ts_from_micros(value: int) -> str:
    return f"{value // 1_000_000}.{value % 1_000_000:06d}"


def truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in {"1", "true", "yes"}
    return bool(value)


def as_json(value: Any, error: str) -> Any:
    """A JSON-encoded string decoded (a value already decoded passes); ``error`` if malformed."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise SlackError(error) from exc
    return value


def as_list(value: Any) -> list[str]:
    """A list parameter given as a JSON array, a comma-separated string or a list."""
    if value is None or value == "":
        return []
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    text = str(value).strip()
    if text.startswith("["):
        loaded = as_json(text, "invalid_arguments")
        if not isinstance(loaded, list):
            raise SlackError("invalid_arguments")
        return [str(v) for v in loaded]
    return [part.strip() for part in text.split(",") if part.strip()]


def as_int(value: Any, default: int) -> int:
    if value is None or value == "":
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def encode_cursor(ts: str) -> str:
    return base64.urlsafe_b64encode(f"next_ts:{ts}".encode()).decode()


def decode_cursor(cursor: str) -> tuple[int, int]:
    """The ts key a cursor points at; ``invalid_cursor`` for anything we did not hand out."""
    try:
        raw = base64.urlsafe_b64decode(cursor.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise SlackError("invalid_cursor") from exc
    prefix, _, ts = raw.partition(":")
    if prefix != "next_ts" or not re.fullmatch(r"\d+\.\d{6}", ts):
        raise SlackError("invalid_cursor")
    return ts_key(ts)
