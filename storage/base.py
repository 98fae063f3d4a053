"""The Store contract: everything threadbound keeps durably, behind one interface.

Both backends (``storage.sqlite.SQLiteStore``, ``storage.postgres.PostgresStore``)
implement :class:`Store` and pass the same contract suite (``tests/test_store_contract.py``).
Nothing outside ``storage/`` touches SQL.

Vocabulary
----------
- A **conversation key** is ``(channel, thread_ts)``. ``thread_ts`` is the thread
  root's ts, or ``""`` for the top level of a direct message (the whole DM is one
  conversation there). Several keys may point to one task: the key it started in
  plus every root the bot posted for it.
- A **task** is one agent's memory: its transcript, the tools it has enabled,
  its origin (the key replies go to by default).
- The **inbox** holds claimed messages that no finished run has consumed yet.
- A **lease** gives one owner the right to run a task until ``expires_at``.
- A **handle** is an opaque, task-scoped name (``msg_…``/``file_…``) for a
  provider object (``ref``), with authorship recorded.
- An **effect** is a journalled Slack write: opened before the call, closed
  with its result after it, so a crashed run can reconcile instead of repeat.
- **Usage** is what one model request cost (tokens by kind), with the task, the
  person who asked, the channel and the model; counted per UTC ``day``.

The records themselves are in ``storage/records.py``.

All times are seconds since the epoch as floats, passed in by the caller
(``now``) so tests can move the clock and instances agree on one notion of time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeAlias

# Every record (``__all__`` of these modules) is also importable from here.
from .ask_records import *  # noqa: F403
from .records import *  # noqa: F403
from .records import EffectRecord, Fence, HandleKind, HandleRecord
from .run_records import *  # noqa: F403
from .sqlstore import SqlStore

#: The store: every method, with its contract in its docstring, is defined once by the SQL store
#: (``storage/sqlstore.py``, which hands each call to its statement group in ``sqlstore_*.py``);
#: both backends are that one store over their own database.
Store: TypeAlias = SqlStore


class SessionStore(Protocol):
    """The part of the :class:`Store` a conversation's session uses (``channel/store.py``): its
    conversation keys and enabled tools, its handles, its effect journal. Each method's contract is
    the docstring of the :class:`Store` method of the same name."""

    async def record_root(self, *, channel: str, ts: str, task_id: str) -> None: ...

    async def set_task_thread(self, task_id: str, thread_ts: str) -> None: ...

    async def set_enabled_tools(self, task_id: str, tools: Sequence[str]) -> None: ...

    async def mint_handle(
        self,
        *,
        task_id: str,
        kind: HandleKind,
        ref: str,
        handle: str,
        authored: bool = False,
        data: str = "{}",
    ) -> HandleRecord: ...

    async def resolve_handle(self, task_id: str, handle: str) -> HandleRecord | None: ...

    async def find_handle(self, task_id: str, kind: HandleKind, ref: str) -> HandleRecord | None: ...

    async def open_effect(
        self,
        *,
        effect_id: str,
        task_id: str,
        tool: str,
        args: str,
        now: float,
        call_id: str = "",
        fence: Fence | None = None,
    ) -> None: ...

    async def close_effect(self, effect_id: str, *, result: str, fence: Fence | None = None) -> None: ...

    async def call_effects(self, task_id: str) -> list[EffectRecord]: ...

    async def open_effects(self, task_id: str) -> list[EffectRecord]: ...

    async def get_effect(self, effect_id: str) -> EffectRecord | None: ...

    async def set_session_title(self, task_id: str, title: str, *, now: float) -> None: ...
