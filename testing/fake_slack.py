"""A fake Slack: Web API and file host on one real aiohttp server on 127.0.0.1.

Point ``slack_sdk``'s ``AsyncWebClient(base_url=slack.api_url)`` (the app's
``SLACK_API_URL``) at it. It answers like Slack's Web API: HTTP 200 with
``{"ok": true, ...}`` or ``{"ok": false, "error": "..."}``, form-encoded, query
or JSON parameters, the bearer token checked on every call.

Workspace state is set up with ``add_user`` / ``add_channel`` / ``add_message`` /
``add_file``; every API call is recorded in ``calls`` and every file GET in
``file_requests``. Faults: ``fail`` (an error answer, 429 with ``Retry-After``),
``drop`` (apply the call, then close the connection without an answer) and
``hold`` (apply the call, then keep the answer back until ``release``).

Deliberate choices where Slack's behaviour is unknown or irrelevant are noted
at the method that makes them.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import copy
import hashlib
import json
import mimetypes
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

JSON = dict[str, Any]
FileMode = Literal["ok", "html_signin", "redirect", "long", "huge"]
ChunkSource = Callable[[], Iterable[bytes]]

DEFAULT_SCOPES: tuple[str, ...] = (
    "app_mentions:read",
    "chat:write",
    "reactions:read",
    "reactions:write",
    "channels:history",
    "groups:history",
    "im:history",
    "mpim:history",
    "channels:read",
    "groups:read",
    "im:read",
    "mpim:read",
    "files:read",
    "files:write",
    "users:read",
    "canvases:write",
    "assistant:write",
)

SIGNIN_HTML = (
    b'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Slack</title></head>'
    b'<body><h1>Sign in to your workspace</h1><form action="/signin" method="post">'
    b'<input name="domain"></form></body></html>'
)

MAX_BLOCKS = 50
MAX_MARKDOWN_CHARS = 12_000
MAX_TEXT_CHARS = 40_000
MAX_SECTION_TEXT = 3_000
HUGE_DECLARED_SIZE = 200 * 2**20
LONG_EXTRA_BYTES = 64 * 1024
CHUNK_SIZE = 256 * 1024
REACTION_NAME = re.compile(r"[a-z0-9_+'-]+")
FAKE_HOST = "https://fake.slack.com"


class SlackError(Exception):
    """Raised inside a method handler: answered as ``{"ok": false, "error": code, **extra}``."""

    def __init__(self, code: str, **extra: Any) -> None:
        super().__init__(code)
        self.code = code
        self.extra = extra


@dataclass
class Call:
    """One Web API call as the fake received it (``token`` removed from ``params``)."""

    method: str
    params: dict[str, Any]
    #: The JSON answer (``None`` while the call is held, or if it was dropped before answering).
    response: JSON | None = None


@dataclass
class FileRequest:
    """One request to the file host (``/files/...`` or the sign-in page)."""

    method: str
    path: str
    #: ``Host`` header: ``127.0.0.1:PORT`` for ``files_origin``, ``localhost:PORT`` for ``other_origin``.
    host: str
    file_id: str | None
    #: ``"file"``, ``"download"``, ``"mp4_low"`` or ``"signin"``.
    variant: str
    #: An ``Authorization`` header was sent (right or wrong).
    sent_authorization: bool
    #: The header was exactly ``Bearer <token>``.
    authorized: bool
    status: int
    #: What was served: ``"file"``, ``"signin"``, ``"redirect"``, ``"long"``, ``"not_found"``.
    served: str


@dataclass
class Status:
    """One accepted ``assistant.threads.setStatus`` call."""

    channel_id: str
    thread_ts: str
    status: str


@dataclass
class _Fault:
    kind: Literal["fail", "drop"]
    times: int | None
    error: str = ""
    status: int = 200
    retry_after: int | None = None


@dataclass
class _Hold:
    began: asyncio.Event = field(default_factory=asyncio.Event)
    gate: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class _Channel:
    id: str
    name: str
    is_im: bool = False
    is_private: bool = False
    is_mpim: bool = False
    user: str | None = None


@dataclass
class _User:
    id: str
    name: str
    display_name: str = ""
    real_name: str = ""
    is_bot: bool = False
    bot_id: str | None = None


@dataclass
class _File:
    id: str
    name: str
    title: str
    mimetype: str
    content: bytes | None
    size: int
    mode: FileMode = "ok"
    declared_size: int | None = None
    chunk_source: ChunkSource | None = None
    mp4_low: bytes | None = None
    foreign: bool = False
    user: str = ""
    created: int = 0
    shares: dict[str, dict[str, list[JSON]]] = field(default_factory=dict)
    #: Deterministic filler block for ``content=None`` files (see ``FakeSlack.add_file``).
    _block: bytes | None = None

    def chunks(self) -> Iterator[bytes]:
        """The file's bytes in pieces, never as one object (except ``content`` itself)."""
        if self.content is not None:
            view = memoryview(self.content)
            for start in range(0, len(view), CHUNK_SIZE):
                yield bytes(view[start : start + CHUNK_SIZE])
            return
        if self.chunk_source is not None:
            yield from self.chunk_source()
            return
        block = self._block or _pattern_block(self.id)
        left = self.size
        while left > 0:
            piece = block if left >= len(block) else block[:left]
            left -= len(piece)
            yield piece


@dataclass
class _Canvas:
    id: str
    title: str
    markdown: str
    channel_id: str | None = None
    access: list[JSON] = field(default_factory=list)


@dataclass
class _Upload:
    file_id: str
    filename: str
    length: int
    alt_txt: str | None = None
    data: bytes | None = None


def _pattern_block(seed: str) -> bytes:
    """A CHUNK_SIZE block of deterministic, non-repeating-looking bytes derived from ``seed``."""
    out = bytearray()
    digest = hashlib.sha256(seed.encode()).digest()
    while len(out) < CHUNK_SIZE:
        out += digest
        digest = hashlib.sha256(digest).digest()
    return bytes(out[:CHUNK_SIZE])


def _ts_key(ts: str) -> tuple[int, int]:
    secs, _, micros = ts.partition(".")
    return int(secs), int(micros or 0)


