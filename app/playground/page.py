"""The page's HTTP side: the HTML, its static files, the live state and the two write endpoints.

``Page(driver, guard).app()`` is the aiohttp application served on ``HOST:PORT``. The driver
(``server.Playground``) does the work: ``post`` stores a person's message and delivers it,
``click`` sends a signed ``block_actions``; the page follows the workspace over server-sent
events (``/api/events``), one fresh snapshot after every change. ``guard.Guard`` screens
every request first (loopback ``Host``, own ``Origin``, the per-start token, JSON or form bodies).
"""

from __future__ import annotations

import asyncio
import json
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from threadbound_emulator import FakeSlack

from .guard import Guard
from .ways_in import WaysIn
from .workspace import Delivery

#: Largest file a person may attach from the page.
MAX_UPLOAD_BYTES = 20 * 2**20
_STATIC = resources.files(__package__) / "static"
_STATIC_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}


class BadRequest(web.HTTPBadRequest):
    """A 400 whose body is a JSON ``{"error": ...}`` the page shows."""

    def __init__(self, error: str) -> None:
        super().__init__(text=json.dumps({"error": error}), content_type="application/json")


class Driver(Protocol):
    """What the page needs from the playground."""

    slack: FakeSlack

    @property
    def closing(self) -> bool: ...

    def snapshot(self) -> dict[str, Any]: ...

    async def changed(self, after: int) -> int: ...

    async def post(
        self, person: str, channel: str, text: str, thread_ts: str = "", file: tuple[str, bytes] | None = None
    ) -> tuple[str, list[Delivery]]: ...

    async def click(
        self, person: str, channel: str, ts: str, action: dict[str, str], values: dict[str, str] | None = None
    ) -> Delivery: ...

    async def stop_session(self, person: str, channel: str, thread_ts: str) -> Delivery: ...

    async def fast_forward(self) -> dict[str, Any]: ...

    async def open_link(self, person: str, url: str) -> tuple[int, str]: ...

    #: The shortcut, the slash command and the Home tab (``app.playground.ways_in``).
    ways: WaysIn


