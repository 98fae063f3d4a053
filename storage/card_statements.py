"""What the two kinds of card have in common: an operator-gated approval (``approvals``) and an ask
the agent put to people (``asks``) are both posted in their thread as a card, and decided once.

Each builder writes one statement for either table; ``approval_statements.py`` and
``ask_statements.py`` name what they build.
"""

from __future__ import annotations

from .sql import Procedure, Statement, typed


def get_card(table: str, key: str, columns: str) -> Statement:
    return Statement(f"SELECT {columns} FROM {table} WHERE {key} = :{key}")


def set_card(table: str, key: str) -> Statement:
    """The ts of the posted card; a row comes back iff the card exists."""
    return Statement(f"UPDATE {table} SET card_ts = :card_ts WHERE {key} = :{key} RETURNING {key}")


def expired_cards(table: str, columns: str) -> Statement:
    """Undecided cards created before ``:before`` (the expiry sweep), oldest first."""
    return Statement(
        f"SELECT {columns} FROM {table} WHERE decision IS NULL AND created_at < :before"
        " ORDER BY created_at LIMIT :limit"
    )


def decide_card(
    name: str, table: str, key: str, *, answer: bool = False, optional_payload: bool = False
) -> Procedure:
    """The first decision wins. ``decision_id`` is fresh per call and marks the decision this call
    set, so only that call appends ``:payload`` to the task's inbox (the item that resumes it; with
    ``optional_payload`` none when it is empty); on Postgres a concurrent decider waits on the row
    and then finds it decided. ``answer``: the table keeps an ``:answer`` with the decision."""
    ours = f"{key} = :{key} AND decision_id = :decision_id"
    kept = " answer" if answer else ""
    guard = " AND :payload <> ''" if optional_payload else ""
    return Procedure(
        name=name,
        params=typed(f"{key} decision{kept} user_id now:real payload decision_id"),
        returns=typed("won:bool"),
        steps=(
            Statement(
                f"UPDATE {table} SET decision = :decision,{kept and ' answer = :answer,'}"
                " decided_by = :user_id, decided_at = :now, decision_id = :decision_id"
                f" WHERE {key} = :{key} AND decision IS NULL"
            ),
            Statement(
                "INSERT INTO inbox (task_id, channel, ts, thread_ts, payload, created_at)"
                f" SELECT task_id, channel, card_ts, thread_ts, :payload, :now FROM {table}"
                f" WHERE {ours}{guard}"
            ),
            Statement(f"SELECT EXISTS (SELECT 1 FROM {table} WHERE {ours}) AS won"),
        ),
    )
