"""What the HTTP edge's own process (``app.intake.edge_child``) and the service's process say to
each other, and how the edge hands a request it does not answer to the service.

The wire is a Unix socket pair, one JSON object a line. The service says ``hello`` once (who the
bot is, where its own web app listens) and nothing after; closing its end means it is gone. The
edge says ``ready`` (or ``failed``) once, then per delivery: ``wake`` (a claimed message's task,
the delivery's span context when tracing is on, and the author when the claim created the task),
``external`` (the one-time note for an external author), ``delivered`` (the delivery's outcome,
for the metrics), ``status`` (``setting`` before a new conversation's wake-up, then ``ok`` or
``failed``: the thinking status the edge sets, ``app.intake.edge_status``), ``slack_call`` (each
Slack call it made, for the metrics), and ``busy``/``quiet`` when its first delivery in flight
arrives or its last is answered (the service's :class:`~app.runs.ack_gate.AckGate`). Lines
written in one turn of the edge's loop leave in one write: a burst of deliveries costs a system
call per lap, not per delivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from app import traces

from .ingress import IngressResult
from .router import Decision

log = logging.getLogger(__name__)

#: Seconds a request handed to the service may take (a click's answer, /readyz, /metrics).
FORWARD_TIMEOUT = 30.0
#: Headers of one hop only, not passed on in either direction.
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)


def line(**message: Any) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


class ToService:
    """The edge's side of the wire: wake-ups, notes, outcomes and its deliveries in flight.

    It stands in for the scheduler (``notify``), the external-user note (``external``), the
    delivery metrics (``delivered``) and the ack gate (``acking``) of the edge's ingress and app."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._messages: list[dict[str, Any]] = []
        self._in_flight = 0

    def send(self, **message: Any) -> None:
        self._messages.append(message)
        if len(self._messages) == 1:
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        messages, self._messages = self._messages, []
        for message in messages:
            if message["t"] == "wake":
                # The claimed deliveries' spans, recorded once the claim returned (just after the
                # wake-up was queued): the service's run becomes their child (app.traces).
                message["spans"] = traces.DELIVERIES.take_portable(message["task"])
        data = b"".join(line(**message) for message in messages)
        if data and not self._writer.is_closing():
            self._writer.write(data)

    async def drain(self) -> None:
        """Write what is queued and wait until it left."""
        self._flush()
        with contextlib.suppress(ConnectionError):
            await self._writer.drain()

    def notify(self, task_id: str, author: str | None = None, message: tuple[str, str] | None = None) -> None:
        self.send(t="wake", task=task_id, author=author, message=message)

    def external(self, decision: Decision) -> None:
        self.send(t="external", decision=asdict(decision))

    def delivered(self, result: IngressResult, body: dict[str, Any]) -> None:
        self.send(t="delivered", status=result.status, outcome=result.outcome)

    def slack_call(self, method: str, outcome: str, seconds: float) -> None:
        self.send(t="slack_call", method=method, outcome=outcome, seconds=seconds)

    @property
    def in_flight(self) -> int:
        """Deliveries the edge is answering now."""
        return self._in_flight

    @contextlib.contextmanager
    def acking(self) -> Iterator[None]:
        self._in_flight += 1
        if self._in_flight == 1:
            self.send(t="busy")
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self.send(t="quiet")


class Forwarder:
    """Hands a request to the service's web app on its Unix socket and answers with its answer
    (503 when the service cannot be reached in time)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._session: aiohttp.ClientSession | None = None

    async def __call__(self, request: web.Request, raw: bytes) -> web.StreamResponse:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.UnixConnector(path=self._path),
                timeout=aiohttp.ClientTimeout(total=FORWARD_TIMEOUT),
                auto_decompress=False,
            )
        headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in _HOP)
        try:
            async with self._session.request(
                request.method,
                f"http://service{request.path_qs}",
                data=raw,
                headers=headers,
                allow_redirects=False,
            ) as answer:
                body = await answer.read()
                kept = CIMultiDict((k, v) for k, v in answer.headers.items() if k.lower() not in _HOP)
                return web.Response(status=answer.status, body=body, headers=kept)
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("could not hand %s %s to the service: %s", request.method, request.path, exc)
            return web.Response(status=503, text="service unavailable")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
