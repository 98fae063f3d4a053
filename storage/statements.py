"""Every statement the store runs, written once for both dialects (``storage/sql.py``); those of
approvals, leases (with fencing) and usage are in ``approval_statements.py``,
``lease_statements.py`` and ``usage_statements.py``.

Single statements are atomic on their own. The three multi-statement writes (a claim, creating a
task, saving a run) are :class:`~storage.sql.Procedure` s: one transaction, one database trip on
either backend. Parameters are named after what they hold; each store method passes them by name.
"""

from __future__ import annotations

from typing import Final

# The store reads every statement from this module: those of approvals, leases and usage too.
from .approval_statements import (  # noqa: F401
    APPROVAL_COLUMNS,
    DECIDE,
    EXPIRED_APPROVALS,
    GET_APPROVAL,
    HAS_OPEN_APPROVAL,
    OPEN_APPROVAL,
    SET_APPROVAL_CARD,
    START_EXECUTION,
    TASK_APPROVALS,
)
from .ask_statements import DECIDE_ASK
from .follow_up_statements import FIRE_FOLLOW_UPS
from .lease_statements import (  # noqa: F401
    ACQUIRE_LEASE,
    EXPIRE_LEASES,
    FORGET_IDLE_INSTANCE,
    FORGET_INSTANCE,
    GET_LEASE,
    IDLE_INSTANCES,
    LEASE_COLUMNS,
    REGISTER_INSTANCE,
    REGISTERED_INSTANCES,
    RELEASE_LEASE,
    RENEW_LEASE,
    fenced,
)
from .mcp_token_statements import DECIDE_MCP_AUTHORIZATION
from .sql import Procedure, Statement, typed
from .stop_statements import SETTLE_STOP
from .usage_statements import (  # noqa: F401
    FEEDBACK_COLUMNS,
    MARK_FEEDBACK_SHOWN,
    PENDING_FEEDBACK,
    PERSON_TASKS,
    PERSON_USAGE_BY_MODEL,
    RECENT_REQUESTER,
    RECORD_FEEDBACK,
    RECORD_USAGE,
    TOKENS_SPENT,
    USAGE_BY_DAY,
)

TASK_COLUMNS = "task_id, channel, thread_ts, transcript, enabled_tools, created_at, summary, run_open"
INBOX_COLUMNS = "item_id, task_id, channel, ts, thread_ts, payload, created_at"
HANDLE_COLUMNS = "handle, task_id, kind, ref, authored, data"
EFFECT_COLUMNS = "effect_id, task_id, tool, args, state, result, created_at, call_id"

PING: Final = Statement("SELECT 1")


# -- schema version (the migration runner, ``migrations.py``) ---------------------------------

SCHEMA_VERSION: Final = Statement("SELECT COALESCE(MAX(version), 0) AS version FROM schema_version")
RECORD_VERSION: Final = Statement(
    "INSERT INTO schema_version (version, applied_at) VALUES (:version, :applied_at)"
)

# -- ingress ---------------------------------------------------------------------------------

FIND_TASK: Final = Statement(
    "SELECT task_id FROM conversations WHERE channel = :channel AND thread_ts = :thread_ts"
)

_OURS_EVENT = "EXISTS (SELECT 1 FROM event_claims WHERE event_id = :event_id AND claim_id = :claim_id)"
_OURS_MESSAGE = (
    "EXISTS (SELECT 1 FROM message_claims WHERE channel = :channel AND ts = :ts AND claim_id = :claim_id)"
)