def _ts_from_micros(value: int) -> str:
    return f"{value // 1_000_000}.{value % 1_000_000:06d}"


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in {"1", "true", "yes"}
    return bool(value)


def _as_json(value: Any, error: str) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise SlackError(error) from exc
    return value


def _as_list(value: Any) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    text = str(value).strip()
    if text.startswith("["):
        loaded = _as_json(text, "invalid_arguments")
        if not isinstance(loaded, list):
            raise SlackError("invalid_arguments")
        return [str(v) for v in loaded]
    return [part.strip() for part in text.split(",") if part.strip()]


def _as_int(value: Any, default: int) -> int:
    if value is None or value == "":
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _encode_cursor(ts: str) -> str:
    return base64.urlsafe_b64encode(f"next_ts:{ts}".encode()).decode()


def _decode_cursor(cursor: str) -> tuple[int, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise SlackError("invalid_cursor") from exc
    prefix, _, ts = raw.partition(":")
    if prefix != "next_ts" or not re.fullmatch(r"\d+\.\d{6}", ts):
        raise SlackError("invalid_cursor")
    return _ts_key(ts)


def _filetype(name: str) -> str:
    if "." in name:
        return name.rsplit(".", 1)[1].lower()
    return "binary"


class FakeSlack:
    """A fake Slack workspace served over real HTTP; see the module docstring."""

    def __init__(
        self,
        token: str = "xoxb-test",
        scopes: Iterable[str] | None = None,
        *,
        bot_user_id: str = "UBOT",
        bot_id: str = "BBOT",
        team_id: str = "T1",
        app_id: str = "A1",
        bot_name: str = "threadbound",
    ) -> None:
        self.token = token
        self.scopes: list[str] = list(DEFAULT_SCOPES if scopes is None else scopes)
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.team_id = team_id
        self.team = "Fake Team"
        self.app_id = app_id
        self.bot_name = bot_name
        #: Slack's behaviour here is disputed: when True, every page of
        #: ``conversations.replies`` after the first starts with the root again.
        self.replies_repeat_root = False

        self.calls: list[Call] = []
        self.file_requests: list[FileRequest] = []
        self.statuses: list[Status] = []
        self.canvases: dict[str, _Canvas] = {}

        self._users: dict[str, _User] = {}
        self._channels: dict[str, _Channel] = {}
        self._messages: dict[str, list[JSON]] = {}
        self._files: dict[str, _File] = {}
        self._uploads: dict[str, _Upload] = {}
        self._faults: dict[str, list[_Fault]] = {}
        self._holds: dict[str, _Hold] = {}
        self._clock = 1_700_000_000_000_000
        self._ids = 0
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self.add_user(bot_user_id, bot_name, display_name=bot_name, real_name=bot_name, is_bot=True)
        self._users[bot_user_id].bot_id = bot_id

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> FakeSlack:
        """Start serving on 127.0.0.1 with an OS-chosen port."""
        if self._runner is not None:
            return self
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/files/{fid}/download/{name}", self._file_download)
        app.router.add_get("/files/{fid}/mp4_low/{name}", self._file_mp4_low)
        app.router.add_get("/files/{fid}/{name}", self._file_plain)
        app.router.add_get("/signin", self._signin)
        app.router.add_post("/upload/v1/{fid}", self._upload)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runner = runner
        self._port = int(runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        """Release every hold and close the server and its connections."""
        for hold in self._holds.values():
            hold.gate.set()
        self._holds.clear()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> FakeSlack:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("FakeSlack is not started")
        return self._port

    @property
    def api_url(self) -> str:
        """Web API base URL, with the trailing slash slack_sdk expects."""
        return f"http://127.0.0.1:{self.port}/api/"

    @property
    def files_origin(self) -> str:
        """The origin files are served from (put it in ``SLACK_FILE_ORIGINS``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def other_origin(self) -> str:
        """The same server under a different origin string, for refusal tests."""
        return f"http://localhost:{self.port}"

    def web_client(self, token: str | None = None, **kwargs: Any) -> Any:
        """An ``AsyncWebClient`` pointed at this fake (``kwargs`` passed through)."""
        from slack_sdk.web.async_client import AsyncWebClient

        return AsyncWebClient(token=token or self.token, base_url=self.api_url, **kwargs)

    # ------------------------------------------------------------------ workspace set-up

    def next_ts(self) -> str:
        """A new ts, strictly greater than every ts handed out or stored so far."""
        self._clock += 100
        return _ts_from_micros(self._clock)

    def _new_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}{self._ids:07d}"

    def add_user(
        self,
        id: str,
        name: str,
        display_name: str = "",
        real_name: str = "",
        is_bot: bool = False,
    ) -> None:
        """Add (or replace) a user."""
        self._users[id] = _User(id, name, display_name, real_name, is_bot)

    def add_channel(
        self,
        id: str,
        name: str,
        is_im: bool = False,
        user: str | None = None,
        *,
        is_private: bool = False,
        is_mpim: bool = False,
    ) -> None:
        """Add (or replace) a conversation; an IM names the other party in ``user``."""
        self._channels[id] = _Channel(id, name, is_im, is_private or is_im or is_mpim, is_mpim, user)
        self._messages.setdefault(id, [])

    def add_message(
        self,
        channel: str,
        text: str,
        user: str,
        thread_ts: str | None = None,
        files: list[JSON] | None = None,
        bot_id: str | None = None,
        ts: str | None = None,
        *,
        blocks: list[JSON] | None = None,
        metadata: JSON | None = None,
        subtype: str | None = None,
    ) -> str:
        """Store a message as if someone had posted it; returns its ts.

        An unknown ``channel`` is created (named after its id). ``files`` are file
        objects as they appear in messages (see ``file_object``). A ``thread_ts``
        must name a top-level message already stored in the channel.
        """
        if channel not in self._channels:
            self.add_channel(channel, channel.lower())
        if ts is None:
            ts = self.next_ts()
        else:
            key = _ts_key(ts)
            if any(_ts_key(m["ts"]) == key for m in self._messages[channel]):
                raise ValueError(f"a message with ts {ts} already exists in {channel}")
            self._clock = max(self._clock, key[0] * 1_000_000 + key[1])
        message: JSON = {"type": "message", "user": user, "text": text, "ts": ts, "team": self.team_id}
        if subtype:
            message["subtype"] = subtype
        if bot_id:
            message["bot_id"] = bot_id
        if blocks is not None:
            message["blocks"] = copy.deepcopy(blocks)
        if files:
            message["files"] = copy.deepcopy(files)
            message["upload"] = False
        if metadata is not None:
            message["metadata"] = copy.deepcopy(metadata)
        if thread_ts is not None and thread_ts != ts:
            root = self._find(channel, thread_ts)
            if root is None or self._is_reply(root):
                raise ValueError(f"no thread root {thread_ts} in {channel}")
            self._attach_reply(root, message)
        self._insert(channel, message)
        return ts

    def add_reaction(self, channel: str, ts: str, name: str, user: str) -> None:
        """Add someone's reaction to a stored message."""
        message = self._find(channel, ts)
        if message is None:
            raise ValueError(f"no message {ts} in {channel}")
        self._react(message, name, user)

    def add_file(
        self,
        id: str,
        name: str,
        mimetype: str,
        content: bytes | ChunkSource | None = None,
        mode: FileMode = "ok",
        declared_size: int | None = None,
        mp4_low: bytes | None = None,
        *,
        size: int | None = None,
        title: str | None = None,
        user: str = "",
        foreign: bool = False,
    ) -> None:
        """Add a downloadable file.

        ``content`` is the bytes, or a callable returning an iterable of chunks
        (then ``size`` is required), or ``None`` with ``size``: deterministic bytes
        generated in 256 KiB chunks, so a 100 MiB file never exists as one object
        (``file_sha256`` / ``file_content`` give what is served). ``declared_size``
        is what ``files.info`` reports (default: the real size; mode ``"huge"``
        reports 200 MiB). ``foreign=True`` puts the file's URLs on ``other_origin``.
        """
        if isinstance(content, bytes | bytearray):
            raw = bytes(content)
            data: bytes | None = raw
            real = len(raw)
            source: ChunkSource | None = None
        elif callable(content):
            if size is None:
                raise ValueError("a chunk generator needs size=")
            data, real, source = None, size, content
        else:
            if size is None:
                raise ValueError("content=None needs size=")
            data, real, source = None, size, None
        self._files[id] = _File(
            id=id,
            name=name,
            title=title if title is not None else name,
            mimetype=mimetype,
            content=data,
            size=real,
            mode=mode,
            declared_size=declared_size,
            chunk_source=source,
            mp4_low=mp4_low,
            foreign=foreign,
            user=user,
            created=int(time.time()),
            _block=_pattern_block(id) if data is None and source is None else None,
        )

    def file_object(self, file_id: str) -> JSON:
        """The file as ``files.info`` and message ``files`` show it (needs the server started)."""
        if file_id in self.canvases:
            return self._canvas_object(self.canvases[file_id])
        return self._file_object(self._files[file_id])

    def file_content(self, file_id: str) -> bytes:
        """The bytes mode ``"ok"`` serves for the file (materialised: small files only)."""
        return b"".join(self._files[file_id].chunks())

    def file_sha256(self, file_id: str) -> str:
        """Hex SHA-256 of the bytes mode ``"ok"`` serves, computed chunk by chunk."""
        digest = hashlib.sha256()
        for chunk in self._files[file_id].chunks():
            digest.update(chunk)
        return digest.hexdigest()

    # ------------------------------------------------------------------ inspection

    def count(self, method: str) -> int:
        """How many calls of ``method`` arrived (failed, dropped and held ones included)."""
        return sum(1 for call in self.calls if call.method == method)

    def calls_to(self, method: str) -> list[Call]:
        """The recorded calls of one method, in arrival order."""
        return [call for call in self.calls if call.method == method]

    def messages(self, channel: str, thread_ts: str | None = None) -> list[JSON]:
        """Copies of stored messages: the thread (root first) if ``thread_ts``, else every
        message of the channel, replies included, oldest first."""
        stored = self._messages.get(channel, [])
        if thread_ts is None:
            return copy.deepcopy(stored)
        return copy.deepcopy(self._thread(channel, thread_ts))

    def bot_messages(self, channel: str | None = None) -> list[JSON]:
        """Copies of every message the bot posted (in one channel, or anywhere), oldest first."""
        channels = [channel] if channel is not None else list(self._messages)
        out = [m for c in channels for m in self._messages.get(c, []) if self._is_bots(m)]
        return copy.deepcopy(out)

    def file_bytes_uploaded(self, file_id: str) -> bytes:
        """The bytes an upload (``files_upload_v2``) stored for ``file_id``."""
        data = self._files[file_id].content
        if data is None:
            raise ValueError(f"{file_id} was not uploaded")
        return data

    # ------------------------------------------------------------------ fault injection

    def fail(
        self,
        method: str,
        error: str = "ratelimited",
        status: int | None = None,
        retry_after: int | None = 1,
        times: int | None = 1,
    ) -> None:
        """Answer the next ``times`` calls of ``method`` (``None``: all of them) with ``error``.

        ``status`` defaults to 429 for ``ratelimited`` (with ``Retry-After``), else 200.
        Nothing is applied for a failed call. Faults queue per method, in order.
        """
        if status is None:
            status = 429 if error == "ratelimited" else 200
        fault = _Fault("fail", times, error, status, retry_after if status == 429 else None)
        self._faults.setdefault(method, []).append(fault)

    def drop(self, method: str, times: int | None = 1) -> None:
        """Apply the next ``times`` calls of ``method``, then close the connection unanswered
        (the client sees ``ServerDisconnectedError``: a post happened, the answer was lost)."""
        self._faults.setdefault(method, []).append(_Fault("drop", times))

    def clear_faults(self, method: str | None = None) -> None:
        """Forget pending ``fail``/``drop`` faults (of one method, or all)."""
        if method is None:
            self._faults.clear()
        else:
            self._faults.pop(method, None)

    def hold(self, method: str) -> asyncio.Event:
        """From now on, apply calls of ``method`` and keep their answers back until
        ``release(method)``. Returns the event set when the first held call was applied."""
        hold = self._holds.setdefault(method, _Hold())
        return hold.began

    def held(self, method: str) -> asyncio.Event:
        """The event set once a call of ``method`` is being held (``hold`` must be active)."""
        hold = self._holds.get(method)
        if hold is None:
            raise RuntimeError(f"{method} is not held: call hold({method!r}) first")
        return hold.began

    def release(self, method: str) -> None:
        """Let every held call of ``method`` answer, and stop holding new ones."""
        hold = self._holds.pop(method, None)
        if hold is not None:
            hold.gate.set()

    def _next_fault(self, method: str) -> _Fault | None:
        queue = self._faults.get(method)
        if not queue:
            return None
        fault = queue[0]
        if fault.times is not None:
            fault.times -= 1
            if fault.times <= 0:
                queue.pop(0)
        return fault

    # ------------------------------------------------------------------ HTTP: Web API

    async def _params(self, request: web.Request) -> dict[str, Any]:
        params: dict[str, Any] = dict(request.query)
        if request.can_read_body:
            ctype = request.content_type
            if ctype == "application/json":
                try:
                    body = await request.json()
                except json.JSONDecodeError:
                    body = None
                if isinstance(body, dict):
                    params.update(body)
            elif ctype in ("application/x-www-form-urlencoded", "multipart/form-data"):
                form = await request.post()
                for key, value in form.items():
                    if isinstance(value, str):
                        params[key] = value
            else:
                await request.read()
        return params

    def _answer(
        self, call: Call, body: JSON, status: int = 200, headers: dict[str, str] | None = None
    ) -> web.Response:
        call.response = body
        all_headers = {"x-oauth-scopes": ",".join(self.scopes)}
        all_headers.update(headers or {})
        return web.json_response(body, status=status, headers=all_headers)

    async def _api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        params = await self._params(request)
        token = params.pop("token", None)
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            token = auth[len("Bearer ") :]
        call = Call(method, params)
        self.calls.append(call)
        if token != self.token:
            return self._answer(call, {"ok": False, "error": "invalid_auth"})
        handler = self._methods().get(method)
        if handler is None:
            return self._answer(call, {"ok": False, "error": "unknown_method"})
        fault = self._next_fault(method)
        if fault is not None and fault.kind == "fail":
            headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
            return self._answer(call, {"ok": False, "error": fault.error}, fault.status, headers)
        try:
            needed = self._required_scope(method, params)
            if needed is not None and needed not in self.scopes:
                raise SlackError("missing_scope", needed=needed, provided=",".join(self.scopes))
            body = {"ok": True, **handler(params)}
        except SlackError as exc:
            body = {"ok": False, "error": exc.code, **exc.extra}
        if fault is not None and fault.kind == "drop":
            if request.transport is not None:
                request.transport.abort()
            raise web.HTTPServiceUnavailable()
        hold = self._holds.get(method)
        if hold is not None:
            hold.began.set()
            await hold.gate.wait()
        return self._answer(call, body)

    def _methods(self) -> dict[str, Callable[[dict[str, Any]], JSON]]:
        return {
            "auth.test": self._auth_test,
            "chat.postMessage": self._chat_post_message,
            "chat.update": self._chat_update,
            "chat.delete": self._chat_delete,
            "chat.getPermalink": self._chat_get_permalink,
            "conversations.replies": self._conversations_replies,
            "conversations.history": self._conversations_history,
            "conversations.info": self._conversations_info,
            "users.info": self._users_info,
            "reactions.add": self._reactions_add,
            "reactions.remove": self._reactions_remove,
            "files.info": self._files_info,
            "files.getUploadURLExternal": self._files_get_upload_url,
            "files.completeUploadExternal": self._files_complete_upload,
            "canvases.create": self._canvases_create,
            "canvases.access.set": self._canvases_access_set,
            "assistant.threads.setStatus": self._assistant_set_status,
        }

    def _required_scope(self, method: str, params: dict[str, Any]) -> str | None:
        fixed = {
            "chat.postMessage": "chat:write",
            "chat.update": "chat:write",
            "chat.delete": "chat:write",
            "users.info": "users:read",
            "reactions.add": "reactions:write",
            "reactions.remove": "reactions:write",
            "files.info": "files:read",
            "files.getUploadURLExternal": "files:write",
            "files.completeUploadExternal": "files:write",
            "canvases.create": "canvases:write",
            "canvases.access.set": "canvases:write",
            "assistant.threads.setStatus": "assistant:write",
        }
        if method in fixed:
            return fixed[method]
        if method in ("conversations.replies", "conversations.history", "conversations.info"):
            chan = self._channels.get(str(params.get("channel", "")))
            kind = "channels"
            if chan is not None and chan.is_im:
                kind = "im"
            elif chan is not None and chan.is_mpim:
                kind = "mpim"
            elif chan is not None and chan.is_private:
                kind = "groups"
            return f"{kind}:{'read' if method == 'conversations.info' else 'history'}"
        return None

    # ------------------------------------------------------------------ helpers on messages

    def _channel(self, params: dict[str, Any], key: str = "channel") -> _Channel:
        chan = self._channels.get(str(params.get(key) or ""))
        if chan is None:
            raise SlackError("channel_not_found")
        return chan

    def _find(self, channel: str, ts: str) -> JSON | None:
        try:
            key = _ts_key(ts)
        except ValueError:
            return None
        for message in self._messages.get(channel, []):
            if _ts_key(message["ts"]) == key:
                return message
        return None

    @staticmethod
    def _is_reply(message: JSON) -> bool:
        return "thread_ts" in message and message["thread_ts"] != message["ts"]

    def _is_bots(self, message: JSON) -> bool:
        return message.get("bot_id") == self.bot_id or message.get("user") == self.bot_user_id

    def _insert(self, channel: str, message: JSON) -> None:
        stored = self._messages.setdefault(channel, [])
        key = _ts_key(message["ts"])
        index = len(stored)
        while index > 0 and _ts_key(stored[index - 1]["ts"]) > key:
            index -= 1
        stored.insert(index, message)

    def _attach_reply(self, root: JSON, reply: JSON) -> None:
        reply["thread_ts"] = root["ts"]
        reply["parent_user_id"] = root.get("user", "")
        root["thread_ts"] = root["ts"]
        root["reply_count"] = int(root.get("reply_count", 0)) + 1
        users = list(root.get("reply_users", []))
        if reply.get("user") and reply["user"] not in users:
            users.append(reply["user"])
        root["reply_users"] = users
        root["reply_users_count"] = len(users)
        if _ts_key(reply["ts"]) > _ts_key(str(root.get("latest_reply") or root["ts"])):
            root["latest_reply"] = reply["ts"]

    def _thread(self, channel: str, ts: str) -> list[JSON]:
        message = self._find(channel, ts)
        if message is None:
            return []
        root_ts = message["thread_ts"] if self._is_reply(message) else message["ts"]
        root = self._find(channel, root_ts)
        stored = self._messages.get(channel, [])
        replies = [m for m in stored if self._is_reply(m) and m["thread_ts"] == root_ts]
        return ([root] if root is not None else []) + replies

    def _thread_root(self, channel: str, thread_ts: Any) -> str | None:
        """The root ts a post with ``thread_ts`` goes under (a reply's ts maps to its root)."""
        if thread_ts in (None, ""):
            return None
        target = self._find(channel, str(thread_ts))
        if target is None:
            raise SlackError("thread_not_found")
        return str(target["thread_ts"]) if self._is_reply(target) else str(target["ts"])

    def _render(self, message: JSON, metadata: bool) -> JSON:
        out = copy.deepcopy(message)
        if not metadata:
            out.pop("metadata", None)
        if "files" in out:
            out["files"] = [self._refresh_file(f) for f in out["files"]]
        return out

    def _refresh_file(self, file: JSON) -> JSON:
        fid = file.get("id")
        if isinstance(fid, str) and (fid in self._files or fid in self.canvases) and self._port is not None:
            if file.get("file_access") == "check_file_info":
                return file
            return self.file_object(fid)
        return file

    @staticmethod
    def _validate_blocks(blocks: Any) -> list[JSON]:
        if not isinstance(blocks, list):
            raise SlackError("invalid_blocks")
        if len(blocks) > MAX_BLOCKS:
            raise SlackError("invalid_blocks")
        markdown_chars = 0
        for block in blocks:
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                raise SlackError("invalid_blocks")
            if block["type"] == "markdown":
                text = block.get("text")
                if not isinstance(text, str):
                    raise SlackError("invalid_blocks")
                markdown_chars += len(text)
            elif block["type"] == "section":
                text = block.get("text")
                if isinstance(text, dict) and len(str(text.get("text", ""))) > MAX_SECTION_TEXT:
                    raise SlackError("invalid_blocks")
        if markdown_chars > MAX_MARKDOWN_CHARS:
            raise SlackError("msg_blocks_too_long")
        return blocks

    def _metadata(self, value: Any) -> JSON | None:
        if value in (None, ""):
            return None
        meta = _as_json(value, "invalid_metadata_format")
        if not isinstance(meta, dict) or not isinstance(meta.get("event_type"), str):
            raise SlackError("invalid_metadata_format")
        if "event_payload" in meta and not isinstance(meta["event_payload"], dict):
            raise SlackError("invalid_metadata_format")
        return {"event_type": meta["event_type"], "event_payload": meta.get("event_payload", {})}

    def _bot_message(self, text: str, ts: str) -> JSON:
        return {
            "type": "message",
            "user": self.bot_user_id,
            "bot_id": self.bot_id,
            "app_id": self.app_id,
            "text": text,
            "ts": ts,
            "team": self.team_id,
            "bot_profile": {"id": self.bot_id, "app_id": self.app_id, "name": self.bot_name},
        }

    def _permalink(self, channel: str, message: JSON) -> str:
        link = f"{FAKE_HOST}/archives/{channel}/p{message['ts'].replace('.', '')}"
        if self._is_reply(message):
            link += f"?thread_ts={message['thread_ts']}&cid={channel}"
        return link

    def _react(self, message: JSON, name: str, user: str) -> None:
        reactions: list[JSON] = message.setdefault("reactions", [])
        for reaction in reactions:
            if reaction["name"] == name:
                if user in reaction["users"]:
                    raise SlackError("already_reacted")
                reaction["users"].append(user)
                reaction["count"] = len(reaction["users"])
                return
        reactions.append({"name": name, "users": [user], "count": 1})

    # ------------------------------------------------------------------ methods

    def _auth_test(self, params: dict[str, Any]) -> JSON:
        return {
            "url": "https://fake.slack.com/",
            "team": self.team,
            "user": self.bot_name,
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }

    def _chat_post_message(self, params: dict[str, Any]) -> JSON:
        chan = self._channel(params)
        text = params.get("text")
        text = "" if text is None else str(text)
        blocks_raw = params.get("blocks")
        markdown_text = params.get("markdown_text")
        blocks = None
        if blocks_raw not in (None, ""):
            blocks = self._validate_blocks(_as_json(blocks_raw, "invalid_blocks"))
        if markdown_text not in (None, ""):
            if text or blocks:
                raise SlackError("markdown_text_conflict")
            markdown_text = str(markdown_text)
            if len(markdown_text) > MAX_MARKDOWN_CHARS:
                raise SlackError("msg_too_long")
            text = markdown_text
            blocks = [{"type": "markdown", "text": markdown_text}]
        if not text and not blocks and not params.get("attachments"):
            raise SlackError("no_text")
        metadata = self._metadata(params.get("metadata"))
        root_ts = self._thread_root(chan.id, params.get("thread_ts"))
        message = self._bot_message(text[:MAX_TEXT_CHARS], self.next_ts())
        if blocks is not None:
            message["blocks"] = copy.deepcopy(blocks)
        if metadata is not None:
            message["metadata"] = metadata
        if root_ts is not None:
            root = self._find(chan.id, root_ts)
            assert root is not None
            self._attach_reply(root, message)
        self._insert(chan.id, message)
        return {"channel": chan.id, "ts": message["ts"], "message": self._render(message, True)}

    def _own_message(self, params: dict[str, Any], ts_key: str, not_own: str) -> tuple[_Channel, JSON]:
        chan = self._channel(params)
        message = self._find(chan.id, str(params.get(ts_key) or ""))
        if message is None or message.get("subtype") == "tombstone":
            raise SlackError("message_not_found")
        if not self._is_bots(message):
            raise SlackError(not_own)
        return chan, message

    def _chat_update(self, params: dict[str, Any]) -> JSON:
        chan, message = self._own_message(params, "ts", "cant_update_message")
        text = params.get("text")
        blocks_raw = params.get("blocks")
        if text is None and blocks_raw in (None, "") and params.get("markdown_text") in (None, ""):
            raise SlackError("no_text")
        if params.get("markdown_text") not in (None, ""):
            markdown_text = str(params["markdown_text"])
            if len(markdown_text) > MAX_MARKDOWN_CHARS:
                raise SlackError("msg_too_long")
            message["text"] = markdown_text
            message["blocks"] = [{"type": "markdown", "text": markdown_text}]
        if text is not None:
            if len(str(text)) > MAX_TEXT_CHARS:
                raise SlackError("msg_too_long")
            message["text"] = str(text)
        if blocks_raw not in (None, ""):
            blocks = self._validate_blocks(_as_json(blocks_raw, "invalid_blocks"))
            if blocks:
                message["blocks"] = copy.deepcopy(blocks)
            else:
                message.pop("blocks", None)
        metadata = self._metadata(params.get("metadata"))
        if metadata is not None:
            message["metadata"] = metadata
        message["edited"] = {"user": self.bot_user_id, "ts": self.next_ts()}
        rendered = self._render(message, True)
        return {"channel": chan.id, "ts": message["ts"], "text": message["text"], "message": rendered}

    def _chat_delete(self, params: dict[str, Any]) -> JSON:
        chan, message = self._own_message(params, "ts", "cant_delete_message")
        stored = self._messages[chan.id]
        if not self._is_reply(message) and int(message.get("reply_count", 0)) > 0:
            # Slack keeps a deleted root with replies as a tombstone.
            for key in ("text", "blocks", "files", "metadata", "reactions", "edited", "bot_id", "app_id"):
                message.pop(key, None)
            message.update({"subtype": "tombstone", "text": "This message was deleted.", "user": "USLACKBOT"})
            message.pop("bot_profile", None)
        else:
            stored.remove(message)
            if self._is_reply(message):
                root = self._find(chan.id, message["thread_ts"])
                if root is not None:
                    replies = [m for m in stored if self._is_reply(m) and m["thread_ts"] == root["ts"]]
                    root["reply_count"] = len(replies)
                    if replies:
                        root["latest_reply"] = replies[-1]["ts"]
                    else:
                        for key in ("latest_reply", "reply_users", "reply_users_count"):
                            root.pop(key, None)
        return {"channel": chan.id, "ts": message["ts"]}

    def _chat_get_permalink(self, params: dict[str, Any]) -> JSON:
        chan = self._channel(params)
        message = self._find(chan.id, str(params.get("message_ts") or ""))
        if message is None:
            raise SlackError("message_not_found")
        return {"channel": chan.id, "permalink": self._permalink(chan.id, message)}

    def _conversations_replies(self, params: dict[str, Any]) -> JSON:
        chan = self._channel(params)
        ts = str(params.get("ts") or "")
        thread = self._thread(chan.id, ts)
        if not thread:
            raise SlackError("thread_not_found")
        limit = _as_int(params.get("limit"), 1000)
        limit = 1000 if limit <= 0 else min(limit, 1000)
        start = 0
        cursor = params.get("cursor")
        if cursor:
            key = _decode_cursor(str(cursor))
            start = next((i for i, m in enumerate(thread) if _ts_key(m["ts"]) >= key), len(thread))
        page = thread[start : start + limit]
        rest = thread[start + limit :]
        if start > 0 and self.replies_repeat_root:
            page = [thread[0], *page]
        metadata = _truthy(params.get("include_all_metadata"))
        return {
            "messages": [self._render(m, metadata) for m in page],
            "has_more": bool(rest),
            "response_metadata": {"next_cursor": _encode_cursor(rest[0]["ts"]) if rest else ""},
        }

    def _conversations_history(self, params: dict[str, Any]) -> JSON:
        chan = self._channel(params)
        top = [m for m in reversed(self._messages.get(chan.id, [])) if not self._is_reply(m)]
        limit = _as_int(params.get("limit"), 100)
        limit = 100 if limit <= 0 else min(limit, 999)
        start = 0
        cursor = params.get("cursor")
        if cursor:
            key = _decode_cursor(str(cursor))
            start = next((i for i, m in enumerate(top) if _ts_key(m["ts"]) <= key), len(top))
        page = top[start : start + limit]
        rest = top[start + limit :]
        metadata = _truthy(params.get("include_all_metadata"))
        return {
            "messages": [self._render(m, metadata) for m in page],
            "has_more": bool(rest),
            "pin_count": 0,
            "response_metadata": {"next_cursor": _encode_cursor(rest[0]["ts"]) if rest else ""},
        }

    def _conversations_info(self, params: dict[str, Any]) -> JSON:
        chan = self._channel(params)
        info: JSON = {
            "id": chan.id,
            "name": chan.name,
            "is_channel": not chan.is_private,
            "is_group": chan.is_private and not chan.is_im and not chan.is_mpim,
            "is_im": chan.is_im,
            "is_mpim": chan.is_mpim,
            "is_private": chan.is_private,
            "is_archived": False,
            "is_member": True,
            "context_team_id": self.team_id,
            "created": 1_600_000_000,
        }
        if chan.is_im:
            info["user"] = chan.user
        return {"channel": info}

    def _users_info(self, params: dict[str, Any]) -> JSON:
        user = self._users.get(str(params.get("user") or ""))
        if user is None:
            raise SlackError("user_not_found")
        profile: JSON = {
            "display_name": user.display_name,
            "real_name": user.real_name,
            "display_name_normalized": user.display_name,
            "real_name_normalized": user.real_name,
            "team": self.team_id,
        }
        if user.bot_id:
            profile["bot_id"] = user.bot_id
        return {
            "user": {
                "id": user.id,
                "team_id": self.team_id,
                "name": user.name,
                "real_name": user.real_name,
                "deleted": False,
                "is_bot": user.is_bot,
                "is_app_user": False,
                "profile": profile,
            }
        }

    def _reaction_target(self, params: dict[str, Any]) -> tuple[JSON, str]:
        chan = self._channel(params)
        name = str(params.get("name") or "")
        if not REACTION_NAME.fullmatch(name):
            raise SlackError("invalid_name")
        message = self._find(chan.id, str(params.get("timestamp") or ""))
        if message is None:
            raise SlackError("message_not_found")
        return message, name

    def _reactions_add(self, params: dict[str, Any]) -> JSON:
        message, name = self._reaction_target(params)
        self._react(message, name, self.bot_user_id)
        return {}

    def _reactions_remove(self, params: dict[str, Any]) -> JSON:
        message, name = self._reaction_target(params)
        reactions: list[JSON] = message.get("reactions", [])
        for reaction in reactions:
            if reaction["name"] == name and self.bot_user_id in reaction["users"]:
                reaction["users"].remove(self.bot_user_id)
                reaction["count"] = len(reaction["users"])
                if not reaction["users"]:
                    reactions.remove(reaction)
                if not reactions:
                    message.pop("reactions", None)
                return {}
        raise SlackError("no_reaction")

    def _file_object(self, f: _File) -> JSON:
        origin = self.other_origin if f.foreign else self.files_origin
        if f.mode == "huge":
            size = f.declared_size if f.declared_size is not None else HUGE_DECLARED_SIZE
        else:
            size = f.declared_size if f.declared_size is not None else f.size
        obj: JSON = {
            "id": f.id,
            "created": f.created,
            "timestamp": f.created,
            "name": f.name,
            "title": f.title,
            "mimetype": f.mimetype,
            "filetype": _filetype(f.name),
            "pretty_type": _filetype(f.name).upper(),
            "user": f.user,
            "mode": "hosted",
            "editable": False,
            "is_external": False,
            "is_public": True,
            "size": size,
            "url_private": f"{origin}/files/{f.id}/{f.name}",
            "url_private_download": f"{origin}/files/{f.id}/download/{f.name}",
            "permalink": f"{FAKE_HOST}/files/{f.user or self.bot_user_id}/{f.id}/{f.name}",
        }
        if f.mp4_low is not None:
            obj["mp4_low"] = f"{origin}/files/{f.id}/mp4_low/{f.name}"
        if f.shares:
            obj["shares"] = copy.deepcopy(f.shares)
        return obj

    def _canvas_object(self, canvas: _Canvas) -> JSON:
        return {
            "id": canvas.id,
            "name": canvas.title,
            "title": canvas.title,
            "mimetype": "application/vnd.slack-docs",
            "filetype": "quip",
            "pretty_type": "Canvas",
            "user": self.bot_user_id,
            "size": len(canvas.markdown.encode()),
            "permalink": f"{FAKE_HOST}/docs/{self.team_id}/{canvas.id}",
            "url_private": f"{FAKE_HOST}/docs/{self.team_id}/{canvas.id}",
        }

    def _files_info(self, params: dict[str, Any]) -> JSON:
        fid = str(params.get("file") or "")
        if fid in self.canvases:
            obj = self._canvas_object(self.canvases[fid])
        elif fid in self._files:
            obj = self._file_object(self._files[fid])
        else:
            raise SlackError("file_not_found")
        return {"file": obj, "comments": [], "response_metadata": {"next_cursor": ""}}

    def _files_get_upload_url(self, params: dict[str, Any]) -> JSON:
        filename = str(params.get("filename") or "")
        length = _as_int(params.get("length"), -1)
        if not filename or length < 0:
            raise SlackError("invalid_arguments")
        fid = self._new_id("FUP")
        self._uploads[fid] = _Upload(fid, filename, length, params.get("alt_txt"))
        return {"upload_url": f"{self.files_origin}/upload/v1/{fid}", "file_id": fid}

    def _files_complete_upload(self, params: dict[str, Any]) -> JSON:
        entries = _as_json(params.get("files") or "", "invalid_arguments")
        if not isinstance(entries, list) or not entries:
            raise SlackError("invalid_arguments")
        channels = _as_list(params.get("channels"))
        if params.get("channel_id"):
            channels.insert(0, str(params["channel_id"]))
        targets = [self._channel({"channel": c}) for c in channels]
        root_ts = self._thread_root(targets[0].id, params.get("thread_ts")) if targets else None
        uploads: list[tuple[_Upload, str]] = []
        for entry in entries:
            if not isinstance(entry, dict):
                raise SlackError("invalid_arguments")
            upload = self._uploads.get(str(entry.get("id")))
            if upload is None or upload.data is None:
                raise SlackError("file_not_found")
            uploads.append((upload, str(entry.get("title") or upload.filename)))
        created: list[_File] = []
        for upload, title in uploads:
            del self._uploads[upload.file_id]
            mimetype = mimetypes.guess_type(upload.filename)[0] or "application/octet-stream"
            data = upload.data or b""
            f = _File(
                upload.file_id,
                upload.filename,
                title,
                mimetype,
                data,
                len(data),
                user=self.bot_user_id,
                created=int(time.time()),
            )
            self._files[f.id] = f
            created.append(f)
        for chan in targets:
            message = self._bot_message(str(params.get("initial_comment") or ""), self.next_ts())
            message["files"] = [self._file_object(f) for f in created]
            message["upload"] = True
            thread = root_ts if chan is targets[0] else None
            if thread is not None:
                root = self._find(chan.id, thread)
                assert root is not None
                self._attach_reply(root, message)
            self._insert(chan.id, message)
            share: JSON = {"ts": message["ts"], "channel_name": chan.name, "team_id": self.team_id}
            if thread is not None:
                share["thread_ts"] = thread
            for f in created:
                bucket = f.shares.setdefault("private" if chan.is_private else "public", {})
                bucket.setdefault(chan.id, []).append(share)
        return {"files": [self._file_object(f) for f in created]}

    def _canvases_create(self, params: dict[str, Any]) -> JSON:
        content = _as_json(params.get("document_content") or "{}", "invalid_arguments")
        if not isinstance(content, dict) or content.get("type") != "markdown":
            raise SlackError("invalid_arguments")
        markdown = content.get("markdown")
        if not isinstance(markdown, str):
            raise SlackError("invalid_arguments")
        cid = self._new_id("FCV")
        title = str(params.get("title") or "Untitled")
        self.canvases[cid] = _Canvas(cid, title, markdown, params.get("channel_id"))
        return {"canvas_id": cid}

    def _canvases_access_set(self, params: dict[str, Any]) -> JSON:
        canvas = self.canvases.get(str(params.get("canvas_id") or ""))
        if canvas is None:
            raise SlackError("canvas_not_found")
        level = str(params.get("access_level") or "")
        if level not in ("read", "write", "owner"):
            raise SlackError("invalid_arguments")
        channel_ids = _as_list(params.get("channel_ids"))
        user_ids = _as_list(params.get("user_ids"))
        if not channel_ids and not user_ids:
            raise SlackError("invalid_arguments")
        for cid in channel_ids:
            self._channel({"channel": cid})
        canvas.access.append({"access_level": level, "channel_ids": channel_ids, "user_ids": user_ids})
        return {}

    def _assistant_set_status(self, params: dict[str, Any]) -> JSON:
        chan = self._channel(params, "channel_id")
        thread_ts = str(params.get("thread_ts") or "")
        if not thread_ts:
            raise SlackError("invalid_arguments")
        self.statuses.append(Status(chan.id, thread_ts, str(params.get("status") or "")))
        return {}

    # ------------------------------------------------------------------ HTTP: file host and uploads

    async def _upload(self, request: web.Request) -> web.Response:
        upload = self._uploads.get(request.match_info["fid"])
        if upload is None:
            await request.read()
            return web.Response(status=404, text="upload not found", content_type="text/plain")
        if request.content_type == "multipart/form-data":
            form = await request.post()
            data = b""
            for value in form.values():
                if isinstance(value, web.FileField):
                    data = value.file.read()
                    break
        else:
            buffer = bytearray()
            async for chunk in request.content.iter_chunked(CHUNK_SIZE):
                buffer += chunk
            data = bytes(buffer)
        upload.data = data
        return web.Response(text=f"OK - {len(data)}", content_type="text/plain")

    def _record(
        self,
        request: web.Request,
        file_id: str | None,
        variant: str,
        status: int,
        served: str,
    ) -> None:
        header = request.headers.get("Authorization")
        self.file_requests.append(
            FileRequest(
                method=request.method,
                path=request.path_qs,
                host=request.host,
                file_id=file_id,
                variant=variant,
                sent_authorization=header is not None,
                authorized=header == f"Bearer {self.token}",
                status=status,
                served=served,
            )
        )

    @staticmethod
    def _signin_page() -> web.Response:
        return web.Response(body=SIGNIN_HTML, content_type="text/html", charset="utf-8")

    async def _signin(self, request: web.Request) -> web.Response:
        self._record(request, None, "signin", 200, "signin")
        return self._signin_page()

    async def _file_plain(self, request: web.Request) -> web.StreamResponse:
        return await self._serve_file(request, "file")

    async def _file_download(self, request: web.Request) -> web.StreamResponse:
        return await self._serve_file(request, "download")

    async def _file_mp4_low(self, request: web.Request) -> web.StreamResponse:
        return await self._serve_file(request, "mp4_low")

    async def _serve_file(self, request: web.Request, variant: str) -> web.StreamResponse:
        fid = request.match_info["fid"]
        f = self._files.get(fid)
        if f is None or (variant == "mp4_low" and f.mp4_low is None):
            self._record(request, fid, variant, 404, "not_found")
            return web.Response(status=404, text="Not Found")
        authorized = request.headers.get("Authorization") == f"Bearer {self.token}"
        if not authorized or "files:read" not in self.scopes or f.mode == "html_signin":
            self._record(request, fid, variant, 200, "signin")
            return self._signin_page()
        if f.mode == "redirect":
            self._record(request, fid, variant, 302, "redirect")
            location = f"{self.other_origin}/signin?redir=/files/{fid}/{f.name}"
            return web.Response(status=302, headers={"Location": location})
        if variant == "mp4_low":
            assert f.mp4_low is not None
            self._record(request, fid, variant, 200, "file")
            return web.Response(body=f.mp4_low, content_type="video/mp4")
        if f.mode == "long":
            self._record(request, fid, variant, 200, "long")
            return await self._stream(request, f.mimetype, None, self._long_chunks(f))
        self._record(request, fid, variant, 200, "file")
        return await self._stream(request, f.mimetype, f.size, f.chunks())

    def _long_chunks(self, f: _File) -> Iterator[bytes]:
        """The file's bytes, then filler: more than both its real and its declared size."""
        yield from f.chunks()
        declared = f.declared_size if f.declared_size is not None else f.size
        extra = max(declared - f.size, 0) + LONG_EXTRA_BYTES
        block = _pattern_block(f"{f.id}:long")
        while extra > 0:
            piece = block[: min(extra, len(block))]
            extra -= len(piece)
            yield piece

    @staticmethod
    async def _stream(
        request: web.Request, mimetype: str, size: int | None, chunks: Iterable[bytes]
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=200)
        response.content_type = mimetype
        if size is not None:
            response.content_length = size
        else:
            response.enable_chunked_encoding()
        await response.prepare(request)
        if request.method != "HEAD":
            for chunk in chunks:
                await response.write(chunk)
        await response.write_eof()
        return response


__all__ = [
    "DEFAULT_SCOPES",
    "Call",
    "FakeSlack",
    "FileMode",
    "FileRequest",
    "SlackError",
    "Status",
]
