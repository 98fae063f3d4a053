"""A stdio MCP server's output, read with a bound on each message.

The MCP SDK reads a stdio server's stdout line by line (one JSON-RPC message a line) with no
limit: a tool printing a gigabyte on one line would be held in memory whole before anything
could cut it. :class:`CappedLines` stands in for the text stream the SDK reads: it passes whole
lines through and keeps at most :data:`~app.agent.mcp.http.MAX_ANSWER_BYTES` of a line being
read; a longer line is dropped as it arrives and replaced by a JSON-RPC error answer to the same
request, so the call fails at once with a clear reason and the server stays usable.

:func:`install` puts it in place of ``TextReceiveStream`` inside ``mcp.client.stdio`` (the only
hook that SDK has); a test reads a server's oversized answer through the real SDK, so a change
in the SDK that bypasses this shows up as a failing test, not as unbounded memory.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

from anyio.streams.text import TextReceiveStream

from .http import MAX_ANSWER_BYTES

__all__ = ["CappedLines", "install"]

# Where a JSON-RPC message's id is found in the head of a line (responses put it first).
_ID = re.compile(r'"id"\s*:\s*("(?:[^"\\]|\\.){0,200}"|-?\d{1,20})')
_HEAD_CHARS = 512


class CappedLines:
    """Text of a stdio server's stdout, whole lines only, each at most ``limit`` characters."""

    limit = MAX_ANSWER_BYTES

    def __init__(self, transport_stream: Any, *args: Any, **kwargs: Any) -> None:
        self._text = TextReceiveStream(transport_stream, *args, **kwargs)
        self._line: list[str] = []
        self._size = 0
        self._head = ""
        self._dropping = False

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        async for chunk in self._text:
            out = self._feed(chunk)
            if out:
                yield out
        if self._line and not self._dropping:
            yield "".join(self._line)

    def _feed(self, chunk: str) -> str:
        out: list[str] = []
        *complete, rest = chunk.split("\n")
        for piece in complete:
            self._take(piece)
            out.append(self._too_large() if self._dropping else "".join(self._line) + "\n")
            self._line, self._size, self._head, self._dropping = [], 0, "", False
        self._take(rest)
        return "".join(out)

    def _take(self, piece: str) -> None:
        """Add ``piece`` to the line being read, or drop the line once it passes the limit."""
        if self._dropping or not piece:
            return
        if len(self._head) < _HEAD_CHARS:
            self._head = (self._head + piece)[:_HEAD_CHARS]
        self._size += len(piece)
        if self._size > self.limit:
            self._line, self._dropping = [], True
        else:
            self._line.append(piece)

    def _too_large(self) -> str:
        """The error answer standing in for a dropped line (nothing, for a line without an id)."""
        match = _ID.search(self._head)
        if match is None:
            return ""
        answer = {
            "jsonrpc": "2.0",
            "id": json.loads(match.group(1)),
            "error": {
                "code": -32603,
                "message": f"the server's answer was larger than {self.limit // 2**20} MiB; it was not read",
            },
        }
        return json.dumps(answer) + "\n"


def install() -> None:
    """Read every stdio MCP server through :class:`CappedLines` (idempotent)."""
    import mcp.client.stdio as sdk_stdio  # here, not above: only a process with MCP servers loads the SDK

    sdk_stdio.TextReceiveStream = CappedLines  # type: ignore[misc,assignment]
