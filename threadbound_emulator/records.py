"""The emulated workspace's records: users, conversations, files, canvases, uploads, streams, statuses.

Plain data; :class:`threadbound_emulator.workspace.Workspace` holds them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from .wire import JSON

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
    "commands",
)

FAKE_HOST = "https://fake.slack.com"
HUGE_DECLARED_SIZE = 200 * 2**20
CHUNK_SIZE = 256 * 1024


@dataclass
class Status:
    """One accepted ``assistant.threads.setStatus`` call."""

    channel_id: str
    thread_ts: str
    status: str
    #: The rotating ``loading_messages`` sent with it (empty when none were).
    loading_messages: tuple[str, ...] = ()


@dataclass
class Stream:
    """One streamed message (``chat.startStream`` … ``chat.stopStream``), as the emulator saw it."""

    channel: str
    ts: str
    recipient_user_id: str
    recipient_team_id: str
    #: ``time.monotonic()`` at start; the stream expires ``Workspace.stream_ttl`` seconds later.
    started: float
    #: ``streaming``, ``stopped`` or ``expired``.
    state: str = "streaming"
    #: The Markdown the message holds so far.
    text: str = ""
    #: The Markdown each call added (start, appends, stop), in order; ``""`` for a call without text.
    appends: list[str] = field(default_factory=list)
    #: Task updates by id: ``(title, latest status)``.
    tasks: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: Every ``(task id, status)`` update in arrival order.
    task_updates: list[tuple[str, str]] = field(default_factory=list)
    #: Blocks ``stopStream`` added under the text (feedback buttons).
    blocks: list[JSON] = field(default_factory=list)


@dataclass
class Channel:
    id: str
    name: str
    is_im: bool = False
    is_private: bool = False
    is_mpim: bool = False
    user: str | None = None
    #: Whether the bot is in it (``conversations.info``'s ``is_member``; lists private ones).
    is_member: bool = True


@dataclass
class User:
    id: str
    name: str
    display_name: str = ""
    real_name: str = ""
    is_bot: bool = False
    bot_id: str | None = None
    #: IANA time zone (``users.info`` ``tz``); ``""``: Slack's default, America/Los_Angeles.
    tz: str = ""


@dataclass
class File:
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
    #: Deterministic filler block for ``content=None`` files (see ``Workspace.add_file``).
    block: bytes | None = None

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
        block = self.block or pattern_block(self.id)
        left = self.size
        while left > 0:
            piece = block if left >= len(block) else block[:left]
            left -= len(piece)
            yield piece


@dataclass
class Canvas:
    id: str
    title: str
    markdown: str
    channel_id: str | None = None
    access: list[JSON] = field(default_factory=list)


@dataclass
class Upload:
    file_id: str
    filename: str
    length: int
    alt_txt: str | None = None
    data: bytes | None = None


def pattern_block(seed: str) -> bytes:
    """A CHUNK_SIZE block of deterministic, non-repeating-looking bytes derived from ``seed``."""
    out = bytearray()
    digest = hashlib.sha256(seed.encode()).digest()
    while len(out) < CHUNK_SIZE:
        out += digest
        digest = hashlib.sha256(digest).digest()
    return bytes(out[:CHUNK_SIZE])


def filetype(name: str) -> str:
    if "." in name:
        return name.rsplit(".", 1)[1].lower()
    return "binary"
