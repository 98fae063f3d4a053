"""Socket Mode: ``apps.connections.open`` and the WebSocket Slack sends envelopes over.

The protocol, as Slack documents it and slack-sdk's clients speak it:

- ``apps.connections.open`` with the app-level token (``xapp-…``) answers a one-use
  ``wss://`` URL (here ``ws://127.0.0.1:PORT/link/?ticket=…``); a ticket opens one connection.
- On connecting the app receives ``{"type": "hello", "num_connections": N, ...}``.
- Every delivery is an envelope ``{envelope_id, type: "events_api" | "interactive",
  payload, accepts_response_payload, retry_attempt, retry_reason}`` sent on one of
  the app's open connections (round robin here); ``payload`` is exactly the body
  Slack would POST over HTTP. The app acknowledges with ``{"envelope_id": …}`` (and
  an optional ``payload``), on any of its connections.
- An envelope not acknowledged when its connection closes (or when
  :meth:`SocketMode.redeliver_unacked` is called: Slack's ack timeout) is sent again
  with ``retry_attempt`` one higher and ``retry_reason: "timeout"``, at most
  :data:`MAX_RETRIES` times, on an open connection or the next one to open.
- ``{"type": "disconnect", "reason": "refresh_requested" | "warning" | …}`` asks the app
  to reconnect; the emulator closes that connection ``grace`` seconds later unless the
  app closed it first. :meth:`SocketMode.drop` closes a connection without a close frame
  (a dropped socket).

Deliberate choice: acks are accepted on any connection of the app (what Slack does with
an ack on another connection is not documented; an ack it ignored only means a retry).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import secrets
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import WSMsgType, web

from .wire import JSON

#: Slack retries an unacknowledged envelope up to three times.
MAX_RETRIES = 3
#: The path of the WebSocket endpoint ``apps.connections.open`` points at.
LINK_PATH = "/link/"

EnvelopeType = Literal["events_api", "interactive", "slash_commands"]


@dataclass
class Envelope:
    """One delivery over the socket, with its acknowledgement."""

    envelope_id: str
    type: str
    payload: JSON
    accepts_response_payload: bool = False
    retry_attempt: int = 0
    retry_reason: str = ""
    #: Set once the app acknowledged the envelope (an ack held by ``hold_acks`` does not count).
    acked: asyncio.Event = field(default_factory=asyncio.Event)
    #: The ``payload`` of the ack, if it had one.
    ack_payload: JSON | None = None
    #: Ids of the connections it was sent on, in order (one per attempt).
    sent_on: list[int] = field(default_factory=list)
    #: Retries exhausted without an ack: Slack gives up on it.
    abandoned: bool = False

    def message(self) -> JSON:
        """The envelope as it goes over the wire."""
        body: JSON = {
            "envelope_id": self.envelope_id,
            "type": self.type,
            "payload": self.payload,
            "accepts_response_payload": self.accepts_response_payload,
            "retry_attempt": self.retry_attempt,
            "retry_reason": self.retry_reason,
        }
        return body


@dataclass
class Connection:
    """One open WebSocket of the app."""

    id: int
    ws: web.WebSocketResponse
    request: web.Request
    #: Every JSON message the app sent on it, in order.
    received: list[JSON] = field(default_factory=list)
    closed: asyncio.Event = field(default_factory=asyncio.Event)


class SocketMode:
    """The app's Socket Mode side of the workspace; ``FakeSlack.socket``. See the module docstring."""

    def __init__(self, app_id: str) -> None:
        self.app_id = app_id
        self.base_url = ""
        #: Open connections, oldest first.
        self.connections: list[Connection] = []
        #: Every envelope sent, by id.
        self.envelopes: dict[str, Envelope] = {}
        #: How many connections were ever opened.
        self.opened = 0
        #: Acks received while ``hold_acks`` was on (envelope ids), never applied.
        self.held_acks: list[str] = []
        self._tickets: set[str] = set()
        self._ids = itertools.count(1)
        self._next = 0
        self._pending: list[Envelope] = []
        self._holding = False
        self._changed = asyncio.Event()
        self._closers: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ the app's side

    def open_url(self) -> JSON:
        """The answer of ``apps.connections.open``: a fresh one-use WebSocket URL."""
        ticket = secrets.token_hex(8)
        self._tickets.add(ticket)
        url = (
            f"{self.base_url.replace('http://', 'ws://', 1)}{LINK_PATH}?ticket={ticket}&app_id={self.app_id}"
        )
        return {"url": url}

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """The WebSocket endpoint: hello, envelopes out, acks in."""
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            return web.Response(status=401, text="invalid or used ticket: call apps.connections.open")
        self._tickets.discard(ticket)
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        conn = Connection(next(self._ids), ws, request)
        self.connections.append(conn)
        self.opened += 1
        try:
            await ws.send_json(self._hello())
            self._flush()
            self._notify()
            async for message in ws:
                if message.type == WSMsgType.TEXT:
                    self._receive(conn, message.data)
        finally:
            self._closed(conn)
        return ws

    def _hello(self) -> JSON:
        return {
            "type": "hello",
            "num_connections": len(self.connections),
            "debug_info": {"host": "emulator", "approximate_connection_time": 18060},
            "connection_info": {"app_id": self.app_id},
        }

    def _receive(self, conn: Connection, data: str) -> None:
        try:
            message = json.loads(data)
        except json.JSONDecodeError:
            return
        if not isinstance(message, dict):
            return
        conn.received.append(message)
        envelope = self.envelopes.get(str(message.get("envelope_id") or ""))
        if envelope is None or envelope.acked.is_set():
            return
        if self._holding:
            self.held_acks.append(envelope.envelope_id)
        else:
            payload = message.get("payload")
            envelope.ack_payload = payload if isinstance(payload, dict) else None
            envelope.acked.set()
        self._notify()

    def _closed(self, conn: Connection) -> None:
        if conn in self.connections:
            self.connections.remove(conn)
        conn.closed.set()
        # Whatever was last sent on this connection and not acknowledged goes out again.
        for envelope in list(self.envelopes.values()):
            if envelope.sent_on and envelope.sent_on[-1] == conn.id and not envelope.acked.is_set():
                if envelope not in self._pending:
                    self._retry(envelope)
        self._notify()

    # ------------------------------------------------------------------ deliveries

    def send(self, kind: EnvelopeType, payload: JSON, *, accepts_response_payload: bool = False) -> Envelope:
        """Deliver ``payload`` in a new envelope (now, or when a connection opens); returns it."""
        envelope = Envelope(f"{uuid.uuid4()}", kind, payload, accepts_response_payload)
        self.envelopes[envelope.envelope_id] = envelope
        self._pending.append(envelope)
        self._flush()
        return envelope

    def event(self, body: JSON) -> Envelope:
        """An Events API ``event_callback`` body (``events.envelope``…) as Socket Mode sends it."""
        return self.send("events_api", body)

    def interaction(self, payload: JSON) -> Envelope:
        """An interaction payload (``events.block_actions``…) as Socket Mode sends it."""
        return self.send("interactive", payload, accepts_response_payload=True)

    def redeliver_unacked(self) -> list[Envelope]:
        """What Slack does when an ack is late: every unacknowledged envelope goes out again."""
        late = [e for e in self.envelopes.values() if not e.acked.is_set() and not e.abandoned]
        for envelope in late:
            if envelope not in self._pending:
                self._retry(envelope)
        return late

    def _retry(self, envelope: Envelope) -> None:
        if envelope.retry_attempt >= MAX_RETRIES:
            envelope.abandoned = True
            return
        envelope.retry_attempt += 1
        envelope.retry_reason = "timeout"
        self._pending.append(envelope)
        self._flush()

    def _flush(self) -> None:
        while self._pending and self.connections:
            envelope = self._pending.pop(0)
            conn = self.connections[self._next % len(self.connections)]
            self._next += 1
            envelope.sent_on.append(conn.id)
            self._spawn(self._send(conn, envelope))

    async def _send(self, conn: Connection, envelope: Envelope) -> None:
        try:
            await conn.ws.send_json(envelope.message())
        except (ConnectionError, RuntimeError):
            pass  # the connection is closing: _closed sends it again
        self._notify()

    # ------------------------------------------------------------------ acks, disconnects

    def hold_acks(self) -> None:
        """From now on, acks are recorded in ``held_acks`` and ignored, as if they were lost."""
        self._holding = True

    def release_acks(self) -> None:
        """Apply acks again from now on (held ones stay lost: their envelopes will be retried)."""
        self._holding = False

    async def disconnect(self, reason: str = "refresh_requested", *, grace: float = 2.0) -> None:
        """Send ``disconnect`` on every open connection, and close each ``grace`` s later unless the
        app closed it first."""
        for conn in list(self.connections):
            message = {"type": "disconnect", "reason": reason, "debug_info": {"host": "emulator"}}
            with contextlib.suppress(ConnectionError, RuntimeError):
                await conn.ws.send_json(message)
            self._spawn(self._close_later(conn, grace))

    async def _close_later(self, conn: Connection, grace: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(conn.closed.wait(), grace)
        if not conn.closed.is_set():
            await conn.ws.close()

    def drop(self, conn: Connection | None = None) -> None:
        """Cut ``conn`` (default: every open connection) without a close frame: a dropped socket."""
        for each in [conn] if conn is not None else list(self.connections):
            if each.request.transport is not None:
                each.request.transport.abort()

    async def close(self) -> None:
        """Close every connection (the emulator is stopping)."""
        for conn in list(self.connections):
            with contextlib.suppress(ConnectionError, RuntimeError):
                await conn.ws.close()
        for task in list(self._closers):
            task.cancel()
        await asyncio.gather(*self._closers, return_exceptions=True)

    # ------------------------------------------------------------------ waiting

    async def wait_connections(self, count: int = 1, *, opened: int = 0) -> None:
        """Until ``count`` connections are open and at least ``opened`` were ever opened. Bound it
        with ``asyncio.timeout``."""
        while len(self.connections) < count or self.opened < opened:
            await self._wait()

    async def wait_acked(self, envelope: Envelope) -> None:
        """Until ``envelope`` is acknowledged. Bound it with ``asyncio.timeout``."""
        await envelope.acked.wait()

    async def wait_held_ack(self, envelope: Envelope) -> None:
        """Until an ack of ``envelope`` arrived while acks were held."""
        while envelope.envelope_id not in self.held_acks:
            await self._wait()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._closers.add(task)
        task.add_done_callback(self._closers.discard)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait(self) -> None:
        await self._changed.wait()


__all__ = ["LINK_PATH", "MAX_RETRIES", "Connection", "Envelope", "SocketMode"]
