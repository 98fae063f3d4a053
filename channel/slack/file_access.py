"""Which files a message shows may get a handle: ``files.info`` answers, cached, and the rule.

- A file on the message itself is the poster's: it gets a handle (a Slack Connect stub is
  first resolved with ``files.info`` so the model sees its real name, type and size).
- A file inside a forwarded or linked message (``is_share``/``is_msg_unfurl`` attachment) is
  only *named* by the attachment, and anyone can post an attachment naming any file ID. It gets
  a handle only when ``files.info`` shows it shared in this conversation's channel; otherwise
  it is listed as unavailable, with the reason (Text is data: no fetch from another conversation).

The look-ups are bounded: of one message's files, only the first ``MAX_LOOKUPS_PER_MESSAGE`` that
need ``files.info`` are looked up, and of one read of the conversation the first
``MAX_LOOKUPS_PER_READ`` not cached yet, newest messages first (the rest are listed as
unavailable, saying why); at most ``MAX_CONCURRENT_LOOKUPS`` calls are in flight at once for the
whole adapter, and a look-up that
failed is not tried again for ``FAILURE_TTL`` seconds (a message naming many files, read again
and again, does not call Slack again and again).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from channel.errors import ChannelError

from .cache import TtlCache
from .content import file_stubs, message_files, shared_file_ids, shared_in
from .file_meta import NOT_LOOKED_UP, NOT_SHARED_HERE

log = logging.getLogger(__name__)

__all__ = [
    "FAILURE_TTL",
    "MAX_CONCURRENT_LOOKUPS",
    "MAX_LOOKUPS_PER_MESSAGE",
    "MAX_LOOKUPS_PER_READ",
    "NOT_LOOKED_UP",
    "NOT_SHARED_HERE",
    "FileInfos",
]

# files.info answers meaning the bot may not see the file (not a passing failure).
_FILE_HIDDEN = frozenset({"file_not_found", "file_deleted", "access_denied", "not_allowed", "not_visible"})

FilesInfo = Callable[[str], Awaitable[Mapping[str, Any]]]
#: File infos cached at most; the least recently used leave first.
MAX_FILES = 10_000
#: Files of one message looked up at most; Slack attaches at most 10 to a message it posts.
MAX_LOOKUPS_PER_MESSAGE = 20
#: ``files.info`` calls one read of several messages makes at most (the cache answers the rest).
MAX_LOOKUPS_PER_READ = 50
#: ``files.info`` calls in flight at once, across every message the adapter reads.
MAX_CONCURRENT_LOOKUPS = 4
#: Seconds a failed look-up is remembered (not tried again) before the next attempt.
FAILURE_TTL = 60.0


class FileInfos:
    """``files.info`` answers per file ID, cached: a file Slack said the bot cannot see is
    remembered as ``None``; a look-up that failed is remembered for ``FAILURE_TTL`` seconds."""

    def __init__(self, files_info: FilesInfo) -> None:
        self._files_info = files_info
        # Bounded, and refreshed after LOOKUP_TTL (a file's shares change).
        self._infos: TtlCache[str, dict[str, Any] | None] = TtlCache(MAX_FILES)
        self._failed: TtlCache[str, bool] = TtlCache(MAX_FILES, ttl=FAILURE_TTL)
        self._in_flight = asyncio.Semaphore(MAX_CONCURRENT_LOOKUPS)

    async def resolve(self, channel: str, raw: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        """Replacements for file objects in ``raw`` (by file ID): a stub's full object, and for a
        file only a share names, its full object when shared in ``channel``, else an unavailable
        marker carrying just its name; a file past a message's look-ups, a marker saying so."""
        stubs: set[str] = set()
        shared: set[str] = set()
        skipped: set[str] = set()
        wanted: list[str] = []  # the newest message's first: a read's bound leaves out the oldest
        for message in reversed(raw):
            first, over = _bounded(message)
            stubs |= file_stubs(message) & set(first)
            shared |= shared_file_ids(message) & set(first)
            wanted += first
            skipped |= over
        pending = [f for f in dict.fromkeys(wanted) if f not in self._infos and f not in self._failed]
        late = set(pending[MAX_LOOKUPS_PER_READ:])
        stubs, shared, skipped = stubs - late, shared - late, skipped | late
        await asyncio.gather(*(self._lookup(f) for f in pending[:MAX_LOOKUPS_PER_READ]))
        out = {f: info for f in stubs - shared if (info := self._infos.get(f)) is not None}
        names = {str(f.get("id")): f for m in raw for f in message_files(m)}
        for file_id in shared:
            info = self._infos.get(file_id)
            if info is not None and shared_in(info, channel):
                out[file_id] = info
                continue
            # Named as the attachment names it: files.info's answer about another conversation's
            # file (its real name included) is not passed on.
            out[file_id] = _marker(file_id, names.get(file_id), NOT_SHARED_HERE)
            log.info("a forwarded file is not shared in this conversation: listed without a handle")
        for file_id in skipped - stubs - shared:
            out[file_id] = _marker(file_id, names.get(file_id), NOT_LOOKED_UP)
        if skipped:
            log.info("%d files were not looked up (too many in one message or one read)", len(skipped))
        return out

    async def _lookup(self, file_id: str) -> None:
        try:
            async with self._in_flight:
                response = await self._files_info(file_id)
        except ChannelError as exc:
            if exc.code == "not_found" or exc.provider_code in _FILE_HIDDEN:
                self._infos[file_id] = None
            else:
                self._failed[file_id] = True
                log.warning("files.info failed: %s", exc.message)
            return
        info = response.get("file")
        self._infos[file_id] = dict(info) if isinstance(info, Mapping) and info.get("id") else None


def _bounded(message: Mapping[str, Any]) -> tuple[list[str], set[str]]:
    """``(looked up, not looked up)``: the IDs of ``message``'s files needing ``files.info``, the
    first ``MAX_LOOKUPS_PER_MESSAGE`` in the order the message shows them, then the rest."""
    needed = file_stubs(message) | shared_file_ids(message)
    ordered = [str(f["id"]) for f in message_files(message) if f.get("id") in needed]
    return ordered[:MAX_LOOKUPS_PER_MESSAGE], set(ordered[MAX_LOOKUPS_PER_MESSAGE:])


def _marker(file_id: str, named: Mapping[str, Any] | None, access: str) -> dict[str, Any]:
    """An unavailable file as the message names it, with why (a ``file_access`` value)."""
    named = named or {}
    return {
        "id": file_id,
        "name": str(named.get("name") or named.get("title") or "a file"),
        "file_access": access,
    }
