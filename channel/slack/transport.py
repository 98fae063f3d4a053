"""Web API clients with the retry policy the write-safety invariant needs.

slack_sdk's default handlers retry a dropped connection once for *every* method,
which can duplicate a ``chat.postMessage`` (Slack has no idempotency key). So:

- writes: retried only on HTTP 429, which means nothing was done, after ``Retry-After``;
- reads: retried on 429 (after ``Retry-After``) and on connection errors, a bounded number of times.
"""

from __future__ import annotations

from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

READ_RATE_LIMIT_RETRIES = 3
READ_CONNECTION_RETRIES = 2
WRITE_RATE_LIMIT_RETRIES = 1
TIMEOUT_S = 30


def read_client(token: str, base_url: str) -> AsyncWebClient:
    return AsyncWebClient(
        token=token,
        base_url=base_url,
        timeout=TIMEOUT_S,
        retry_handlers=[
            AsyncConnectionErrorRetryHandler(max_retry_count=READ_CONNECTION_RETRIES),
            AsyncRateLimitErrorRetryHandler(max_retry_count=READ_RATE_LIMIT_RETRIES),
        ],
    )


def write_client(token: str, base_url: str) -> AsyncWebClient:
    return AsyncWebClient(
        token=token,
        base_url=base_url,
        timeout=TIMEOUT_S,
        retry_handlers=[AsyncRateLimitErrorRetryHandler(max_retry_count=WRITE_RATE_LIMIT_RETRIES)],
    )
