"""Slack's request signature, checked on the raw bytes before anything parses them.

Slack signs every delivery and interaction: ``X-Slack-Signature`` is ``v0=`` and the hex
HMAC-SHA256, keyed with the signing secret, of ``v0:{X-Slack-Request-Timestamp}:{body}``.
``unsigned_reason`` answers why a request is not a fresh, correctly signed one (``None`` when
it is), never raising whatever the headers hold: a non-numeric timestamp, a missing header or a
body of any size is a reason, not an exception. Bolt checks the signature again afterwards;
this check exists so that nothing unsigned is parsed at all (a deeply nested body is work an
unsigned stranger should not get to spend).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping

#: How far a request's timestamp may be from now (Slack's recommendation: five minutes).
MAX_AGE_SECONDS = 300


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """The ``X-Slack-Signature`` value Slack would send for ``body`` at ``timestamp``."""
    base = b"v0:" + timestamp.encode("ascii") + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def same_secret(given: str, expected: str) -> bool:
    """Whether a header's value ``given`` is ``expected`` (a token), in constant time; never raising.

    aiohttp decodes header bytes as UTF-8 with ``surrogateescape``, so a value may hold any
    character, or a byte that is not UTF-8 at all; ``hmac.compare_digest`` refuses non-ASCII
    text, so both sides are compared as the bytes they came from."""
    return hmac.compare_digest(
        given.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape")
    )


def unsigned_reason(
    secret: str, headers: Mapping[str, str], body: bytes, now: float | None = None
) -> str | None:
    """Why ``body`` with ``headers`` is not a fresh request signed with ``secret``; None if it is."""
    if not secret:
        return "no SLACK_SIGNING_SECRET to check it with"  # an empty key would sign for anyone
    timestamp = headers.get("X-Slack-Request-Timestamp", "")
    given = headers.get("X-Slack-Signature", "")
    if not timestamp or not given:
        return "no Slack signature"
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
        return "a malformed X-Slack-Request-Timestamp"
    current = time.time() if now is None else now
    if abs(current - int(timestamp)) > MAX_AGE_SECONDS:
        return "a stale X-Slack-Request-Timestamp"
    if not hmac.compare_digest(given.encode("utf-8", "replace"), signature(secret, timestamp, body).encode()):
        return "a wrong X-Slack-Signature"
    return None


__all__ = ["MAX_AGE_SECONDS", "same_secret", "signature", "unsigned_reason"]
