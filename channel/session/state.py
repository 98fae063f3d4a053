"""What one session holds (handles, journal, posts, streaming state), and reading the conversation."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from storage.base import Fence, TaskRecord

from .. import task_files
from ..contract import ChannelAdapter, FileMeta, MessageView, Origin, OriginInfo
from ..errors import ChannelError
from ..handles import HandleRegistry
from ..inbound import InboundMessage
from ..journal import CALL_ID, EffectJournal, WriteGuard
from ..selection import ToolSelection
from ..store import SessionStore
from ..streaming import FLUSH_INTERVAL, AnswerStream
from ..tools import ReadArgs

Result = dict[str, Any]
_CURSOR = re.compile(r"^before_(\d{1,7})$")
__all__ = ["CALL_ID", "Result", "SessionState"]


class SessionState:
    """The state every part of a session shares; :class:`channel.session.ChannelSession` is built on it."""

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
        follow_ups_max: int = 1000,
    ) -> None:
        """``guard`` is awaited before every write and may raise to stop it; ``fence`` (the host's
        lease) is carried by every journal entry (see the journal). ``files_max_bytes`` bounds the
        task's files on disk (``TASK_FILES_MAX_BYTES``), ``follow_ups_max`` the install's pending
        follow-ups (``FOLLOW_UPS_MAX``)."""
        self.adapter = adapter
        self.store = store
        self.task = task
        self.origin = origin
        self.tools = tools
        self.task_dir = task_dir
        self.files_max_bytes = files_max_bytes
        self.clock = clock
        #: The clock follow-ups are scheduled by: ``clock``, except where the host's follow-up sweep
        #: runs on another (the playground's demo clock, which fast-forward moves).
        self.follow_up_clock = clock
        self.follow_ups_max = follow_ups_max
        #: The person whose message led to this run ("" for none); the host sets it when the run starts.
        self.requester = ""
        # A session is the task's activity: its files are kept FILES_TTL_DAYS from now (one utime).
        task_files.mark_used(task_dir)
        self.handles = HandleRegistry(store, task.task_id)
        self.journal = EffectJournal(store, task.task_id, clock, guard, fence)
        selectable = {s.name for s in tools.deferred} | {t.name for t in tools.host_deferred}
        # In the order they were enabled (as stored): offered after the starting tools in that order,
        # so enabling one appends to the tool definitions and the cached prefix before it stays.
        self._enabled_order: list[str] = [t for t in task.enabled_tools if t in selectable]
        self.enabled: set[str] = set(self._enabled_order)
        #: Handles of every message the bot posted in this run.
        self.posted: list[str] = []
        #: Plain posts (not streamed) this run began, numbered from 1; and the number of the
        #: newest that reached its origin thread. Such a post clears the thread's assistant status
        #: (Slack): one begun after a status was set has cleared it (``app.runs.progress``).
        self.posts_begun = 0
        self.last_thread_post = 0
        #: Set once a channel_reply succeeded (or the host posted the final text) since the newest
        #: message the model was shown (:meth:`shown_new_message` clears it).
        self.replied = False
        #: A reply was posted before the newest message steered into the run.
        self.replied_before = False
        # The newest post of this run, where a usage footer goes: its ref, text and feedback key.
        self._last_post: tuple[str, str, str] | None = None
        #: Feedback buttons on each answer's last message report this key (the host sets it); "" for none.
        self.feedback = ""
        #: The answer being streamed, when the host turned streaming on (:meth:`stream_answers`).
        self.answer: AnswerStream | None = None
        self._streaming = False
        self._recipient: InboundMessage | None = None
        self._interval = FLUSH_INTERVAL
        # A `run` without --thread posts a new root; its later posts go into that root's thread.
        self._adopt_first_root = adopt_first_root
        self._conversation: list[MessageView] | None = None
        #: :meth:`look_ahead`'s lookup, with the origin it describes.
        self._describing: tuple[Origin, asyncio.Future[OriginInfo]] | None = None

    # -- what the host needs about the conversation ----------------------------------------
    def shown_new_message(self) -> None:
        """A message steered into the run reached the model: a reply made before it was not its
        answer, so the run's final text answers it unless the model replies again."""
        self.replied_before = self.replied_before or self.replied
        self.replied = False

    @property
    def replied_in_run(self) -> bool:
        """Whether this run posted a reply at all (its outcome, its log line)."""
        return self.replied or self.replied_before

    def look_ahead(self) -> None:
        """Start :meth:`describe` now, in the background: the run's instructions need it, and its
        lookup (``conversations.info`` of a channel not seen yet) then overlaps the run's first
        store trips instead of following them."""
        if self._describing is None:
            self._describing = (self.origin, asyncio.ensure_future(self.adapter.describe(self.origin)))
            # Retrieved here too: a run that ends before its instructions leaves no unread error.
            self._describing[1].add_done_callback(_ignore_outcome)

    async def describe(self) -> OriginInfo:
        """Names and permalink of this conversation, for the run's instructions."""
        if self._describing is not None and self._describing[0] == self.origin:
            return await asyncio.shield(self._describing[1])
        return await self.adapter.describe(self.origin)

    async def inbound_row(self, raw: Mapping[str, Any]) -> Result:
        """An inbound message (as the ingress stored it) as the model sees it, like a channel_read row."""
        return await self.row(await self.adapter.view(raw))

    # -- reading ----------------------------------------------------------------------
    async def conversation(self) -> list[MessageView]:
        """The conversation, fetched once per session and served from memory afterwards."""
        if self._conversation is None:
            self._conversation = await self.adapter.read(self.origin)
        return self._conversation

    async def _read(self, args: ReadArgs) -> Result:
        messages = await self.conversation()
        end = len(messages)
        if args.cursor is not None:
            match = _CURSOR.match(args.cursor)
            if match is None or not 0 < int(match.group(1)) <= len(messages):
                raise ChannelError(
                    "invalid_arguments", "cursor must be a next_cursor value from channel_read."
                )
            end = int(match.group(1))
        start = max(0, end - args.limit)
        rows = [await self.row(m) for m in messages[start:end]]
        return {"messages": rows, "next_cursor": f"before_{start}" if start > 0 else None}

    async def row(self, view: MessageView) -> Result:
        """A message as the model sees it, with handles minted for it and its files."""
        row: Result = {
            "message": await self.handles.mint("msg", view.ref, authored=view.author.is_you),
            "author": {
                "display_name": view.author.display_name,
                "is_bot": view.author.is_bot,
                "is_you": view.author.is_you,
            },
            "text": view.text,
            "time": view.time,
            "files": [await self._file_row(f) for f in view.files],
        }
        if view.reactions:
            row["reactions"] = dict(view.reactions)
        return row

    async def _file_row(self, meta: FileMeta, *, authored: bool = False) -> Result:
        if meta.unavailable:
            # Listed so the model knows it is there, but with no handle: nothing could fetch it.
            return {"name": meta.name, "unavailable": meta.unavailable}
        data = json.dumps({"name": meta.name, "media_type": meta.media_type, "size": meta.size, **meta.data})
        handle = await self.handles.mint("file", meta.ref, authored=authored, data=data)
        return {"file": handle, "name": meta.name, "media_type": meta.media_type, "size": meta.size}


def _ignore_outcome(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # read, so an error no caller awaited is not reported as unretrieved