class Page:
    """The page's routes over ``driver``; ``app()`` builds the aiohttp application."""

    def __init__(self, driver: Driver, guard: Guard) -> None:
        self.driver = driver
        self.guard = guard
        self._streams: set[asyncio.Task[Any]] = set()

    def app(self) -> web.Application:
        page = web.Application(client_max_size=MAX_UPLOAD_BYTES + 2**16, middlewares=[self.guard.middleware])
        page.router.add_get("/", self._index)
        page.router.add_get("/healthz", self._healthz)
        page.router.add_get("/static/{name}", self._static)
        page.router.add_get("/api/state", self._state)
        page.router.add_get("/api/events", self._events)
        page.router.add_post("/api/messages", self._post_message)
        page.router.add_post("/api/click", self._click)
        page.router.add_post("/api/stop", self._stop)
        page.router.add_post("/api/fast-forward", self._fast_forward)
        page.router.add_post("/api/open-link", self._open_link)
        page.router.add_post("/api/shortcut", self._ways_in)
        page.router.add_post("/api/command", self._ways_in)
        page.router.add_post("/api/home", self._ways_in)
        page.router.add_post("/api/home-click", self._ways_in)
        page.router.add_get("/files/{fid}/{name}", self._file)
        page.on_shutdown.append(self._end_streams)
        return page

    async def _index(self, _: web.Request) -> web.Response:
        # The token goes into the page itself: only a page of the same origin can read it.
        page = (_STATIC / "index.html").read_text(encoding="utf-8").replace("{{token}}", self.guard.token)
        return web.Response(text=page, content_type="text/html", headers={"Cache-Control": "no-store"})

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def _static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        kind = _STATIC_TYPES.get(Path(name).suffix)
        resource = _STATIC / name
        if kind is None or "/" in name or not resource.is_file():
            raise web.HTTPNotFound()
        return web.Response(body=resource.read_bytes(), content_type=kind, charset="utf-8")

    async def _state(self, _: web.Request) -> web.Response:
        return web.json_response(self.driver.snapshot())

    async def _events(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        task = asyncio.current_task()
        if task is not None:
            self._streams.add(task)
        try:
            seen = -1
            while not self.driver.closing:
                state = self.driver.snapshot()
                seen = state["version"]
                await response.write(f"data: {json.dumps(state)}\n\n".encode())
                await self.driver.changed(seen)
        except ConnectionResetError:
            pass  # the page went away; the next one gets a fresh snapshot
        finally:
            if task is not None:
                self._streams.discard(task)
        return response

    async def _end_streams(self, _: web.Application) -> None:
        streams = list(self._streams)
        for task in streams:
            task.cancel()
        await asyncio.gather(*streams, return_exceptions=True)

    async def _post_message(self, request: web.Request) -> web.Response:
        file = None
        if request.content_type == "multipart/form-data":
            form = await request.post()
            fields = {k: v for k, v in form.items() if isinstance(v, str)}
            upload = form.get("file")
            if isinstance(upload, web.FileField) and upload.filename:
                file = (Path(upload.filename).name, upload.file.read())
        else:
            try:
                body = await request.json()
            except ValueError as exc:
                raise BadRequest("the body must be JSON or a form") from exc
            fields = {k: str(v) for k, v in body.items()} if isinstance(body, dict) else {}
        try:
            ts, deliveries = await self.driver.post(
                fields.get("as", ""),
                fields.get("channel", ""),
                fields.get("text", ""),
                fields.get("thread_ts", ""),
                file,
            )
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc
        return web.json_response({"ts": ts, "deliveries": [d.status for d in deliveries]})

    async def _click(self, request: web.Request) -> web.Response:
        body = await _json_object(request)
        try:
            values = body.get("values") or {}
            if not isinstance(values, dict):
                raise ValueError("values must be an object of the card's inputs")
            delivery = await self.driver.click(
                str(body.get("as") or ""),
                str(body.get("channel") or ""),
                str(body.get("ts") or ""),
                body,
                {str(k): str(v) for k, v in values.items()},
            )
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc
        return web.json_response({"status": delivery.status})

    async def _stop(self, request: web.Request) -> web.Response:
        """Stop on a thread's agent session: ``{as, channel, thread_ts}``."""
        body = await _json_object(request)
        who, channel, thread = (str(body.get(k) or "") for k in ("as", "channel", "thread_ts"))
        try:
            delivery = await self.driver.stop_session(who, channel, thread)
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc
        return web.json_response({"status": delivery.status})

    async def _ways_in(self, request: web.Request) -> web.Response:
        """The shortcut on a message, a slash command, opening the Home tab, a click on it."""
        body = await _json_object(request)
        field = {k: str(body.get(k) or "") for k in ("as", "channel", "ts", "text", "action_id", "value")}
        ways, person = self.driver.ways, field["as"]
        try:
            if request.path == "/api/shortcut":
                delivery = await ways.shortcut(person, field["channel"], field["ts"])
            elif request.path == "/api/command":
                delivery = await ways.command(person, field["channel"], field["text"])
            elif request.path == "/api/home":
                delivery = await ways.open_home(person)
            else:
                delivery = await ways.home_click(person, field["action_id"], field["value"])
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc
        return web.json_response({"status": delivery.status})

    async def _open_link(self, request: web.Request) -> web.Response:
        """The person opens a link of a private note they were shown (a per-person MCP server's
        "connect" link): the emulator's browser follows it as them; the last page's text comes back."""
        body = await _json_object(request)
        try:
            status, text = await self.driver.open_link(str(body.get("as") or ""), str(body.get("url") or ""))
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc
        return web.json_response({"status": status, "page": text})

    async def _fast_forward(self, _: web.Request) -> web.Response:
        """Move the demo clock to the next scheduled follow-up, so it fires now."""
        return web.json_response(await self.driver.fast_forward())

    async def _file(self, request: web.Request) -> web.Response:
        stored = self.driver.slack.files.get(request.match_info["fid"])
        if stored is None or stored.content is None:
            raise web.HTTPNotFound()
        # Whatever a person attached is served inert: never run as a page on the playground's origin.
        headers = {
            "Content-Security-Policy": "sandbox; default-src 'none'",
            "X-Content-Type-Options": "nosniff",
        }
        return web.Response(body=stored.content, content_type=stored.mimetype, headers=headers)


async def _json_object(request: web.Request) -> dict[str, Any]:
    """The request's body, which must be a JSON object (else 400)."""
    try:
        body = await request.json()
    except ValueError as exc:
        raise BadRequest("the body must be JSON") from exc
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


__all__ = ["MAX_UPLOAD_BYTES", "BadRequest", "Driver", "Page"]
