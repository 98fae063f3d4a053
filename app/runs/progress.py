"""Visible progress while a run works: a runtime effect around the run, never a model tool.

Where Slack allows it (the ``status`` feature: ``chat:write`` since Slack's 2026-03-05 change,
and an origin that is a thread) the thread shows "is thinking…" and then the tool
being used ("is reading the thread…"), cleared when the run ends (unless the run posted in
the thread after it was last set: Slack clears it then, and the run's end makes no call). Otherwise — or
when Slack refuses the status in ``auto`` mode — the newest inbound message gets a
reaction (``PROGRESS_EMOJI``, default ``eyes``), removed when the run ends.

Slack clears a status by itself about two minutes after it was set when nothing is posted, so
while a run works the status is set again every :data:`REFRESH_S` seconds (the text it shows then).
"is thinking…" goes with rotating ``loading_messages`` (the agent file's, else
:data:`LOADING_MESSAGES`), which Slack shows in turn instead of the text.

``PROGRESS``: ``auto`` (status, else reaction), ``status``, ``reaction`` or ``off``.
A failure here never fails a run: it is logged and the indicator gives up for that run.
Nor does it hold a run up: showing the indicator may take ``SETTLE_S`` before the
run's first tool or its end stops waiting for it, and clearing it ``CLEAR_S``.

Under ``serve`` with the HTTP edge in a process of its own, a new conversation's "is thinking…"
is set by that process right after its 200 (``app.intake.edge_status``): it says so before the
conversation's wake-up and tells the outcome when Slack answered (:meth:`Progress.edge_said`).
The run then takes that status as its own instead of setting it again, and the Slack call's work
stays off the process that runs the turn.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal
from weakref import WeakKeyDictionary

from app.agent.approvals import is_decision
from channel import inbound
from channel.contract import ChannelAdapter, Origin
from channel.errors import ChannelError
from channel.session import ChannelSession
from channel.tools import spec_named
from storage.base import InboxItem

from .follow_ups import is_follow_up
from .run import RunHooks

log = logging.getLogger(__name__)

MODES = ("auto", "status", "reaction", "off")
THINKING = "is thinking…"
#: Rotating texts under a thinking status when the agent file gives no ``loading_messages``.
LOADING_MESSAGES = (
    "Thinking…",
    "Reading the conversation…",
    "Working on it…",
    "Checking the details…",
    "Putting an answer together…",
)
#: Seconds between refreshes of a status while a run works: under Slack's ~2 minutes.
REFRESH_S = 90.0
#: Seconds a tool step or the run's end waits for the indicator to appear before giving up on it.
SETTLE_S = 5.0
#: Seconds the run's end spends clearing the indicator (a status Slack clears itself on the next post).
CLEAR_S = 10.0
#: Statuses the edge's process is showing, kept for runs not started yet; the oldest go first.
EDGE_SHOWN_KEPT = 1_000


@dataclass(slots=True)
class _Indicator:
    kind: Literal["status", "reaction"]
    origin: Origin
    ref: str = ""
    broken: bool = False
    #: The status shown now, and its loading messages: what a refresh sets again.
    text: str = THINKING
    loading: tuple[str, ...] = ()
    refresher: asyncio.Task[None] | None = None
    #: The run's ``posts_begun`` when the status was last set: a post begun later has cleared it.
    posts: int = 0
    #: A refresh was cancelled mid-call: Slack may have set the status after the last post.
    unsure: bool = False


class Progress:
    def __init__(self, mode: str = "auto", emoji: str = "eyes", loading_messages: Sequence[str] = ()) -> None:
        mode = mode.strip().lower()
        if mode not in MODES:
            raise ValueError(f"PROGRESS must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode = mode
        self.emoji = emoji.strip(":")
        self.loading_messages = tuple(loading_messages) or LOADING_MESSAGES
        # Per run; weak so a run that never reached on_end (cancelled at shutdown) leaves nothing behind.
        self._runs: WeakKeyDictionary[ChannelSession, _Indicator] = WeakKeyDictionary()
        self._starting: WeakKeyDictionary[ChannelSession, asyncio.Task[None]] = WeakKeyDictionary()
        # Task id → when the edge's process set its thinking status (loop time), None if it could not.
        self._edge: OrderedDict[str, asyncio.Future[float | None]] = OrderedDict()

    @property
    def status_wanted(self) -> bool:
        """Whether a run shows a status where Slack allows one (the edge's process asks)."""
        return self.mode in ("auto", "status")

    def edge_said(self, task_id: str, state: str) -> None:
        """What the HTTP edge's process says of a new conversation's thinking status: ``setting``
        (before the task's wake-up), then ``ok`` or ``failed`` once Slack answered, before or after
        the task's run began; ``gone`` (any task) when the edge said its last."""
        if state == "gone":  # the edge's process said its last: no outcome will come
            for waiting in self._edge.values():
                if not waiting.done():
                    waiting.set_result(None)
            return
        if state == "setting":
            self._edge[task_id] = asyncio.get_running_loop().create_future()
            while len(self._edge) > EDGE_SHOWN_KEPT:  # runs that never began (stopped, taken over)
                _, stale = self._edge.popitem(last=False)
                stale.cancel()
            return
        shown = self._edge.get(task_id)
        if shown is not None and not shown.done():
            shown.set_result(asyncio.get_running_loop().time() if state == "ok" else None)

    def hooks(self) -> RunHooks:
        if self.mode == "off":
            return RunHooks()
        return RunHooks(on_start=self.on_start, on_tool=self.on_tool, on_end=self.on_end)

    async def on_start(self, session: ChannelSession, items: Sequence[InboxItem]) -> None:
        # Shown in the background: the first model request must not wait for a Slack round trip.
        self._starting[session] = asyncio.create_task(self._begin(session, items), name="progress")

    async def _settled(self, session: ChannelSession) -> None:
        starting = self._starting.pop(session, None)
        if starting is None:
            return
        # Bounded: a Slack call stuck behind rate limits must not keep the run (and its lease) alive.
        await asyncio.wait([starting], timeout=SETTLE_S)
        if not starting.done():
            log.debug("progress: indicator not shown in time; giving up for this run")
            starting.cancel()
            await asyncio.wait([starting])
        if not starting.cancelled() and starting.exception() is not None:
            log.warning("progress: showing the indicator failed", exc_info=starting.exception())

    async def _begin(self, session: ChannelSession, items: Sequence[InboxItem]) -> None:
        adapter, origin = session.adapter, session.origin
        if self.status_wanted and adapter.features.status and origin.thread:
            by_edge = self._edge.get(session.task.task_id) if self._edge else None
            if by_edge is not None:
                at = await by_edge  # set (or refused: the reaction instead) by the edge; not set again
                self._edge.pop(session.task.task_id, None)
                shown = at is not None
                if at is not None and asyncio.get_running_loop().time() - at > REFRESH_S:
                    # The run waited long for a slot: Slack may be about to clear it. Set it again now.
                    shown = await self._status(adapter, origin, THINKING, self.loading_messages)
            else:
                shown = await self._status(adapter, origin, THINKING, self.loading_messages)
            if shown:
                indicator = _Indicator(
                    "status", origin, loading=self.loading_messages, posts=session.posts_begun
                )
                indicator.refresher = asyncio.create_task(
                    self._refresh(weakref.ref(session), indicator), name="progress-refresh"
                )
                self._runs[session] = indicator
                return
        if self.mode in ("auto", "reaction") and adapter.features.react and items:
            # A decision or a follow-up is no Slack message to mark.
            messages = [i for i in items if not is_decision(i) and not is_follow_up(i)]
            ref = await self._newest_ref(adapter, messages) if messages else ""
            if ref and await self._react(adapter, ref, add=True):
                self._runs[session] = _Indicator("reaction", origin, ref)

    async def on_tool(self, session: ChannelSession, tool: str) -> None:
        await self._settled(session)
        indicator = self._runs.get(session)
        if indicator is not None and indicator.kind == "reaction" and tool == "channel_react":
            # The run reacts itself (often with the same 👀): the indicator steps aside, so that reaction
            # is the run's own (no already_reacted) and stays after the run.
            self._runs.pop(session, None)
            await self._react(session.adapter, indicator.ref, add=False)
            return
        if session.streaming:
            return  # the streamed answer shows the step instead (app.runs.streaming)
        spec = spec_named(tool)
        text = spec.status if spec is not None else None  # a host's tool leaves the status as it is
        if indicator is None or indicator.kind != "status" or indicator.broken or text is None:
            return
        if await self._status(session.adapter, indicator.origin, text):
            indicator.text, indicator.loading, indicator.posts = text, (), session.posts_begun
        else:
            indicator.broken = True  # one failure is enough: stop calling for the rest of the run

    async def tool_progress(self, session: ChannelSession, text: str) -> None:
        """A host tool's own word on how far it is (an MCP server's progress): shown as the status."""
        indicator = self._runs.get(session)
        if indicator is None or indicator.kind != "status" or indicator.broken:
            return
        if await self._status(session.adapter, indicator.origin, f"is using {text}…"):
            indicator.text, indicator.loading, indicator.posts = f"is using {text}…", (), session.posts_begun
        else:
            indicator.broken = True

    async def on_end(self, session: ChannelSession, items: Sequence[InboxItem], status: str) -> None:
        await self._settled(session)
        indicator = self._runs.pop(session, None)
        if indicator is not None and indicator.refresher is not None:
            indicator.refresher.cancel()
            await asyncio.wait([indicator.refresher])
        if indicator is None or status == "stopped":
            return  # stopped: the conversation's new owner shows (and clears) its own indicator
        if indicator.kind == "status" and not indicator.unsure and session.last_thread_post > indicator.posts:
            return  # a post begun after the status was last set reached the thread: Slack cleared it
        try:
            async with asyncio.timeout(CLEAR_S):
                if indicator.kind == "status":
                    await self._status(session.adapter, indicator.origin, "")
                else:
                    await self._react(session.adapter, indicator.ref, add=False)
        except TimeoutError:
            log.debug("progress: indicator not cleared in time")

    async def _refresh(self, session: weakref.ref[ChannelSession], indicator: _Indicator) -> None:
        """Set the status again every REFRESH_S while the run lives (Slack would clear it otherwise)."""
        while True:
            await asyncio.sleep(REFRESH_S)
            live = session()
            if live is None or indicator.broken:
                return  # the run is gone (cancelled before its end hook) or Slack refuses the status
            adapter = live.adapter
            del live  # hold no reference while waiting: the run's end must be able to let go of it
            indicator.unsure = True  # until this call is answered (the run's end may cancel it)
            if not await self._status(adapter, indicator.origin, indicator.text, indicator.loading):
                indicator.broken = True
            elif (live := session()) is not None:
                indicator.posts = live.posts_begun  # set again: only a post begun after it clears it
                del live
            indicator.unsure = False

    async def _newest_ref(self, adapter: ChannelAdapter, items: Sequence[InboxItem]) -> str:
        message = inbound.stored(items[-1].payload)
        if message is None:
            log.debug("progress: no message to react to (the newest item is no message)")
            return ""
        if message.ref:
            return message.ref
        try:
            # A row stored before refs were kept: view() renders with cached names (the prompt just
            # rendered the same message), no extra call.
            return (await adapter.view(message.data)).ref
        except ChannelError as exc:
            log.debug("progress: no message to react to (%s)", exc)
            return ""

    async def _status(
        self, adapter: ChannelAdapter, origin: Origin, text: str, loading: Sequence[str] = ()
    ) -> bool:
        try:
            await adapter.set_status(origin, text, loading)
        except ChannelError as exc:
            log.debug("progress: status not shown (%s)", exc.provider_code or exc.code)
            return False
        except Exception:  # the contract says adapters raise only ChannelError; progress must not fail a run
            log.warning("progress: status failed unexpectedly", exc_info=True)
            return False
        return True

    async def _react(self, adapter: ChannelAdapter, ref: str, *, add: bool) -> bool:
        try:
            await adapter.react(ref, self.emoji, add=add)
        except ChannelError as exc:
            if exc.code == "already_done":  # left by a crashed run, or already gone: what we wanted
                return True
            log.debug(
                "progress: reaction not %s (%s)", "added" if add else "removed", exc.provider_code or exc.code
            )
            return False
        except Exception:
            log.warning("progress: reaction failed unexpectedly", exc_info=True)
            return False
        return True
