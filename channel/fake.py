"""An in-memory channel adapter, for unit tests and for trying ``channel/`` without a provider.

:class:`FakeAdapter` keeps conversations, reactions, files and documents in plain
Python lists and dicts (file bytes live on disk under a directory it owns) and
behaves like a provider should: it refuses what its :class:`ChannelFeatures` do
not claim, refuses to edit or delete other people's messages, reports
``already_done`` for a reaction already added (or not there to remove), and records every call
in :attr:`FakeAdapter.calls` so a test can assert that nothing reached it::

    adapter = FakeAdapter(files_dir=tmp_path / "provider")
    root = adapter.add_message(Origin("general"), "can you help?", author="Alice")
    session = ChannelSession(
        adapter=adapter, store=store, task=task, origin=Origin("general", root.ts),
        tools=select_tools(adapter.features.enabled(), None, SkillLibrary([])), task_dir=task_dir,
    )
    await session.call("channel_reply", {"text": "Sure."})
    assert adapter.thread(Origin("general", root.ts))[-1].text == "Sure."

Refs are ``fake:CONVERSATION:N`` for messages and ``fakefile:N`` for files and
documents; a test never needs them, since the session turns them into handles.
"""

from __future__ import annotations

import asyncio
import hashlib
import tempfile
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .cards import Card
from .contract import (
    FEATURE_METHODS,
    AdapterBase,
    Author,
    ChannelFeatures,
    Document,
    Fetched,
    FileMeta,
    LiveMessage,
    MessageView,
    Origin,
    OriginInfo,
    Posted,
    SessionStatus,
    StreamStart,
    Uploaded,
)
from .errors import ChannelError, MessageGone
from .fake_messages import FakeDocument, FakeLive, FakeMessage

#: Every capability the fake implements, all but cards (``ask``) and agent sessions (``sessions``),
#: which a test turns on when it wants them: what a test gets unless it asks for more or less.
ALL_FEATURES = ChannelFeatures(**{name: name not in ("ask", "sessions") for name in FEATURE_METHODS})
_EPOCH = 1_700_000_000


