"""The emulated workspace's state: users, conversations, messages, files, canvases, uploads.

One ``Workspace`` is one Slack team with the app installed (its token, scopes and
bot identity). Set it up with ``add_user`` / ``add_channel`` / ``add_message`` /
``add_reaction`` / ``add_file``; read it back with ``messages`` / ``bot_messages`` /
``file_content``. The Web API method families (``threadbound_emulator.api``) read and change it
through the helpers at the bottom, which hold Slack's threading rules in one place.
"""

from __future__ import annotations

import copy
import hashlib
import time
from collections.abc import Iterable

from .records import (
    DEFAULT_SCOPES,
    FAKE_HOST,
    HUGE_DECLARED_SIZE,
    Canvas,
    Channel,
    ChunkSource,
    File,
    FileMode,
    Status,
    Stream,
    Upload,
    User,
    filetype,
    pattern_block,
)
from .threads import MessageRules
from .wire import JSON, ts_from_micros, ts_key


class Workspace(MessageRules):
    """One team with the app installed; see the module docstring."""

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

        self.statuses: list[Status] = []
        #: The status each thread shows (``status_shown``); the app's post there clears it.
        self.shown_statuses: dict[tuple[str, str], str] = {}
        #: ``chat.postEphemeral`` calls: ``(channel, user, thread_ts, text)``; seen by that user only.
        self.ephemerals: list[tuple[str, str, str, str]] = []
        #: Streamed messages by ``(channel, ts)`` (``threadbound_emulator.api.streams``).
        self.streams: dict[tuple[str, str], Stream] = {}
        #: Seconds a stream stays open (Slack: about five minutes); ``expire_streams`` ends them now.
        self.stream_ttl = 300.0
        #: ``assistant.threads.setTitle`` calls: ``(channel, thread_ts, title)``.
        self.titles: list[tuple[str, str, str]] = []
        #: ``assistant.threads.setSuggestedPrompts`` calls: ``(channel, thread_ts, prompts)``.
        self.suggested_prompts: list[tuple[str, str, list[JSON]]] = []
        #: Each person's App Home tab as last published (``views.publish``), by user id.
        self.home_views: dict[str, JSON] = {}
        #: What the app posted to response URLs (``FakeSlack.response_url``): ``(url, body)``, in order.
        self.responses: list[tuple[str, JSON]] = []
        self.canvases: dict[str, Canvas] = {}
        self.users: dict[str, User] = {}
        self.channels: dict[str, Channel] = {}
        self.files: dict[str, File] = {}
        self.uploads: dict[str, Upload] = {}
        self._messages: dict[str, list[JSON]] = {}
        self._clock = 1_700_000_000_000_000
        self._wall_clock = False
        self._ids = 0
        #: (files origin, other origin) once the file host serves; file URLs need them.
        self._origins: tuple[str, str] | None = None
        self.add_user(bot_user_id, bot_name, display_name=bot_name, real_name=bot_name, is_bot=True)
        self.users[bot_user_id].bot_id = bot_id

    # ------------------------------------------------------------------ origins

    def serve_files_at(self, files_origin: str, other_origin: str) -> None:
        """Where file URLs point: the file host's origin, and a second origin for refusal tests."""
        self._origins = (files_origin, other_origin)

    @property
    def files_origin(self) -> str:
        """The origin files are served from (put it in ``SLACK_FILE_ORIGINS``)."""
        if self._origins is None:
            raise RuntimeError("the workspace's file host is not started")
        return self._origins[0]

    @property
    def other_origin(self) -> str:
        """The same server under a different origin string, for refusal tests."""
        if self._origins is None:
            raise RuntimeError("the workspace's file host is not started")
        return self._origins[1]

    # ------------------------------------------------------------------ set-up

    def start_clock_at(self, seconds: float) -> None:
        """Hand out message ts from ``seconds`` on, following the wall clock from then on (the
        playground: ts never repeat across restarts while the app's store keeps its claims, and the
        page shows when each message was really posted)."""
        self._clock = max(self._clock, int(seconds * 1_000_000))
        self._wall_clock = True

    def next_ts(self) -> str:
        """A new ts, strictly greater than every ts handed out or stored so far (and, after
        :meth:`start_clock_at`, at least the wall clock's time)."""
        self._clock += 100
        if self._wall_clock:
            self._clock = max(self._clock, time.time_ns() // 1000)
        return ts_from_micros(self._clock)

    def new_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}{self._ids:07d}"

    def add_user(
        self,
        id: str,
        name: str,
        display_name: str = "",
        real_name: str = "",
        is_bot: bool = False,
        tz: str = "",
    ) -> None:
        """Add (or replace) a user; ``tz`` is their IANA time zone."""
        self.users[id] = User(id, name, display_name, real_name, is_bot, tz=tz)

    def add_channel(
        self,
        id: str,
        name: str,
        is_im: bool = False,
        user: str | None = None,
        *,
        is_private: bool = False,
        is_mpim: bool = False,
        is_member: bool = True,
    ) -> None:
        """Add (or replace) a conversation; an IM names the other party in ``user``."""
        private = is_private or is_im or is_mpim
        self.channels[id] = Channel(id, name, is_im, private, is_mpim, user, is_member)
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
        if channel not in self.channels:
            self.add_channel(channel, channel.lower())
        if ts is None:
            ts = self.next_ts()
        else:
            key = ts_key(ts)
            if any(ts_key(m["ts"]) == key for m in self._messages[channel]):
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
            root = self.find(channel, thread_ts)
            if root is None or self.is_reply(root):
                raise ValueError(f"no thread root {thread_ts} in {channel}")
            self.attach_reply(root, message)
        self.insert(channel, message)
        self.record_shares(channel, message)
        return ts

    def record_shares(self, channel: str, message: JSON) -> None:
        """Note, as Slack does, that the files on ``message`` itself are shared in ``channel``
        (``files.info`` then lists the channel under ``shares``)."""
        chan = self.channels[channel]
        for file in message.get("files") or []:
            stored = self.files.get(str(file.get("id") or ""))
            if stored is None:
                continue
            share: JSON = {"ts": message["ts"], "channel_name": chan.name, "team_id": self.team_id}
            if message.get("thread_ts") and message["thread_ts"] != message["ts"]:
                share["thread_ts"] = message["thread_ts"]
            bucket = stored.shares.setdefault("private" if chan.is_private else "public", {})
            bucket.setdefault(channel, []).append(share)

    def add_reaction(self, channel: str, ts: str, name: str, user: str) -> None:
        """Add someone's reaction to a stored message."""
        message = self.find(channel, ts)
        if message is None:
            raise ValueError(f"no message {ts} in {channel}")
        self.react(message, name, user)

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
        Modes: ``"html_signin"`` serves Slack's sign-in page, ``"redirect"`` a 302
        to it, ``"long"`` more bytes than declared.
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
        self.files[id] = File(
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
            block=pattern_block(id) if data is None and source is None else None,
        )

    def expire_streams(self) -> int:
        """End every open stream as Slack does after ~5 minutes (later appends fail); returns how many."""
        open_streams = [s for s in self.streams.values() if s.state == "streaming"]
        for stream in open_streams:
            stream.state = "expired"
        return len(open_streams)

    # ------------------------------------------------------------------ inspection

    def file_object(self, file_id: str) -> JSON:
        """The file as ``files.info`` and message ``files`` show it (needs the server started)."""
        if file_id in self.canvases:
            return self.canvas_object(self.canvases[file_id])
        return self.hosted_file_object(self.files[file_id])

    def file_content(self, file_id: str) -> bytes:
        """The bytes mode ``"ok"`` serves for the file (materialised: small files only)."""
        return b"".join(self.files[file_id].chunks())

    def file_sha256(self, file_id: str) -> str:
        """Hex SHA-256 of the bytes mode ``"ok"`` serves, computed chunk by chunk."""
        digest = hashlib.sha256()
        for chunk in self.files[file_id].chunks():
            digest.update(chunk)
        return digest.hexdigest()

    def file_bytes_uploaded(self, file_id: str) -> bytes:
        """The bytes an upload (``files_upload_v2``) stored for ``file_id``."""
        data = self.files[file_id].content
        if data is None:
            raise ValueError(f"{file_id} was not uploaded")
        return data

    def messages(self, channel: str, thread_ts: str | None = None) -> list[JSON]:
        """Copies of stored messages: the thread (root first) if ``thread_ts``, else every
        message of the channel, replies included, oldest first."""
        stored = self._messages.get(channel, [])
        if thread_ts is None:
            return copy.deepcopy(stored)
        return copy.deepcopy(self.thread(channel, thread_ts))

    def status_shown(self, channel: str, thread_ts: str) -> str:
        """The thread's status now: the last set, unless the app posted there since (else "")."""
        return self.shown_statuses.get((channel, thread_ts), "")

    def bot_messages(self, channel: str | None = None) -> list[JSON]:
        """Copies of every message the bot posted (in one channel, or anywhere), oldest first."""
        channels = [channel] if channel is not None else list(self._messages)
        out = [m for c in channels for m in self._messages.get(c, []) if self.is_bots(m)]
        return copy.deepcopy(out)

    # ------------------------------------------------------------------ file objects

    def render(self, message: JSON, metadata: bool) -> JSON:
        """A message as the Web API returns it: a copy, with fresh file objects."""
        out = copy.deepcopy(message)
        if not metadata:
            out.pop("metadata", None)
        if "files" in out:
            out["files"] = [self._refresh_file(f) for f in out["files"]]
        return out

    def _refresh_file(self, file: JSON) -> JSON:
        fid = file.get("id")
        if isinstance(fid, str) and (fid in self.files or fid in self.canvases) and self._origins:
            if file.get("file_access") == "check_file_info":
                return file
            return self.file_object(fid)
        return file

    def hosted_file_object(self, f: File) -> JSON:
        """A hosted file as Slack describes it, its URLs on the file host."""
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
            "filetype": filetype(f.name),
            "pretty_type": filetype(f.name).upper(),
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

    def canvas_object(self, canvas: Canvas) -> JSON:
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
