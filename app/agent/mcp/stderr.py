"""A stdio MCP server's stderr: logged line by line, scrubbed, its last lines kept to say why it stopped.

A server that exits at once (a missing module, a bad argument) leaves the client only "Connection
closed"; what it printed says why. :class:`StderrTail` is one pipe per start of the server: the
child writes its stderr into it, the event loop reads it line by line, logs each line (logger
``app.agent.mcp.stderr``, field ``mcp_server``; so the formatter removes every secret it knows,
the server's expanded values included, as from any other line) and keeps the last :data:`KEPT`
lines for the "unavailable" message (redacted by the server before it is shown).
Our copy of the pipe's write end is closed once the child was started (:meth:`StderrTail.started`),
so the pipe ends when the child does and :meth:`StderrTail.last_lines` can wait for that.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
from typing import TextIO

__all__ = ["KEPT", "StderrTail"]

log = logging.getLogger(__name__)

#: Lines kept (the message shows the last few of them).
KEPT = 20
# Bound on one kept line: a server printing a huge line must not make a huge message.
_LINE_CHARS = 300
# Bound on one logged line.
_LOGGED_CHARS = 4000


class _Reader(asyncio.Protocol):
    def __init__(self, tail: StderrTail) -> None:
        self.tail = tail
        self.partial = b""

    def data_received(self, data: bytes) -> None:
        *lines, self.partial = (self.partial + data).split(b"\n")
        for line in lines:
            self.tail.add(line)
        if len(self.partial) > 64 * 1024:  # a line without an end: keep its start
            self.tail.add(self.partial)
            self.partial = b""

    def eof_received(self) -> bool | None:
        if self.partial:
            self.tail.add(self.partial)
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.tail.ended.set()


class StderrTail:
    """One start's stderr pipe: ``writer`` goes to the child; ``lines`` are the last ones it wrote."""

    def __init__(self, writer: TextIO, ended: asyncio.Event, server: str = "") -> None:
        self.writer = writer
        self.ended = ended
        self.server = server
        self.lines: collections.deque[str] = collections.deque(maxlen=KEPT)
        self._transport: asyncio.BaseTransport | None = None

    @classmethod
    async def open(cls, server: str = "") -> StderrTail:
        """A pipe for a start of the server named ``server`` (named on each line logged)."""
        read_fd, write_fd = os.pipe()
        writer = os.fdopen(write_fd, "w", encoding="utf-8", errors="replace")
        tail = cls(writer, asyncio.Event(), server)
        reading = os.fdopen(read_fd, "rb", buffering=0)
        loop = asyncio.get_running_loop()
        tail._transport, _ = await loop.connect_read_pipe(lambda: _Reader(tail), reading)
        return tail

    def add(self, raw: bytes) -> None:
        line = raw.decode("utf-8", errors="replace").rstrip("\r")
        if line.strip():
            # Through logging, never straight to our stderr: the formatter scrubs secrets.
            log.info("%s", line[:_LOGGED_CHARS], extra={"fields": {"mcp_server": self.server}})
            self.lines.append(line[:_LINE_CHARS])

    def started(self) -> None:
        """The child has its copy of the write end (or was never started): close ours."""
        if not self.writer.closed:
            self.writer.close()

    async def last_lines(self, count: int = 5, wait: float = 1.0) -> list[str]:
        """The last ``count`` lines, once the child's stderr ended (at most ``wait`` seconds)."""
        self.started()
        try:
            async with asyncio.timeout(wait):
                await self.ended.wait()
        except TimeoutError:
            pass
        return list(self.lines)[-count:]

    def close(self) -> None:
        self.started()
        if self._transport is not None:
            self._transport.close()
