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

from typing import TypeAlias

# Every record (``__all__`` of these modules) is also importable from here.
from .ask_records import *  # noqa: F403
from .records import *  # noqa: F403
from .run_records import *  # noqa: F403
from .sqlstore import SqlStore

#: The store: every method, with its contract in its docstring, is defined once by the SQL store
#: (``storage/sqlstore.py`` and its ``sqlstore_*.py`` mixins); both backends are one.
Store: TypeAlias = SqlStore