#: ``Store.claim_message``, the one definition of a claim. ``claim_id`` is fresh per call: it marks
#: the claim keys this call took (so later statements tell "taken by us" from "taken before") and is
#: the id of the task the call may create. Keys are taken in a fixed order, so concurrent claims on
#: Postgres wait on each other instead of deadlocking: the event id (a redelivery waits for the
#: first delivery), the conversation (claims starting one thread wait for the first, whose task
#: they then join), the message (deliveries of one message under two event ids: the second waits,
#: then is a duplicate). Each statement sees what the one it waited for committed (Procedure doc).
#: ``no_task`` writes nothing; a ``duplicate`` records only its event id.
CLAIM: Final = Procedure(
    name="claim",
    params=typed("event_id channel ts thread_ts create:bool payload now:real claim_id"),
    returns=typed("status task_id item_id:bigint created:bool"),
    steps=(
        # The event id, unless the claim would be a no_task (which records nothing).
        Statement(
            "INSERT INTO event_claims (event_id, channel, ts, claimed_at, claim_id)"
            " SELECT :event_id, :channel, :ts, :now, :claim_id"
            " WHERE :create"
            " OR EXISTS (SELECT 1 FROM conversations WHERE channel = :channel AND thread_ts = :thread_ts)"
            " OR EXISTS (SELECT 1 FROM message_claims WHERE channel = :channel AND ts = :ts)"
            " ON CONFLICT DO NOTHING"
        ),
        # A new conversation maps its key to a new task (the key first: its foreign key is deferred).
        Statement(
            "INSERT INTO conversations (channel, thread_ts, task_id)"
            " SELECT :channel, :thread_ts, :claim_id"
            f" WHERE :create AND {_OURS_EVENT}"
            " AND NOT EXISTS (SELECT 1 FROM message_claims WHERE channel = :channel AND ts = :ts)"
            " ON CONFLICT DO NOTHING"
        ),
        Statement(
            "INSERT INTO tasks (task_id, channel, thread_ts, created_at)"
            " SELECT :claim_id, :channel, :thread_ts, :now"
            " WHERE EXISTS (SELECT 1 FROM conversations"
            " WHERE channel = :channel AND thread_ts = :thread_ts AND task_id = :claim_id)"
        ),
        # The message, into the conversation's task (ours or another's), written whole.
        Statement(
            "INSERT INTO message_claims (channel, ts, event_id, task_id, claimed_at, claim_id)"
            " SELECT :channel, :ts, :event_id, c.task_id, :now, :claim_id FROM conversations c"
            f" WHERE c.channel = :channel AND c.thread_ts = :thread_ts AND {_OURS_EVENT}"
            " ON CONFLICT DO NOTHING"
        ),
        Statement(
            "INSERT INTO inbox (task_id, channel, ts, thread_ts, payload, created_at)"
            " SELECT m.task_id, :channel, :ts, :thread_ts, :payload, :now FROM message_claims m"
            " WHERE m.channel = :channel AND m.ts = :ts AND m.claim_id = :claim_id"
        ),
        # A task created above for a message that turned out a duplicate is dropped again.
        Statement(
            "DELETE FROM conversations WHERE channel = :channel AND thread_ts = :thread_ts"
            f" AND task_id = :claim_id AND NOT {_OURS_MESSAGE}"
        ),
        Statement(f"DELETE FROM tasks WHERE task_id = :claim_id AND NOT {_OURS_MESSAGE}"),
        # The outcome. The inbox item is the newest of this message (an older one only exists if
        # the message's claim keys were pruned and it was claimed again).
        Statement(
            "SELECT"
            " CASE WHEN m.claim_id = :claim_id THEN 'claimed'"
            " WHEN m.ts IS NOT NULL OR EXISTS (SELECT 1 FROM event_claims WHERE event_id = :event_id)"
            " THEN 'duplicate' ELSE 'no_task' END AS status,"
            " m.task_id AS task_id,"
            " (SELECT MAX(i.item_id) FROM inbox i WHERE m.claim_id = :claim_id"
            " AND i.task_id = m.task_id AND i.channel = :channel AND i.ts = :ts) AS item_id,"
            " EXISTS (SELECT 1 FROM tasks WHERE task_id = :claim_id) AS created"
            " FROM (SELECT 1 AS one) AS probe"
            " LEFT JOIN message_claims m ON m.channel = :channel AND m.ts = :ts"
        ),
    ),
)

#: ``Store.prune_claims``: one batch per claim table (``:cutoff``, ``:batch``). The keys to delete
#: come from a limited subquery (SQLite's ``DELETE … LIMIT`` is a compile-time option).
PRUNE: Final = (
    Statement(
        "DELETE FROM event_claims WHERE event_id IN"
        " (SELECT event_id FROM event_claims WHERE claimed_at < :cutoff LIMIT :batch{skip_locked})"
    ),
    Statement(
        "DELETE FROM message_claims WHERE (channel, ts) IN"
        " (SELECT channel, ts FROM message_claims WHERE claimed_at < :cutoff LIMIT :batch{skip_locked})"
    ),
)

# -- tasks -----------------------------------------------------------------------------------

