"""Statements of leases, their fencing and the liveness of their owners (the invariants "One run
per conversation", "Fast takeover, fenced writes" and "Fencing", docs/architecture.md).

``statements.py`` re-exports every name here; its fenced writes use :func:`fenced`.
"""

from __future__ import annotations

from typing import Final

from .sql import Statement

LEASE_COLUMNS = "task_id, owner, expires_at"


def fenced(task: str = ":task_id") -> str:
    """The condition of a fenced write ("Fencing"): no ``:fence`` given (an unfenced write, e.g.
    a test's or the `run` command's without a lease), or the lease of ``task`` is still the
    acquisition ``:fence`` names. On Postgres the lease row is share-locked until the write commits,
    so a new owner's acquisition waits for it (and every later fenced write sees the new token)."""
    return (
        "(CAST(:fence AS TEXT) IS NULL OR EXISTS (SELECT 1 FROM leases"
        f" WHERE leases.task_id = {task} AND leases.token = :fence{{for_share}}))"
    )


# -- leases ----------------------------------------------------------------------------------

#: One upsert: the conflict branch only fires for a free, expired or own lease (on Postgres, ON
#: CONFLICT locks the row and re-checks the WHERE on its latest version: one of two takers wins).
#: ``token`` (fresh per call) names the acquisition; an owner extending its live lease keeps its token.
ACQUIRE_LEASE: Final = Statement(
    "INSERT INTO leases (task_id, owner, expires_at, token) VALUES (:task_id, :owner, :expires_at, :token)"
    " ON CONFLICT (task_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at,"
    " token = CASE WHEN leases.owner = excluded.owner AND leases.expires_at > :now THEN leases.token"
    " ELSE excluded.token END"
    " WHERE leases.owner = excluded.owner OR leases.expires_at <= :now"
    " RETURNING owner, token",
    synced=False,  # a lease only matters while its process lives (``Statement.synced``)
)
#: Renews ``:owner``'s lease, and only the acquisition ``:token`` names when given.
RENEW_LEASE: Final = Statement(
    "UPDATE leases SET expires_at = :expires_at WHERE task_id = :task_id AND owner = :owner"
    " AND (CAST(:token AS TEXT) IS NULL OR token = :token) RETURNING owner",
    synced=False,
)
RELEASE_LEASE: Final = Statement(
    "DELETE FROM leases WHERE task_id = :task_id AND owner = :owner", synced=False
)
GET_LEASE: Final = Statement(f"SELECT {LEASE_COLUMNS} FROM leases WHERE task_id = :task_id")

# -- instances (liveness of lease owners) -----------------------------------------------------

REGISTER_INSTANCE: Final = Statement(
    "INSERT INTO instances (owner, lock_key, started_at) VALUES (:owner, :lock_key, :now)"
    " ON CONFLICT (owner) DO UPDATE SET lock_key = excluded.lock_key, started_at = excluded.started_at"
)
#: Every registered owner, the key of its liveness lock, and whether it holds unexpired leases.
REGISTERED_INSTANCES: Final = Statement(
    "SELECT i.owner, i.lock_key, CASE WHEN EXISTS (SELECT 1 FROM leases l WHERE l.owner = i.owner"
    " AND l.expires_at > :now) THEN 1 ELSE 0 END AS leasing FROM instances i"
)
EXPIRE_LEASES: Final = Statement(
    "UPDATE leases SET expires_at = :now WHERE owner = :owner AND expires_at > :now"
)
FORGET_INSTANCE: Final = Statement("DELETE FROM instances WHERE owner = :owner")
#: Registered owners holding no unexpired lease (candidates for pruning once their liveness ended).
IDLE_INSTANCES: Final = Statement(
    "SELECT i.owner, i.lock_key FROM instances i WHERE NOT EXISTS"
    " (SELECT 1 FROM leases l WHERE l.owner = i.owner AND l.expires_at > :now)"
)
#: Forget an instance only under the lock key it was found dead with (not one registered since).
FORGET_IDLE_INSTANCE: Final = Statement(
    "DELETE FROM instances WHERE owner = :owner AND lock_key = :lock_key"
    " AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.owner = :owner AND l.expires_at > :now)"
)
