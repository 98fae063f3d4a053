"""Opaque, task-scoped handles for provider objects.

A handle is a prefix (``msg_``/``file_``) and 22 random URL-safe characters: it
carries no provider id and cannot be derived from one, so a model can only use
handles the host gave it for this task. The mapping lives in the store, so
handles survive restarts and reading a message again returns its existing handle.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence

from storage.base import HandleKind, HandleRecord

from .errors import ChannelError
from .store import SessionStore

_PREFIX: dict[HandleKind, str] = {"msg": "msg_", "file": "file_"}
_SHAPE = re.compile(r"^(msg|file)_[A-Za-z0-9_-]{8,40}$")


def new_handle(kind: HandleKind) -> str:
    return _PREFIX[kind] + secrets.token_urlsafe(16)


class HandleRegistry:
    """Mints and resolves handles for one task."""

    def __init__(self, store: SessionStore, task_id: str) -> None:
        self._store = store
        self._task_id = task_id
        # Read-through cache: a page of rows re-read in one run costs no store round trip.
        self._by_ref: dict[tuple[HandleKind, str], HandleRecord] = {}

    async def mint(self, kind: HandleKind, ref: str, *, authored: bool = False, data: str = "{}") -> str:
        cached = self._by_ref.get((kind, ref))
        if cached is not None and (cached.authored or not authored) and data == "{}":
            return cached.handle
        record = await self._store.mint_handle(
            task_id=self._task_id, kind=kind, ref=ref, handle=new_handle(kind), authored=authored, data=data
        )
        self._by_ref[(kind, ref)] = record
        return record.handle

    def seed(self, records: Sequence[HandleRecord]) -> None:
        """Records minted for this task already (the woken message's, with the lease)."""
        for record in records:
            if record.task_id == self._task_id:
                self._by_ref[(record.kind, record.ref)] = record

    async def resolve(self, handle: str, kind: HandleKind) -> HandleRecord:
        """The record for ``handle``; ``invalid_handle`` if it is not one of this task's ``kind`` handles."""
        if not _SHAPE.match(handle) or not handle.startswith(_PREFIX[kind]):
            raise ChannelError(
                "invalid_handle",
                f"{handle[:60]!r} is not a {kind} handle. Use a {_PREFIX[kind]}… handle from channel_read "
                "or from the message you were given; raw Slack ids are not accepted.",
            )
        record = await self._store.resolve_handle(self._task_id, handle)
        if record is None or record.kind != kind:
            raise ChannelError(
                "invalid_handle", f"{handle} is not a handle of this conversation. Use one from channel_read."
            )
        return record
