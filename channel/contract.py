"""The channel adapter contract: what a provider (Slack, a fake) must do for the tools.

An adapter knows its provider and nothing about the agent; ``channel.session``
turns these calls into the model-facing tools, minting handles and enforcing
authorship. Provider objects cross this boundary as opaque ``ref`` strings
that only the adapter interprets and the model never sees.

Every method raises :class:`channel.errors.ChannelError` (with a contract error
code) on failure; nothing else escapes an adapter — except the host's own exception from
its write guard: a host that may lose the right to write (a run's lease) sets
:data:`WRITE_GUARD` for the writes it makes (:func:`guarding`), and an adapter awaits it
before each attempt of a write, a paced or retried one included, so a write whose host was
fenced meanwhile is abandoned unmade (invariant "Fast takeover, fenced writes",
docs/architecture.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from .cards import Card

from .inbound import InboundMessage

T = TypeVar("T")

#: Awaited before a write; raises (the host's own exception) when the task may no longer write.
WriteGuard = Callable[[], Awaitable[None]]

#: The guard of the writes made in this context (a run's, and the tasks it starts); None: unguarded.
WRITE_GUARD: ContextVar[WriteGuard | None] = ContextVar("channel_write_guard", default=None)
#: Seconds a guard may still let an attempt start after the host lost the right to write: it trusts
#: a confirmation at most this old (a run's lease, ``app.runs.lease``). A survivor waiting out the
#: writes of a fenced host counts them from its own takeover plus this (:class:`InFlight`).
WRITE_GUARD_LAG = 3.0


@contextmanager
def guarding(guard: WriteGuard | None) -> Iterator[None]:
    """Every adapter write made inside the block awaits ``guard`` before each of its attempts."""
    token = WRITE_GUARD.set(guard)
    try:
        yield
    finally:
        WRITE_GUARD.reset(token)


async def check_write_guard() -> None:
    """For adapters: await the guard set for this context, if any, before an attempt of a write."""
    guard = WRITE_GUARD.get()
    if guard is not None:
        await guard()


@dataclass(frozen=True, slots=True)
class ChannelFeatures:
    """What an adapter can do, one flag per optional capability (named so as not to
    collide with pydantic-ai's ``capabilities``). Registration branches on these
    flags, never on the adapter's class."""

    #: Read the conversation: ``channel_read``.
    read: bool = False
    #: Add and remove reactions: ``channel_react``.
    react: bool = False
    #: Edit the bot's own posts: ``channel_edit``.
    edit: bool = False
    #: Delete the bot's own posts: ``channel_retract``.
    retract: bool = False
    #: Download files attached to messages: ``channel_fetch_file``.
    fetch_file: bool = False
    #: Upload files into the conversation: ``channel_attach``.
    attach: bool = False
    #: Create rich documents (Slack canvases): ``channel_post_document``.
    documents: bool = False
    #: Show "is thinking…" status in the conversation (a runtime effect, not a tool).
    status: bool = False
    #: Stream an answer into the conversation as it is written, with steps (``open_stream``).
    stream: bool = False
    #: Post cards with buttons and take clicks: ``channel_ask``, ``channel_request_approval``.
    ask: bool = False
    #: Show the conversation's agent session — a status, a title and a Stop button people press
    #: while a run works (``set_session``; a runtime effect, not a tool).
    sessions: bool = False

    def enabled(self) -> frozenset[str]:
        return frozenset(f.name for f in fields(self) if getattr(self, f.name))


@dataclass(frozen=True, slots=True)
class Origin:
    """The one conversation a task is bound to. ``thread`` (the thread's root message, opaque) is
    ``""`` at a DM's top level or before a ``run`` without thread has posted its root."""

    channel: str
    thread: str = ""


@dataclass(frozen=True, slots=True)
class OriginInfo:
    """What the model is told about its origin: names, never provider IDs."""

    provider: str
    #: ``#general`` or ``a direct message with Alice``.
    name: str
    permalink: str | None
    is_thread: bool
    is_direct: bool


@dataclass(frozen=True, slots=True)
class Standing:
    """How the provider sees a person now, in one conversation (a follow-up re-checks the person it
    runs for when it fires). The defaults let them through: an adapter that cannot tell, or a
    look-up that failed, says nothing against anyone."""

    #: Their account is active (not deactivated or deleted).
    active: bool = True
    #: A guest of the workspace (Slack: a multi- or single-channel guest).
    guest: bool = False
    #: From another organisation (Slack Connect).
    external: bool = False
    #: Still one of the conversation's people.
    member: bool = True


@dataclass(frozen=True, slots=True)
class Author:
    display_name: str
    is_bot: bool
    is_you: bool


@dataclass(frozen=True, slots=True)
class FileMeta:
    ref: str
    name: str
    media_type: str
    size: int
    #: Provider data needed to fetch it later (JSON-able), kept with the handle.
    data: dict[str, object] = field(default_factory=dict)
    #: Why the bot cannot fetch this file (deleted, not shared with it, …); ``""`` when it can.
    #: Such a file is listed by name, without a handle, type or size.
    unavailable: str = ""


@dataclass(frozen=True, slots=True)
class MessageView:
    """One message as the adapter renders it for the model (text already free of provider IDs)."""

    ref: str
    author: Author
    text: str
    #: ISO-8601 UTC time.
    time: str
    files: tuple[FileMeta, ...] = ()
    #: ``{emoji: count}``.
    reactions: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Posted:
    ref: str
    #: The ts of the root when the post started a new thread (it was not in one), else ``""``.
    new_root: str
    permalink: str | None


StepStatus = Literal["in_progress", "complete", "error"]

#: An agent session's status: a run works (people may stop it), the conversation is idle, the task
#: waits on a person (an ask, an approval), or it is over.
SessionStatus = Literal["processing", "active", "suspended", "closed"]


@dataclass(frozen=True, slots=True)
class Step:
    """One visible step of a streamed answer (a tool at work): shown, then completed or failed."""

    id: str
    #: What the person reads: "Reading the thread", "Fetching report.csv".
    title: str
    status: StepStatus


@dataclass(frozen=True, slots=True)
class StreamStart:
    """What a streamed reply starts with (:meth:`ChannelAdapter.open_stream`)."""

    markdown: str
    steps: tuple[Step, ...]
    #: The journal entry of the reply (:meth:`ChannelAdapter.post` carries its own the same way).
    effect_id: str
    #: The inbound message the answer is for; a provider may need its author.
    recipient: InboundMessage | None = None


class LiveMessage(Protocol):
    """A message being streamed (from :meth:`ChannelAdapter.open_stream`). Text is only ever
    appended; the provider may close the stream early (time, size), after which the message keeps
    what it had and :class:`channel.errors.StreamClosed` is raised."""

    #: The message, as :meth:`ChannelAdapter.post` would have returned it.
    posted: Posted

    async def append(self, markdown: str, steps: tuple[Step, ...] = ()) -> None:
        """Add Markdown (and step updates) to the message; ``StreamClosed`` when the provider ended it."""

    async def stop(self, *, effect_id: str, feedback: str = "") -> None:
        """End the stream: the message keeps its text and carries ``effect_id`` (so
        :meth:`ChannelAdapter.find_posted` finds it), and feedback buttons when ``feedback`` (see ``post``).
        ``StreamClosed`` when the provider had already ended it (the text stays as it was)."""


@dataclass(frozen=True, slots=True)
class Fetched:
    path: Path
    media_type: str
    size: int
    sha256: str


@dataclass(frozen=True, slots=True)
class Uploaded:
    file: FileMeta
    message_ref: str | None


@dataclass(frozen=True, slots=True)
class Document:
    ref: str
    permalink: str | None


@dataclass(frozen=True, slots=True)
class InFlight:
    """How long a write whose answer never came (a cut connection, a timeout, a gateway's 5xx) may
    still be applied by the provider: it counts as maybe applied until then (invariant "Exactly
    once at every point and under every schedule", docs/architecture.md)."""

    #: Seconds after its attempt began that the provider may still apply a write: the attempt's
    #: timeout and a margin. 0: a write is applied or refused by the time it is answered.
    window: float = 0.0
    #: Seconds a write may wait for its turn (pacing, rate limits) before its last attempt begins.
    deadline: float = 0.0

    def until(self, opened: float, now: float) -> float:
        """When a write journalled at ``opened`` by a host that may no longer write (dead, or fenced
        at ``now`` at the latest) can no longer land: its last attempt began before its deadline
        passed, and before the host's guard refused (:data:`WRITE_GUARD_LAG` after ``now``)."""
        if self.window <= 0:
            return opened
        return min(opened + self.deadline, now + WRITE_GUARD_LAG) + self.window


#: Pauses between looks at a write that may still be on its way (the last one repeats).
LOOK_AGAIN_S = (0.5, 1.0, 2.0, 3.0)


async def look_until(
    look: Callable[[], Awaitable[T]], until: float, *, clock: Callable[[], float] = time.monotonic
) -> T:
    """``look``'s answer once it finds something (not None, not empty), else its answer at ``until``
    (a ``clock`` time) or later; looked again at growing intervals meanwhile."""
    pauses = iter(LOOK_AGAIN_S)
    pause = 0.0
    while True:
        found = await look()
        left = until - clock()
        if found or left <= 0:
            return found
        pause = next(pauses, pause)
        await asyncio.sleep(min(pause, left))


@runtime_checkable
class ChannelAdapter(Protocol):
    """A provider's side of the channel tools. Optional methods are only called when
    the matching :class:`ChannelFeatures` flag is set."""

    features: ChannelFeatures
    provider: str
    max_post_chars: int
    #: How long a write whose answer was lost may still land (a survivor waits it out).
    in_flight: InFlight

    async def describe(self, origin: Origin) -> OriginInfo:
        """Names and permalink of the origin, resolved (and cached) in trusted code."""

    async def view(self, raw: Mapping[str, Any]) -> MessageView:
        """Render an inbound message (its provider's own form, :attr:`InboundMessage.data`) the way
        :meth:`read` renders rows."""

    def inbound_ref(self, conversation: str, message_id: str) -> str | None:
        """The ref :meth:`view` gives message ``message_id`` of ``conversation``, when it is
        known without a look (its handle is then minted before the run renders it); None when it is not."""

    async def post(self, origin: Origin, markdown: str, *, effect_id: str, feedback: str = "") -> Posted:
        """Post one message of at most ``max_post_chars`` Markdown into the origin (a thread reply,
        or a new root when ``thread`` is empty). ``effect_id`` travels with the post so a crashed
        run can find what it posted (see :meth:`find_posted`); a non-empty ``feedback`` adds feedback
        buttons whose clicks report that key back (an answer's last message). Never retried
        automatically once the request may have reached the provider."""

    async def open_stream(self, origin: Origin, start: StreamStart) -> LiveMessage:
        """Start a streamed reply in the origin's thread holding ``start``'s Markdown and steps.
        ``unsupported`` when this conversation cannot stream."""

    async def find_posted(self, origin: Origin, effect_id: str) -> list[Posted]:
        """The posts carrying ``effect_id`` in the origin, oldest first (empty if none)."""

    async def find_unfinished(self, origin: Origin, after: str) -> list[Posted]:
        """The bot's streamed messages in the origin's thread newer than message ``after`` that were
        never finished (they carry no effect id yet), oldest first: a stream's start that was not
        answered, or a crash before its ref was journalled, leaves one."""

    async def read(self, origin: Origin) -> list[MessageView]:
        """The whole conversation, oldest first, fetched with as few calls as the provider allows."""

    async def react(self, ref: str, emoji: str, *, add: bool) -> None: ...

    async def edit(self, ref: str, markdown: str, *, feedback: str = "", footer: str = "") -> None:
        """Replace a bot message's Markdown (``feedback`` as for :meth:`post`); a non-empty ``footer``
        is one line of small print under the text (the usage footer; Slack: a ``context`` block)."""

    async def retract(self, ref: str) -> None: ...

    async def file_info(self, ref: str) -> FileMeta:
        """Fresh metadata of a file (for events that carried only an id)."""

    async def fetch_file(self, meta: FileMeta, dest_dir: Path, *, variant: str | None) -> Fetched:
        """Download the file into ``dest_dir``, checking origin, size and type; leaves nothing on failure."""

    async def attach(
        self, origin: Origin, path: Path, *, title: str | None, comment: str | None
    ) -> Uploaded: ...

    async def post_document(self, origin: Origin, title: str, markdown: str) -> Document: ...

    async def set_status(self, origin: Origin, status: str, loading_messages: Sequence[str] = ()) -> None:
        """Show progress text ("is thinking…"); an empty string clears it. ``loading_messages``, when
        given, are shown in turn instead of the text while it lasts (Slack takes up to 10)."""

    async def set_session(
        self, origin: Origin, status: SessionStatus, *, title: str = "", initiator: str = ""
    ) -> None:
        """Set the status of the origin's agent session, creating it when needed (with ``title`` and
        ``initiator``, the person whose message started it). While ``processing`` people see a Stop
        button; a Stop reaches the host as an event of its own (``app.runs.stop``)."""

    async def rename_session(self, origin: Origin, title: str) -> None:
        """Change the title the origin's agent session shows."""

    # -- cards (feature ``ask``): ``channel.cards`` says what a card holds; the adapter draws it --
    async def post_card(self, origin: Origin, card: Card, *, effect_id: str) -> Posted:
        """Post ``card`` into the origin, carrying ``effect_id`` as :meth:`post` does (found by
        :meth:`find_posted` after a crash). Never retried automatically."""

    async def update_card(self, ref: str, card: Card) -> None:
        """Redraw the posted card ``ref`` as ``card`` (once decided: its outcome, no choices)."""

    async def tell_privately(self, channel: str, user: str, text: str, *, thread_ts: str = "") -> None:
        """Show ``text`` to ``user`` only (why a click changed nothing), in ``thread_ts`` when given."""

    def click_key(self, ref: str) -> str:
        """The key a click on message ``ref`` reports (``app.clicks.Action.message_ts``): what the
        store keeps of a posted card, to match clicks against."""

    def clicked_ref(self, channel: str, key: str) -> str:
        """The ref of the message a click reports as ``key`` in ``channel`` (a card, an answer's
        feedback buttons): :meth:`click_key` turned back."""

    async def standing(self, origin: Origin, user: str) -> Standing:
        """How the provider sees ``user`` now in ``origin``'s conversation, asked afresh (no cache);
        never raises: what it could not find out keeps :class:`Standing`'s default."""


#: The method behind each feature flag, each a method of :class:`ChannelAdapter`; registration
#: checks the adapter overrides it.
FEATURE_METHODS: dict[str, str] = {
    "read": "read",
    "react": "react",
    "edit": "edit",
    "retract": "retract",
    "fetch_file": "fetch_file",
    "attach": "attach",
    "documents": "post_document",
    "status": "set_status",
    "stream": "open_stream",
    "ask": "post_card",
    "sessions": "set_session",
}


class AdapterBase:
    """Optional methods default to ``unsupported``; an adapter overrides what its features claim."""

    features: ChannelFeatures = ChannelFeatures()
    provider: str = "unknown"
    #: Longest Markdown one post may carry; longer replies are split by the session.
    max_post_chars: int = 8000
    #: Writes are applied or refused by the time they are answered (a provider's own may differ).
    in_flight: InFlight = InFlight()

    async def standing(self, origin: Origin, user: str) -> Standing:
        return Standing()

    async def find_posted(self, origin: Origin, effect_id: str) -> list[Posted]:
        return []

    def inbound_ref(self, conversation: str, message_id: str) -> str | None:
        return None

    async def find_unfinished(self, origin: Origin, after: str) -> list[Posted]:
        return []

    async def read(self, origin: Origin) -> list[MessageView]:
        raise _unsupported("reading the conversation")

    async def react(self, ref: str, emoji: str, *, add: bool) -> None:
        raise _unsupported("reactions")

    async def edit(self, ref: str, markdown: str, *, feedback: str = "", footer: str = "") -> None:
        raise _unsupported("editing")

    async def retract(self, ref: str) -> None:
        raise _unsupported("retracting")

    async def file_info(self, ref: str) -> FileMeta:
        raise _unsupported("files")

    async def fetch_file(self, meta: FileMeta, dest_dir: Path, *, variant: str | None) -> Fetched:
        raise _unsupported("fetching files")

    async def attach(self, origin: Origin, path: Path, *, title: str | None, comment: str | None) -> Uploaded:
        raise _unsupported("attaching files")

    async def post_document(self, origin: Origin, title: str, markdown: str) -> Document:
        raise _unsupported("documents")

    async def set_status(self, origin: Origin, status: str, loading_messages: Sequence[str] = ()) -> None:
        raise _unsupported("status")

    async def open_stream(self, origin: Origin, start: StreamStart) -> LiveMessage:
        raise _unsupported("streaming")

    async def set_session(
        self, origin: Origin, status: SessionStatus, *, title: str = "", initiator: str = ""
    ) -> None:
        raise _unsupported("agent sessions")

    async def rename_session(self, origin: Origin, title: str) -> None:
        raise _unsupported("agent sessions")

    async def post_card(self, origin: Origin, card: Card, *, effect_id: str) -> Posted:
        raise _unsupported("cards")

    async def update_card(self, ref: str, card: Card) -> None:
        raise _unsupported("cards")

    async def tell_privately(self, channel: str, user: str, text: str, *, thread_ts: str = "") -> None:
        raise _unsupported("private notes")

    def click_key(self, ref: str) -> str:
        return ref

    def clicked_ref(self, channel: str, key: str) -> str:
        return key


def _unsupported(what: str) -> Exception:
    from .errors import ChannelError

    return ChannelError("unsupported", f"This workspace's install does not support {what}.")


def missing_implementations(adapter: object) -> list[str]:
    """Features the adapter claims but does not implement (still the ``AdapterBase`` default)."""
    features: ChannelFeatures = adapter.features  # type: ignore[attr-defined]
    missing = []
    for flag in sorted(features.enabled()):
        method = FEATURE_METHODS[flag]
        impl = getattr(type(adapter), method, None)
        if impl is None or impl is getattr(AdapterBase, method, None):
            missing.append(flag)
    return missing