#: ``Store.create_task``: a non-empty ``thread_ts`` is mapped to the new task ``:task_id``, unless
#: already mapped (then that task is the result); ``""`` always makes a new, unmapped task.
CREATE_TASK: Final = Procedure(
    name="create_task",
    params=typed("channel thread_ts now:real task_id"),
    returns=typed(
        "task_id channel thread_ts transcript:bytes enabled_tools:texts created_at:real summary run_open:bool"
    ),
    steps=(
        Statement(
            "INSERT INTO conversations (channel, thread_ts, task_id)"
            " SELECT :channel, :thread_ts, :task_id WHERE :thread_ts <> '' ON CONFLICT DO NOTHING"
        ),
        Statement(
            "INSERT INTO tasks (task_id, channel, thread_ts, created_at)"
            " SELECT :task_id, :channel, :thread_ts, :now WHERE :thread_ts = ''"
            " OR EXISTS (SELECT 1 FROM conversations"
            " WHERE channel = :channel AND thread_ts = :thread_ts AND task_id = :task_id)"
        ),
        Statement(
            f"SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = CASE WHEN :thread_ts = '' THEN :task_id"
            " ELSE (SELECT c.task_id FROM conversations c"
            " WHERE c.channel = :channel AND c.thread_ts = :thread_ts) END"
        ),
    ),
)

GET_TASK: Final = Statement(f"SELECT {TASK_COLUMNS} FROM tasks WHERE task_id = :task_id")

#: Sets the origin thread only while it is still empty: the first posted root becomes the origin,
#: later roots are only mapped (``record_root``). Returns a row iff the task exists.
SET_TASK_THREAD: Final = Statement(
    "UPDATE tasks SET thread_ts = CASE WHEN thread_ts = '' THEN :thread_ts ELSE thread_ts END"
    " WHERE task_id = :task_id RETURNING task_id"
)

RECORD_ROOT: Final = Statement(
    "INSERT INTO conversations (channel, thread_ts, task_id) VALUES (:channel, :thread_ts, :task_id)"
    " ON CONFLICT (channel, thread_ts) DO NOTHING"
)

#: ``Store.save_run`` and ``Store.checkpoint``: the transcript, the tools and the summary when given
#: (NULL keeps them), whether a run is still open on it, the consumed items (scoped by task: an id of
#: another task's item is ignored), a journal entry closed with it (``:close_id``, NULL: none) and the
#: feedback shown with it (clicked up to ``:feedback_upto``, NULL: none); all of it fenced.
SAVE_RUN: Final = Procedure(
    name="save_run",
    params=typed(
        "task_id transcript:bytes tools:texts consumed:ids summary run_open:bool close_id close_result"
        " feedback_upto:real fence"
    ),
    returns=typed("saved:bool fenced:bool"),
    steps=(
        Statement(
            "UPDATE tasks SET transcript = :transcript, enabled_tools = COALESCE(:tools, enabled_tools),"
            " summary = COALESCE(:summary, summary), run_open = :run_open"
            f" WHERE task_id = :task_id AND {fenced()}"
        ),
        Statement(
            f"DELETE FROM inbox WHERE task_id = :task_id AND item_id IN {{each:consumed}} AND {fenced()}"
        ),
        Statement(
            "UPDATE effects SET state = 'done', result = :close_result"
            f" WHERE effect_id = :close_id AND task_id = :task_id AND {fenced()}"
        ),
        Statement(
            "UPDATE feedback SET shown = 1 WHERE task_id = :task_id AND shown = 0"
            f" AND clicked_at <= :feedback_upto AND {fenced()}"
        ),
        Statement(
            f"SELECT EXISTS (SELECT 1 FROM tasks WHERE task_id = :task_id) AS saved, {fenced()} AS fenced"
        ),
    ),
)

SET_ENABLED_TOOLS: Final = Statement(
    "UPDATE tasks SET enabled_tools = :tools WHERE task_id = :task_id RETURNING task_id"
)

# -- inbox -----------------------------------------------------------------------------------

PENDING_INBOX: Final = Statement(
    f"SELECT {INBOX_COLUMNS} FROM inbox WHERE task_id = :task_id ORDER BY item_id"
)

