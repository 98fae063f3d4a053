"""A TCP proxy a test can freeze: a database that stops answering without closing anything.

``freeze()`` keeps every connection open but forwards nothing more either way (a failover, a
network partition); ``thaw()`` closes the frozen connections (as a dead peer's would end) and
forwards new ones again. ``pause()`` holds every byte either way, new connections included, and
``resume()`` lets them through again with every connection still open (a database that stalls for a
while, then answers). ``upstream_ports()`` are the local ports of the proxy's own connections to the
target (what the target sees as its clients, e.g. ``pg_stat_activity.client_port``).
"""

from __future__ import annotations

import asyncio
import contextlib


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._frozen = asyncio.Event()
        self._writers: set[asyncio.StreamWriter] = set()
        self._pipes: set[asyncio.Task[None]] = set()
        self._upstream: set[asyncio.StreamWriter] = set()
        #: Set while bytes flow; cleared by ``pause()``.
        self._flowing = asyncio.Event()
        self._flowing.set()

    async def start(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def freeze(self) -> None:
        self._frozen.set()

    def pause(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def upstream_ports(self) -> list[int]:
        return [
            w.get_extra_info("sockname")[1]
            for w in self._upstream
            if not w.is_closing() and w.get_extra_info("sockname")
        ]

    def thaw(self) -> None:
        """Close every connection (frozen ones included) and forward new ones again."""
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()
        self._upstream.clear()
        self._frozen = asyncio.Event()

    async def stop(self) -> None:
        self.thaw()
        for pipe in list(self._pipes):
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._frozen.is_set():
            self._writers.add(writer)  # accepted, never answered
            return
        await self._flowing.wait()
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        self._upstream.add(up_writer)
        frozen = self._frozen
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            pipe = asyncio.create_task(self._pipe(source, sink, frozen, self._flowing))
            self._pipes.add(pipe)
            pipe.add_done_callback(self._pipes.discard)

    @staticmethod
    async def _pipe(
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        frozen: asyncio.Event,
        flowing: asyncio.Event,
    ) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await source.read(65536):
                if frozen.is_set():
                    await asyncio.Event().wait()  # hold everything from now on
                await flowing.wait()
                sink.write(data)
                await sink.drain()
        sink.transport.abort()
