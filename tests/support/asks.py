"""A free-text or multiple-choice question (``AskRecord``) as the store tests open it."""

from __future__ import annotations

from storage import AskRecord


def question(
    task_id: str, ask_id: str = "q_one", *, created_at: float, options: tuple[str, ...] = (), thread_ts: str
) -> AskRecord:
    """Alice's (U1's) question "Deploy where?" in ``C1``, only she may answer; no card yet."""
    return AskRecord(
        ask_id=ask_id,
        task_id=task_id,
        kind="question",
        text="Deploy where?",
        details="",
        options=options,
        only_requester=True,
        requester="U1",
        channel="C1",
        thread_ts=thread_ts,
        card_ts="",
        created_at=created_at,
    )
