"""The session itself: the owner of its parts, the answer streamed as it is written, and one tool call
dispatched, never raising."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from storage.base import EffectRecord, Fence, LeaseMoved, StoreError, TaskRecord
from storage.crashpoints import crash_point

from .. import task_files
from ..contract import ChannelAdapter, Origin, OriginInfo, Posted, Step, WriteGuard
from ..errors import ChannelError
from ..file_quota import FileQuota
from ..inbound import InboundMessage
from ..selection import HostTool, ToolSelection
from ..store import SessionStore
from ..streaming import FLUSH_INTERVAL, AnswerStream
from ..tools import TitleArgs, ToolSpec
from .asking import AskHost, Asking, TurnEnd
from .files import Files
from .follow_ups import FollowUpTools
from .offer import Offer
from .replies import Replies
from .state import CALL_ID, Reading, Result, SessionState

log = logging.getLogger(__name__)


class ChannelSession:
    """The channel tools bound to one task's conversation (see :mod:`channel.session`): the owner of
    its parts, which share one :class:`SessionState`, and the answer streamed as it is written."""

    def __init__(
        self,
        *,
        adapter: ChannelAdapter,
        store: SessionStore,
        task: TaskRecord,
        origin: Origin,
        tools: ToolSelection,
        task_dir: Path,
        adopt_first_root: bool = False,
        clock: Callable[[], float] = time.time,
        guard: WriteGuard | None = None,
        fence: Fence | None = None,
        files_max_bytes: int = task_files.DEFAULT_MAX_BYTES,
        file_quota: FileQuota | None = None,
        follow_ups_max: int = 1000,
        follow_up_clock: Callable[[], float] | None = None,
        asks: AskHost | None = None,
    ) -> None:
        """``guard`` is awaited before every write and may raise to stop it; ``fence`` (the host's
        lease) is carried by every journal entry (see the journal). ``files_max_bytes`` bounds the
        task's files on disk (``TASK_FILES_MAX_BYTES``), ``file_quota`` holds the host's disk
        reservations (shared by its sessions), ``follow_ups_max`` the install's pending
        follow-ups (``FOLLOW_UPS_MAX``); ``follow_up_clock`` is what follow-ups are scheduled by
        (default ``clock``; the playground's demo clock). ``asks``: the host's cards, for adapters
        that post them."""
        self.state = SessionState(
            adapter=adapter, store=store, task=task, origin=origin, clock=clock, guard=guard, fence=fence
        )
        # The state's fixed parts, as the host and the answer stream (``ReplyHost``) reach them.
        self.adapter, self.store, self.clock = adapter, store, clock
        self.journal, self.handles = self.state.journal, self.state.handles
        self.reading: Reading = Reading(self.state)
        self.replies: Replies = Replies(self.state, adopt_first_root=adopt_first_root)
        self.files: Files = Files(
            self.state, self.reading, task_dir=task_dir, max_bytes=files_max_bytes, quota=file_quota
        )
        self.follow_ups: FollowUpTools = FollowUpTools(
            self.state, clock=follow_up_clock or clock, install_max=follow_ups_max
        )
        self.asking: Asking = Asking(asks)
        self.offer: Offer = Offer(self.state, tools)
        self._streaming = False
        #: Awaited when the provider closed a message of the answer early (the host may stop the run).
        self.on_stream_closed: Callable[[], Awaitable[None]] | None = None
        self._recipient: InboundMessage | None = None
        self._interval = FLUSH_INTERVAL

    # -- the conversation and this run in it (what the host reads and sets) -----------------------
    @property
    def tools(self) -> ToolSelection:
        return self.offer.tools

    @property
    def task(self) -> TaskRecord:
        return self.state.task

    @task.setter
    def task(self, task: TaskRecord) -> None:
        """The task as a resumed run goes on with it (its transcript answered from the journal)."""
        self.state.task = task

    @property
    def origin(self) -> Origin:
        return self.state.origin

    @origin.setter
    def origin(self, origin: Origin) -> None:
        self.state.origin = origin

    @property
    def requester(self) -> str:
        """The person whose message led to this step (set by the run as it starts each step)."""
        return self.state.requester

    @requester.setter
    def requester(self, person: str) -> None:
        self.state.requester = person

    @property
    def feedback(self) -> str:
        """The key feedback buttons report ("" for none; the run sets it)."""
        return self.state.feedback

    @feedback.setter
    def feedback(self, key: str) -> None:
        self.state.feedback = key

    @property
    def replied(self) -> bool:
        """A reply was posted since the newest message the model was shown (a resumed run, or a
        host note that is the run's whole answer, says so)."""
        return self.state.replied

    @replied.setter
    def replied(self, replied: bool) -> None:
        self.state.replied = replied

    @property
    def turn_end(self) -> TurnEnd:
        """``waiting``/``silent``: the turn ends before its next model request (a resumed run whose
        card waits sets ``waiting``)."""
        return self.asking.turn_end

    @turn_end.setter
    def turn_end(self, end: TurnEnd) -> None:
        self.asking.turn_end = end

    @property
    def silent(self) -> bool:
        return self.asking.silent

    @property
    def asks(self) -> AskHost | None:
        return self.asking.host

    @property
    def answer(self) -> AnswerStream | None:
        """The answer being streamed, if any."""
        return self.state.answer

    @property
    def task_dir(self) -> Path:
        return self.files.task_dir

    @property
    def files_max_bytes(self) -> int:
        return self.files.max_bytes

    @property
    def file_quota(self) -> FileQuota:
        return self.files.quota

    @property
    def posted(self) -> list[str]:
        return self.replies.posted

    @property
    def posts_begun(self) -> int:
        return self.replies.posts_begun

    @property
    def last_thread_post(self) -> int:
        return self.replies.last_thread_post

    @property
    def enabled(self) -> set[str]:
        return self.offer.enabled

    @property
    def enabled_in_order(self) -> list[str]:
        return self.offer.enabled_in_order

    def shown_new_message(self) -> None:
        """A message steered into the run reached the model: a reply made before it was not its
        answer, so the run's final text answers it unless the model replies again."""
        self.state.replied_before = self.state.replied_before or self.state.replied
        self.state.replied = False

    @property
    def replied_in_run(self) -> bool:
        """Whether this run posted a reply at all (its outcome, its log line)."""
        return self.state.replied or self.state.replied_before

    # -- the parts' methods the host calls --------------------------------------------------------
    def look_ahead(self) -> None:
        self.reading.look_ahead()

    async def describe(self) -> OriginInfo:
        return await self.reading.describe()

    async def inbound_row(self, raw: Mapping[str, Any]) -> Result:
        return await self.reading.inbound_row(raw)

    def active_specs(self) -> list[ToolSpec]:
        return self.offer.active_specs()

    def active_host_tools(self) -> list[HostTool]:
        return self.offer.active_host_tools()

    def offered_names(self) -> list[str]:
        return self.offer.offered_names()

    def offered(self, name: str) -> bool:
        return self.offer.offered(name)

    async def post_markdown(self, markdown: str, *, feedback: bool = True) -> Result:
        return await self.replies.post_markdown(markdown, feedback=feedback)

    async def post_rest(
        self, markdown: str, reached: tuple[int, int | None] | None, *, feedback: bool = True
    ) -> list[str]:
        return await self.replies.post_rest(markdown, reached, feedback=feedback)

    async def post_note_once(self, effect_id: str, markdown: str) -> None:
        await self.replies.post_note_once(effect_id, markdown)

    async def post_once(self, markdown: str, effect_id: str, *, feedback: str = "") -> Posted:
        return await self.replies.post_once(markdown, effect_id, feedback=feedback)

    async def record_post(self, posted: Posted) -> str:
        return await self.replies.record_post(posted)

    def forget_post(self, handle: str) -> None:
        self.replies.forget_post(handle)

    async def add_footer(self, footer: str) -> None:
        await self.replies.add_footer(footer)

    async def reconcile(self, effects: Sequence[EffectRecord]) -> list[str]:
        """Settle effects a crashed run left open: the asks' cards through the ask host (found by
        their effect id, so posted once), follow-ups looked up in the store, host notes finished
        once, the rest by the journal (``channel.journal.reconcile``)."""
        rest = await self.follow_ups.settle(await self.asking.settle_asks(self, effects))
        rest = await self.replies.settle_notes(rest)
        return await self.replies.reconcile(rest) if rest else []

    # -- streaming ----------------------------------------------------------------------
    def stream_answers(self, recipient: InboundMessage | None, *, interval: float = FLUSH_INTERVAL) -> bool:
        """Stream answers from now on, when the adapter can stream here (a thread); ``recipient`` is the
        inbound message answered. Returns whether streaming is on."""
        self._streaming = self.adapter.features.stream and bool(self.origin.thread)
        self._recipient = recipient
        self._interval = interval
        return self._streaming

    @property
    def streaming(self) -> bool:
        """Answers stream, and the current one (if any) has not fallen back to posts."""
        return self._streaming and not (self.answer is not None and self.answer.broken)

    def _answer_stream(self) -> AnswerStream:
        if self.state.answer is None:
            self.state.answer = AnswerStream(
                self, recipient=self._recipient, feedback=self.feedback, interval=self._interval
            )
        return self.state.answer

    def stream_text(self, source: str, text: str) -> None:
        """What ``source`` wrote so far: ``text:…`` a model response's text (shown until the session
        replied), ``call:<id>`` a channel_reply call's ``text`` argument."""
        if not self._streaming or self.silent or (self.replied and not source.startswith("call:")):
            return
        if not text and self.answer is None:
            return
        self._answer_stream().text(source, text)

    def stream_step(self, step: Step) -> None:
        """A tool started or ended; shown in the answer being streamed (not after the reply)."""
        if not self._streaming or (self.replied and self.answer is None):
            return
        self._answer_stream().step(step)

    async def answer_with(self, markdown: str) -> Result:
        """The run's final text as the reply: the streamed answer finished with it, or posted."""
        answer, self.state.answer = self.state.answer, None
        if answer is not None:
            result = await answer.finish(markdown)
            self.replied = True
            await self.replies.remember_streamed(markdown, result)
            return result
        return await self.replies.post_markdown(markdown)

    def stop_streaming(self) -> None:
        """Stop feeding the answer being streamed (the run is over); writes nothing."""
        self._streaming = False
        if self.answer is not None:
            self.answer.cancel()

    async def stream_closed(self) -> None:
        """The provider closed a message of the answer early (see ``ReplyHost.stream_closed``)."""
        if self.on_stream_closed is not None:
            await self.on_stream_closed()

    async def finish_streams(self) -> None:
        """A person stopped the run: the answer being streamed ends as it stands (``AnswerStream.halt``)."""
        if self.answer is not None:
            await self.answer.halt()

    async def drop_answer(self) -> None:
        """The run ended without the streamed text becoming an answer: remove what was shown."""
        answer, self.state.answer = self.state.answer, None
        if answer is not None:
            await answer.abandon()

    async def set_title(self, args: TitleArgs) -> Result:
        """``channel_set_title``: the conversation's agent session renamed, and the title kept for the
        session's next creation (a person's rename in Slack replaces it the same way)."""
        title = " ".join(args.title.split())
        await self.adapter.rename_session(self.origin, title)
        await self.store.set_session_title(self.task.task_id, title, now=self.clock())
        return {"title": title}

    # -- calling ----------------------------------------------------------------------
    async def call(self, name: str, args: Any, *, call_id: str = "") -> Result:
        """Run one tool call; always returns a result (an error result on any refusal or failure).
        ``call_id`` is the model's id for the call (a streamed reply is matched by it)."""
        crash_point("tool.call")  # a step's checkpoint may still be held here (app.runs.checkpoint)
        token = CALL_ID.set(call_id)
        try:
            return await self._call(name, args)
        finally:
            CALL_ID.reset(token)

    async def _call(self, name: str, args: Any) -> Result:
        spec = next((s for s in self.offer.active_specs() if s.name == name), None)
        if spec is None:
            deferred = any(s.name == name for s in (*self.tools.deferred, *self.tools.host_deferred))
            hint = " Use tool_search to enable it." if deferred else ""
            return ChannelError("unsupported", f"There is no tool {name!r} available now.{hint}").as_result()
        try:
            parsed = spec.args.model_validate(args if args is not None else {})
        except ValidationError as exc:
            return _validation_error(exc).as_result()
        try:
            if not spec.journal.runs_with_held:
                # It may write outside the journal: what the host held back goes first (journal doc).
                await self.journal.settle_held()
            return await spec.handler(self, parsed)
        except ChannelError as exc:
            return exc.as_result()
        except LeaseMoved:
            raise  # the host may no longer act for the task: its run stops (no result to report)
        except StoreError:
            # Our own bookkeeping failed, not the call: the run stops (the host takes the conversation
            # up again from its last checkpoint, where the journal settles what this call began). A
            # model told "it may not have happened" would do it again.
            log.warning("store failure in tool %s: the run stops and is taken up again", name)
            raise


_HANDLE_FIELDS = {"message": "msg", "file": "file", "follow_up": "fu"}


def _validation_error(exc: ValidationError) -> ChannelError:
    # A raw Slack ts or file id in a handle field is a handle problem, and the model should hear so.
    for err in exc.errors():
        field_name = str(err["loc"][0]) if err["loc"] else ""
        if field_name in _HANDLE_FIELDS and err["type"] == "string_pattern_mismatch":
            kind = _HANDLE_FIELDS[field_name]
            return ChannelError(
                "invalid_handle",
                f"{field_name} must be a {kind}_… handle from channel_read or your prompt; "
                "raw Slack ids and timestamps are not accepted.",
            )
    return ChannelError("invalid_arguments", _describe(exc))


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err["loc"]) or "arguments"
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown argument {loc!r}")
        else:
            parts.append(f"{loc}: {err['msg']}")
    return "invalid arguments: " + "; ".join(parts)
