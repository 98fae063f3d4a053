"""The HTTP client a Streamable HTTP MCP server is reached with: credentials stay on its origin,
and an answer is capped while it is read.

- **Redirects.** The MCP SDK follows a redirect only within the endpoint's origin (a 307/308
  trailing-slash fix) and treats any other as a failure. This client never follows one itself,
  and a request hook removes the configured headers (and ``Authorization``/``Cookie``) from any
  request that leaves the configured origin, so a credential such as ``X-Api-Key`` cannot cross
  origins even if that SDK behaviour changed.
- **Size.** A JSON answer is read at most :data:`MAX_ANSWER_BYTES` bytes; past that the read fails
  (the call fails with ``tool_failed``) without the rest ever being held. Server-sent events are
  bounded per event by the transport (``max_sse_event_size``, the same bound).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import httpx2

log = logging.getLogger(__name__)

__all__ = ["MAX_ANSWER_BYTES", "AnswerTooLarge", "client_factory"]

#: Largest answer (one JSON-RPC message) read from an MCP server, stdio or HTTP.
MAX_ANSWER_BYTES = 16 * 2**20
_ALWAYS_PRIVATE = ("authorization", "cookie", "proxy-authorization")


class AnswerTooLarge(httpx2.ReadError):
    """The server's answer passed :data:`MAX_ANSWER_BYTES`; what was read is dropped."""


class _CappedBody(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int, on_too_large: Callable[[], None]) -> None:
        self._inner = inner
        self._limit = limit
        self._on_too_large = on_too_large

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                self._on_too_large()
                raise AnswerTooLarge(f"the server's answer was larger than {self._limit // 2**20} MiB")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _CappedTransport(httpx2.AsyncBaseTransport):
    """Caps every non-streaming (not ``text/event-stream``) response body as it is read."""

    def __init__(
        self, inner: httpx2.AsyncBaseTransport, limit: int, on_too_large: Callable[[], None]
    ) -> None:
        self._inner = inner
        self._limit = limit
        self._on_too_large = on_too_large

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        kind = response.headers.get("content-type", "").lower()
        if kind.startswith("text/event-stream"):
            return response
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)
        response.stream = _CappedBody(stream, self._limit, self._on_too_large)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def client_factory(
    url: str,
    secret_headers: Iterable[str],
    *,
    limit: int = MAX_ANSWER_BYTES,
    on_too_large: Callable[[], None] = lambda: None,
) -> Any:
    """An ``httpx_client_factory`` for fastmcp's ``StreamableHttpTransport`` (see the module doc);
    ``on_too_large`` is told when an answer was dropped (the SDK reports only a closed connection)."""
    origin = httpx2.URL(url).origin
    private = {h.lower() for h in secret_headers} | set(_ALWAYS_PRIVATE)

    async def same_origin_credentials(request: httpx2.Request) -> None:
        if request.url.origin == origin:
            return
        dropped = [h for h in list(request.headers) if h.lower() in private]
        for header in dropped:
            del request.headers[header]
        if dropped:
            log.warning("MCP request to another origin: its credential headers were removed")

    def factory(
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,
        auth: httpx2.Auth | None = None,
        **_: Any,
    ) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            headers=headers,
            timeout=timeout or httpx2.Timeout(30.0, read=300.0),
            auth=auth,
            follow_redirects=False,
            transport=_CappedTransport(httpx2.AsyncHTTPTransport(), limit, on_too_large),
            event_hooks={"request": [same_origin_credentials]},
        )

    return factory
