"""What the parts of one session share (the conversation it is bound to, what this run did in it), and
reading the conversation (``channel_read``, a message as the model sees it, the conversation's names)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from storage.base import Fence, TaskRecord

from ..contract import ChannelAdapter, FileMeta, MessageView, Origin, OriginInfo, WriteGuard
from ..errors import ChannelError
from ..handles import HandleRegistry
from ..journal import CALL_ID, EffectJournal
from ..store import SessionStore
from ..streaming import AnswerStream
from ..tools import ReadArgs

Result = dict[str, Any]
_CURSOR = re.compile(r"^before_(\d{1,7})$")
__all__ = ["CALL_ID", "Reading", "Result", "SessionState"]


class SessionState:
    """The state the session's parts (:mod:`channel.session`) share, and nothing else: the adapter,
    the store and the task's handles and journal; the conversation (``origin``, which a first post
    may set) and its task; who asked; and the answer: whether it was given, and the one streamed.
    What only one part needs stays in that part."""

    def __init__(
        self,
        *,
        adapter: ChannelAdapter,
        store: SessionStore,
        task: TaskRecord,
        origin: Origin,
        clock: Callable[[], float],
        guard: WriteGuard | None,
        fence: Fence | None,
    ) -> None:
        """``guard`` is awaited before every write and may raise to stop it; ``fence`` (the host's
        lease) is carried by every journal entry (see :mod:`channel.journal`)."""
        self.adapter = adapter
        self.store = store
        self.task = task
        self.origin = origin
        self.clock = clock
        self.handles = HandleRegistry(store, task.task_id)
        self.journal = EffectJournal(store, task.task_id, clock, guard, fence)
        #: The person whose message led to this step ("" for none; the run sets it): who may answer
        #: an ask by default, and for whom a follow-up runs.
        self.requester = ""
        #: Feedback buttons on each answer's last message report this key (the run sets it); "" for none.
        self.feedback = ""
        #: Set once a channel_reply succeeded (or the host posted the final text) since the newest
        #: message the model was shown (``ChannelSession.shown_new_message`` clears it).
        self.replied = False
        #: A reply was posted before the newest message steered into the run.
        self.replied_before = False
        #: The answer being streamed, when the host turned streaming on; a channel_reply call that
        #: owns it finishes it instead of posting.
        self.answer: AnswerStream | None = None


class Reading:
    """The conversation as the model reads it; rows carry handles minted for this task."""

    def __init__(self, state: SessionState) -> None:
        self._state = state
        self._conversation: list[MessageView] | None = None
        #: :meth:`look_ahead`'s lookup, with the origin it describes.
        self._describing: tuple[Origin, asyncio.Future[OriginInfo]] | None = None

    def look_ahead(self) -> None:
        """Start :meth:`describe` now, in the background: the run's instructions need it, and its
        lookup (``conversations.info`` of a channel not seen yet) then overlaps the run's first
        store trips instead of following them."""
        if self._describing is None:
            origin = self._state.origin
            self._describing = (origin, asyncio.ensure_future(self._state.adapter.describe(origin)))
            # Retrieved here too: a run that ends before its instructions leaves no unread error.
            self._describing[1].add_done_callback(_ignore_outcome)

    async def describe(self) -> OriginInfo:
        """Names and permalink of this conversation, for the run's instructions."""
        if self._describing is not None and self._describing[0] == self._state.origin:
            return await asyncio.shield(self._describing[1])
        return await self._state.adapter.describe(self._state.origin)

    async def inbound_row(self, raw: Mapping[str, Any]) -> Result:
        """An inbound message (as the ingress stored it) as the model sees it, like a channel_read row."""
        return await self.row(await self._state.adapter.view(raw))

    async def conversation(self) -> list[MessageView]:
        """The conversation, fetched once per session and served from memory afterwards."""
        if self._conversation is None:
            self._conversation = await self._state.adapter.read(self._state.origin)
        return self._conversation

    async def read(self, args: ReadArgs) -> Result:
        """``channel_read``: one page, newest first; ``next_cursor`` pages to older messages."""
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
            "message": await self._state.handles.mint("msg", view.ref, authored=view.author.is_you),
            "author": {
                "display_name": view.author.display_name,
                "is_bot": view.author.is_bot,
                "is_you": view.author.is_you,
            },
            "text": view.text,
            "time": view.time,
            "files": [await self.file_row(f) for f in view.files],
        }
        if view.reactions:
            row["reactions"] = dict(view.reactions)
        return row

    async def file_row(self, meta: FileMeta, *, authored: bool = False) -> Result:
        """A file as the model sees it, with its handle (none for a file nothing could fetch)."""
        if meta.unavailable:
            # Listed so the model knows it is there, but with no handle: nothing could fetch it.
            return {"name": meta.name, "unavailable": meta.unavailable}
        data = json.dumps({"name": meta.name, "media_type": meta.media_type, "size": meta.size, **meta.data})
        handle = await self._state.handles.mint("file", meta.ref, authored=authored, data=data)
        return {"file": handle, "name": meta.name, "media_type": meta.media_type, "size": meta.size}


def _ignore_outcome(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # read, so an error no caller awaited is not reported as unretrieved
