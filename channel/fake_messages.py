"""What the in-memory adapter (:mod:`channel.fake`) keeps: its messages and documents, and
:class:`FakeLive`, a message it is streaming."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .contract import FileMeta, Step
from .errors import StreamClosed

if TYPE_CHECKING:
    from .fake import FakeAdapter


@dataclass(slots=True)
class FakeMessage:
    """One stored message. ``ts`` orders messages; ``thread_ts`` is its root's ts (``""`` at top level)."""

    ref: str
    channel: str
    ts: str
    thread_ts: str
    text: str
    author: str
    is_bot: bool = False
    is_you: bool = False
    files: list[FileMeta] = field(default_factory=list)
    #: emoji → names of who reacted.
    reactions: dict[str, list[str]] = field(default_factory=dict)
    effect_id: str = ""
    edited: bool = False
    #: The small print under the post (``edit(..., footer=)``).
    footer: str = ""
    #: The key its feedback buttons report, ``""`` without buttons.
    feedback: str = ""
    #: True while it is being streamed (``open_stream`` … ``stop``).
    streaming: bool = False


@dataclass(frozen=True, slots=True)
class FakeDocument:
    ref: str
    title: str
    markdown: str
    channel: str


class FakeLive:
    """A message being streamed by :class:`FakeAdapter` (closed by ``close_streams`` or its size)."""

    def __init__(self, adapter: FakeAdapter, message: FakeMessage) -> None:
        self._adapter = adapter
        self._message = message
        self.posted = adapter._posted(message)
        self.steps: list[Step] = []

    def _check_open(self, unsent: str) -> None:
        if not self._message.streaming:
            raise StreamClosed("The stream has ended.", unsent=unsent, provider_code="stream_closed")

    async def append(self, markdown: str, steps: tuple[Step, ...] = ()) -> None:
        self._adapter._enter("append_stream", self._message.ref)
        self._check_open(markdown)
        if len(self._message.text) + len(markdown) > self._adapter.max_post_chars * 3 // 2:
            raise StreamClosed("The message is full.", unsent=markdown, provider_code="msg_too_long")
        self._message.text += markdown
        self.steps.extend(steps)

    async def stop(self, *, effect_id: str, feedback: str = "") -> None:
        self._adapter._enter("stop_stream", self._message.ref)
        self._message.effect_id = effect_id
        self._message.feedback = feedback
        self._check_open("")
        self._message.streaming = False
