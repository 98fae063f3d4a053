"""Which files a message shows may get a handle: ``files.info`` answers, cached, and the rule.

- A file on the message itself is the poster's: it gets a handle (a Slack Connect stub is
  first resolved with ``files.info`` so the model sees its real name, type and size).
- A file inside a forwarded or linked message (``is_share``/``is_msg_unfurl`` attachment) is
  only *named* by the attachment, and anyone can post an attachment naming any file ID. It gets
  a handle only when ``files.info`` shows it shared in this conversation's channel; otherwise
  it is listed as unavailable, with the reason (Text is data: no fetch from another conversation).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from channel.errors import ChannelError

from .cache import TtlCache
from .content import file_stubs, message_files, shared_file_ids, shared_in
from .file_meta import NOT_SHARED_HERE

log = logging.getLogger(__name__)

__all__ = ["NOT_SHARED_HERE", "FileInfos"]

# files.info answers meaning the bot may not see the file (not a passing failure).
_FILE_HIDDEN = frozenset({"file_not_found", "file_deleted", "access_denied", "not_allowed", "not_visible"})

FilesInfo = Callable[[str], Awaitable[Mapping[str, Any]]]
#: File infos cached at most; the least recently used leave first.
MAX_FILES = 10_000


class FileInfos:
    """``files.info`` answers per file ID, cached: a file Slack said the bot cannot see is
    remembered as ``None``; an unanswered lookup is tried again next time."""

    def __init__(self, files_info: FilesInfo) -> None:
        self._files_info = files_info
        # Bounded, and refreshed after LOOKUP_TTL (a file's shares change).
        self._infos: TtlCache[str, dict[str, Any] | None] = TtlCache(MAX_FILES)

    async def resolve(self, channel: str, raw: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        """Replacements for file objects in ``raw`` (by file ID): a stub's full object, and for a
        file only a share names, its full object when shared in ``channel``, else an unavailable
        marker carrying just its name."""
        stubs: set[str] = set()
        shared: set[str] = set()
        for message in raw:
            stubs |= file_stubs(message)
            shared |= shared_file_ids(message)
        wanted = sorted((stubs | shared) - set(self._infos))
        await asyncio.gather(*(self._lookup(f) for f in wanted))
        out = {f: info for f in stubs - shared if (info := self._infos.get(f)) is not None}
        names = {str(f.get("id")): f for m in raw for f in message_files(m)}
        for file_id in shared:
            info = self._infos.get(file_id)
            if info is not None and shared_in(info, channel):
                out[file_id] = info
                continue
            # Named as the attachment names it: files.info's answer about another conversation's
            # file (its real name included) is not passed on.
            named = names.get(file_id) or {}
            out[file_id] = {
                "id": file_id,
                "name": str(named.get("name") or named.get("title") or "a file"),
                "file_access": NOT_SHARED_HERE,
            }
            log.info("a forwarded file is not shared in this conversation: listed without a handle")
        return out

    async def _lookup(self, file_id: str) -> None:
        try:
            response = await self._files_info(file_id)
        except ChannelError as exc:
            if exc.code == "not_found" or exc.provider_code in _FILE_HIDDEN:
                self._infos[file_id] = None
            else:
                log.warning("files.info failed: %s", exc.message)
            return
        info = response.get("file")
        self._infos[file_id] = dict(info) if isinstance(info, Mapping) and info.get("id") else None