#: Tasks with pending inbox items, open effects or a run checkpointed mid-way, and no live lease,
#: longest-waiting first. A task waiting for an approval decision is not due for its inbox (its
#: messages wait with it), only for open effects (an approval card to post after a crash).
TASKS_NEEDING_A_RUN: Final = Statement(
    """SELECT due.task_id FROM (
    SELECT task_id, MIN(created_at) AS since, FALSE AS effects FROM inbox GROUP BY task_id
    UNION ALL
    SELECT task_id, MIN(created_at) AS since, TRUE AS effects FROM effects WHERE state = 'open'
    GROUP BY task_id
    UNION ALL
    SELECT task_id, created_at AS since, TRUE AS effects FROM tasks WHERE run_open
) AS due
WHERE NOT EXISTS (SELECT 1 FROM leases l WHERE l.task_id = due.task_id AND l.expires_at > :now)
AND (due.effects OR NOT EXISTS (
    SELECT 1 FROM approvals a WHERE a.task_id = due.task_id AND a.decision IS NULL))
GROUP BY due.task_id
ORDER BY MIN(due.since), due.task_id"""
)

# -- handles ---------------------------------------------------------------------------------

MINT_HANDLE: Final = Statement(
    "INSERT INTO handles (task_id, handle, kind, ref, authored, data)"
    " VALUES (:task_id, :handle, :kind, :ref, :authored, :data)"
    " ON CONFLICT (task_id, kind, ref) DO UPDATE SET"
    " authored = handles.authored OR excluded.authored,"
    " data = CASE WHEN excluded.data = '{{}}' THEN handles.data ELSE excluded.data END"
    f" RETURNING {HANDLE_COLUMNS}",
    # A handle is used only by a later write of the run, whose synced commit (journal entry,
    # checkpoint, save) comes after it (``Statement.synced``); lost on a power loss, it is minted anew.
    synced=False,
)
RESOLVE_HANDLE: Final = Statement(
    f"SELECT {HANDLE_COLUMNS} FROM handles WHERE task_id = :task_id AND handle = :handle"
)
FIND_HANDLE: Final = Statement(
    f"SELECT {HANDLE_COLUMNS} FROM handles WHERE task_id = :task_id AND kind = :kind AND ref = :ref"
)

# -- effect journal --------------------------------------------------------------------------

OPEN_EFFECT: Final = Statement(
    "INSERT INTO effects (effect_id, task_id, tool, args, state, created_at, call_id)"
    f" SELECT :effect_id, :task_id, :tool, :args, 'open', :now, :call_id WHERE {fenced()}"
)
CLOSE_EFFECT: Final = Statement(
    "UPDATE effects SET state = 'done', result = :result"
    f" WHERE effect_id = :effect_id AND {fenced('effects.task_id')} RETURNING effect_id",
    # Synced by the run's next synced commit (``Statement.synced``): an entry a power loss reopens
    # is settled like one a crash left open (``channel.journal.reconcile``: looked up, not repeated).
    synced=False,
)
#: A task's journalled writes made by the model's tool calls (``call_id`` set), oldest first.
CALL_EFFECTS: Final = Statement(
    f"SELECT {EFFECT_COLUMNS} FROM effects WHERE task_id = :task_id AND call_id <> '' ORDER BY seq"
)
OPEN_EFFECTS: Final = Statement(
    f"SELECT {EFFECT_COLUMNS} FROM effects WHERE task_id = :task_id AND state = 'open' ORDER BY seq"
)
GET_EFFECT: Final = Statement(f"SELECT {EFFECT_COLUMNS} FROM effects WHERE effect_id = :effect_id")

# -- stats -----------------------------------------------------------------------------------

#: One row of counts; ``tasks`` and ``pending_inbox`` are StoreStats fields, the rest go to ``extra``.
STATS: Final = Statement(
    """SELECT
    (SELECT COUNT(*) FROM tasks) AS tasks,
    (SELECT COUNT(*) FROM inbox) AS pending_inbox,
    (SELECT COUNT(*) FROM effects WHERE state = 'open') AS open_effects,
    (SELECT COUNT(*) FROM leases) AS leases,
    (SELECT COUNT(*) FROM handles) AS handles,
    (SELECT COUNT(*) FROM conversations) AS conversations"""
)

#: Every procedure; ``migrate()`` creates their Postgres functions.
PROCEDURES: Final = (
    CLAIM,
    CREATE_TASK,
    SAVE_RUN,
    OPEN_APPROVAL,
    DECIDE,
    FIRE_FOLLOW_UPS,
    DECIDE_ASK,
    SETTLE_STOP,
    DECIDE_MCP_AUTHORIZATION,
)
