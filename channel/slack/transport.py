"""Web API clients over one shared HTTP session, with the retry policy the write-safety invariant needs.

slack_sdk's default handlers retry a dropped connection once for *every* method,
which can duplicate a ``chat.postMessage`` (Slack has no idempotency key). So:

- writes: never retried here; :mod:`channel.slack.outbound` waits out 429s (nothing was done)
  and paces posts, and any other failure is final;
- reads: retried on 429 (after ``Retry-After``) and on connection errors, a bounded number of times.

Both clients and the file downloads share one ``aiohttp.ClientSession`` per adapter, so
connections to Slack are reused instead of opened per call; the adapter closes it.
"""

from __future__ import annotations

import aiohttp
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

READ_RATE_LIMIT_RETRIES = 3
READ_CONNECTION_RETRIES = 2
#: Seconds one Web API request may take (each attempt; downloads set their own bounds).
TIMEOUT_S = 30


def http_session() -> aiohttp.ClientSession:
    """The adapter's one HTTP session (needs a running loop). Cookies are dropped, so nothing a
    file host sets travels to the next request."""
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=TIMEOUT_S), cookie_jar=aiohttp.DummyCookieJar()
    )


def read_client(token: str, base_url: str, session: aiohttp.ClientSession) -> AsyncWebClient:
    return AsyncWebClient(
        token=token,
        base_url=base_url,
        timeout=TIMEOUT_S,
        session=session,
        retry_handlers=[
            AsyncConnectionErrorRetryHandler(max_retry_count=READ_CONNECTION_RETRIES),
            AsyncRateLimitErrorRetryHandler(max_retry_count=READ_RATE_LIMIT_RETRIES),
        ],
    )


def write_client(token: str, base_url: str, session: aiohttp.ClientSession) -> AsyncWebClient:
    # No retry handlers at all: slack_sdk's default list would retry a dropped post.
    return AsyncWebClient(
        token=token, base_url=base_url, timeout=TIMEOUT_S, session=session, retry_handlers=[]
    )