class FakeAdapter(AdapterBase):
    """A complete in-memory adapter; see the module docstring."""

    provider = "fake"

    def __init__(
        self,
        *,
        features: ChannelFeatures = ALL_FEATURES,
        max_post_chars: int = 8000,
        files_dir: Path | None = None,
        bot_name: str = "assistant",
        names: Mapping[str, str] | None = None,
    ) -> None:
        """``files_dir`` holds the provider's file bytes (a fresh temporary directory when None);
        ``names`` maps a channel to the name :meth:`describe` gives it (default ``#CHANNEL``)."""
        self.features = features
        self.max_post_chars = max_post_chars
        self.bot_name = bot_name
        self.names: dict[str, str] = dict(names or {})
        self._own_dir: tempfile.TemporaryDirectory[str] | None = None
        if files_dir is None:
            self._own_dir = tempfile.TemporaryDirectory(prefix="fake-files-")
            files_dir = Path(self._own_dir.name)
        self.files_dir = files_dir
        self.files_dir.mkdir(parents=True, exist_ok=True)
        self.messages: list[FakeMessage] = []
        self.files: dict[str, FileMeta] = {}
        self.documents: dict[str, FakeDocument] = {}
        self.statuses: list[tuple[Origin, str]] = []
        #: ``(origin, status, title)`` of every agent-session change, in order (a rename: status ``""``).
        self.sessions: list[tuple[Origin, str, str]] = []
        #: message ref → the card it shows, as posted or last updated (neutral: no provider markup).
        self.cards: dict[str, Card] = {}
        #: ``(channel, user, text)`` of every private note.
        self.private_notes: list[tuple[str, str, str]] = []
        #: ``(method, argument)`` of every adapter call, in order.
        self.calls: list[tuple[str, str]] = []
        #: method → errors its next calls raise, in order (see :meth:`fail`).
        self.faults: dict[str, list[ChannelError]] = {}
        self._seq = 0

    def close(self) -> None:
        """Remove the temporary files directory, if this adapter made it."""
        if self._own_dir is not None:
            self._own_dir.cleanup()

    # -- setting up a conversation ---------------------------------------------------------
    def _next(self) -> int:
        self._seq += 1
        return self._seq

    def add_message(
        self,
        origin: Origin,
        text: str,
        *,
        author: str = "Alice",
        is_bot: bool = False,
        files: list[FileMeta] | None = None,
    ) -> FakeMessage:
        """Store a message someone else posted: a reply when ``origin.thread`` is set, else a root."""
        return self._store(origin, text, author=author, is_bot=is_bot, is_you=False, files=files or [])

    def add_file(self, name: str, content: bytes, media_type: str = "application/octet-stream") -> FileMeta:
        """Store a file's bytes; attach the returned meta to a message with ``add_message(files=...)``."""
        ref = f"fakefile:{self._next()}"
        path = self.files_dir / ref.replace(":", "_")
        path.write_bytes(content)
        meta = FileMeta(
            ref=ref, name=name, media_type=media_type, size=len(content), data={"path": str(path)}
        )
        self.files[ref] = meta
        return meta

    def fail(self, method: str, error: ChannelError) -> None:
        """Make the next call of ``method`` (``post``, ``react``, ``edit``, …) raise ``error``."""
        self.faults.setdefault(method, []).append(error)

    # -- inspecting ------------------------------------------------------------------------
    def thread(self, origin: Origin) -> list[FakeMessage]:
        """The conversation ``origin`` names, oldest first: a thread (root first) or a top level."""
        if origin.thread:
            return [
                m
                for m in self.messages
                if m.channel == origin.channel and origin.thread in (m.ts, m.thread_ts)
            ]
        return [m for m in self.messages if m.channel == origin.channel and not m.thread_ts]

    def message(self, ref: str) -> FakeMessage | None:
        return next((m for m in self.messages if m.ref == ref), None)

    def count(self, method: str) -> int:
        return sum(1 for name, _ in self.calls if name == method)

    # -- internals -------------------------------------------------------------------------
    def _store(
        self,
        origin: Origin,
        text: str,
        *,
        author: str,
        is_bot: bool,
        is_you: bool,
        files: list[FileMeta],
        effect_id: str = "",
    ) -> FakeMessage:
        n = self._next()
        ts = f"{_EPOCH + n}.{n:06d}"
        message = FakeMessage(
            ref=f"fake:{origin.channel}:{n}",
            channel=origin.channel,
            ts=ts,
            thread_ts=origin.thread,
            text=text,
            author=author,
            is_bot=is_bot or is_you,
            is_you=is_you,
            files=list(files),
            effect_id=effect_id,
        )
        self.messages.append(message)
        return message

    def _enter(self, method: str, arg: str, feature: str | None = None) -> None:
        self.calls.append((method, arg))
        if feature is not None and feature not in self.features.enabled():
            raise ChannelError("unsupported", f"The fake adapter has {feature} turned off.")
        queue = self.faults.get(method)
        if queue:
            raise queue.pop(0)

    def _find(self, ref: str) -> FakeMessage:
        message = self.message(ref)
        if message is None:
            raise MessageGone("That message no longer exists.")
        return message

    def _own(self, ref: str, what: str) -> FakeMessage:
        message = self._find(ref)
        if not message.is_you:
            raise ChannelError("not_authored", f"Only messages the bot posted can be {what}.")
        return message

    def _posted(self, message: FakeMessage) -> Posted:
        return Posted(
            ref=message.ref,
            new_root="" if message.thread_ts else message.ts,
            permalink=f"https://fake.example/{message.channel}/{message.ts}",
        )

    def _view(self, message: FakeMessage) -> MessageView:
        return MessageView(
            ref=message.ref,
            author=Author(message.author, message.is_bot, message.is_you),
            text=message.text,
            time=datetime.fromtimestamp(float(message.ts), tz=UTC).isoformat(timespec="seconds"),
            files=tuple(message.files),
            reactions={emoji: len(who) for emoji, who in message.reactions.items() if who},
        )

    def _check_length(self, markdown: str) -> None:
        if len(markdown) > self.max_post_chars:
            raise ChannelError("invalid_arguments", "The text is too long for one message.")

    # -- the contract ------------------------------------------------------------------------
    async def describe(self, origin: Origin) -> OriginInfo:
        self._enter("describe", origin.channel)
        name = self.names.get(origin.channel, f"#{origin.channel}")
        is_direct = name.startswith("a direct message")
        link = f"https://fake.example/{origin.channel}" + (f"/{origin.thread}" if origin.thread else "")
        return OriginInfo(self.provider, name, link, bool(origin.thread), is_direct)

    async def view(self, raw: Mapping[str, Any]) -> MessageView:
        """``raw`` is ``{"ref": ...}`` for a stored message, or ``{"text": ..., "author": ...}``."""
        self._enter("view", str(raw.get("ref", "")))
        if raw.get("ref"):
            return self._view(self._find(str(raw["ref"])))
        return MessageView(
            ref=str(raw.get("ref") or f"fake:inbound:{self._next()}"),
            author=Author(str(raw.get("author") or "someone"), False, False),
            text=str(raw.get("text") or ""),
            time="",
        )

    async def post(self, origin: Origin, markdown: str, *, effect_id: str, feedback: str = "") -> Posted:
        self._enter("post", origin.channel)
        self._check_length(markdown)
        message = self._store(
            origin, markdown, author=self.bot_name, is_bot=True, is_you=True, files=[], effect_id=effect_id
        )
        message.feedback = feedback
        return self._posted(message)

    async def open_stream(self, origin: Origin, start: StreamStart) -> LiveMessage:
        self._enter("open_stream", origin.channel, "stream")
        if not origin.thread:
            raise ChannelError("unsupported", "The fake adapter streams only into a thread.")
        message = self._store(
            origin, start.markdown, author=self.bot_name, is_bot=True, is_you=True, files=[]
        )
        message.streaming = True
        live = FakeLive(self, message)
        live.steps.extend(start.steps)
        return live

    def close_streams(self) -> int:
        """End every open stream as a provider would after its time limit; returns how many."""
        open_ones = [m for m in self.messages if m.streaming]
        for message in open_ones:
            message.streaming = False
        return len(open_ones)

    async def find_posted(self, origin: Origin, effect_id: str) -> list[Posted]:
        self._enter("find_posted", effect_id)
        return [self._posted(m) for m in self.thread(origin) if m.effect_id == effect_id]

    async def read(self, origin: Origin) -> list[MessageView]:
        self._enter("read", origin.channel, "read")
        return [self._view(m) for m in self.thread(origin)]

    async def react(self, ref: str, emoji: str, *, add: bool) -> None:
        self._enter("react", ref, "react")
        message = self._find(ref)
        who = message.reactions.setdefault(emoji, [])
        if add:
            if self.bot_name in who:
                raise ChannelError("already_done", "Already reacted.")
            who.append(self.bot_name)
        else:
            if self.bot_name not in who:
                raise ChannelError("already_done", "No such reaction.")
            who.remove(self.bot_name)

    async def edit(self, ref: str, markdown: str, *, feedback: str = "", footer: str = "") -> None:
        self._enter("edit", ref, "edit")
        message = self._own(ref, "edited")
        self._check_length(markdown)
        message.text = markdown
        message.feedback = feedback
        message.footer = footer
        message.edited = True

    async def retract(self, ref: str) -> None:
        self._enter("retract", ref, "retract")
        self.messages.remove(self._own(ref, "deleted"))

    async def file_info(self, ref: str) -> FileMeta:
        self._enter("file_info", ref, "fetch_file")
        meta = self.files.get(ref)
        if meta is None:
            raise ChannelError("not_found", "That file no longer exists.")
        return meta

    async def fetch_file(self, meta: FileMeta, dest_dir: Path, *, variant: str | None) -> Fetched:
        self._enter("fetch_file", meta.ref, "fetch_file")
        if variant not in (None, "original"):
            raise ChannelError("unsupported", f"The fake adapter has no {variant} rendition.")
        stored = self.files.get(meta.ref)
        if stored is None:
            raise ChannelError("not_found", "That file no longer exists.")
        content = await asyncio.to_thread(Path(str(stored.data["path"])).read_bytes)
        folder = dest_dir / "files"
        name = Path(stored.name).name or "file"
        target = folder / name
        n = 0
        while target.exists():
            n += 1
            target = folder / f"{Path(name).stem}-{n}{Path(name).suffix}"

        def write() -> None:
            folder.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)

        await asyncio.to_thread(write)
        return Fetched(target, stored.media_type, len(content), hashlib.sha256(content).hexdigest())

    async def attach(self, origin: Origin, path: Path, *, title: str | None, comment: str | None) -> Uploaded:
        self._enter("attach", path.name, "attach")
        content = await asyncio.to_thread(path.read_bytes)
        meta = self.add_file(title or path.name, content)
        message = self._store(
            origin, comment or "", author=self.bot_name, is_bot=True, is_you=True, files=[meta]
        )
        return Uploaded(meta, message.ref)

    async def post_document(self, origin: Origin, title: str, markdown: str) -> Document:
        self._enter("post_document", title, "documents")
        ref = f"fakefile:{self._next()}"
        self.documents[ref] = FakeDocument(ref, title, markdown, origin.channel)
        link = f"https://fake.example/docs/{ref.rsplit(':', 1)[-1]}"
        self._store(origin, f"📄 {title}: {link}", author=self.bot_name, is_bot=True, is_you=True, files=[])
        return Document(ref, link)

    async def set_status(self, origin: Origin, status: str, loading_messages: Sequence[str] = ()) -> None:
        self._enter("set_status", status, "status")
        self.statuses.append((origin, status))

    async def set_session(
        self, origin: Origin, status: SessionStatus, *, title: str = "", initiator: str = ""
    ) -> None:
        self._enter("set_session", status, "sessions")
        self.sessions.append((origin, status, title))

    async def rename_session(self, origin: Origin, title: str) -> None:
        self._enter("rename_session", title, "sessions")
        self.sessions.append((origin, "", title))

    def session_status(self, origin: Origin) -> str:
        """The status the origin's session shows now (``""``: none set)."""
        return next((s for o, s, _ in reversed(self.sessions) if o == origin and s), "")

    # -- cards: kept as the neutral model, so a test reads what any provider would draw ----------
    async def post_card(self, origin: Origin, card: Card, *, effect_id: str) -> Posted:
        self._enter("post_card", origin.channel, "ask")
        message = self._store(
            origin,
            card.fallback,
            author=self.bot_name,
            is_bot=True,
            is_you=True,
            files=[],
            effect_id=effect_id,
        )
        self.cards[message.ref] = card
        return self._posted(message)

    async def update_card(self, ref: str, card: Card) -> None:
        self._enter("update_card", ref, "ask")
        message = self._own(ref, "updated")
        message.text = card.fallback
        self.cards[ref] = card

    async def tell_privately(self, channel: str, user: str, text: str, *, thread_ts: str = "") -> None:
        self._enter("tell_privately", user)
        self.private_notes.append((channel, user, text))

    def click_key(self, ref: str) -> str:
        """A click reports a message by its ts."""
        return self._find(ref).ts

    def clicked_ref(self, channel: str, key: str) -> str:
        found = next((m.ref for m in self.messages if m.channel == channel and m.ts == key), None)
        return found if found is not None else f"fake:{channel}:missing"
