"""A request past a daily token budget: one short note in the thread instead of a model call."""

from __future__ import annotations

import logging
from collections.abc import Callable

from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
)

from app.agent.usage import BudgetHit
from channel.errors import ChannelError
from channel.session import ChannelSession
from storage.base import Store

from .history import load_history
from .outcome import RunOutcome, RunStopped

log = logging.getLogger(__name__)


async def refuse(
    store: Store,
    on_budget: Callable[[ChannelSession, str], None] | None,
    session: ChannelSession,
    prompt: str,
    consumed: list[int],
    hit: BudgetHit,
) -> RunOutcome:
    """Past a budget: one short note in the thread, no model call, and the inbox consumed (so the
    request does not come back); the exchange stays in the transcript like any other turn."""
    task = session.task
    log.warning(
        "task %s: %s daily token budget used (%d of %d); request refused",
        task.task_id, hit.kind, hit.spent, hit.budget,
    )  # fmt: skip
    if on_budget:
        on_budget(session, hit.kind)
    note = hit.note()
    try:
        # By an effect id of its own (its inbox items'): a crash before the save does not post it twice.
        await session.post_note_once(f"budget_{task.task_id}_{consumed[0]}_{consumed[-1]}", note)
        session.replied = True  # the note is this run's whole answer
    except RunStopped:
        return RunOutcome(task.task_id, "stopped", False, "", [])
    except ChannelError as exc:
        log.warning("could not post the budget note for task %s: %s", task.task_id, exc.message)
    messages = [
        *load_history(task.transcript),
        ModelRequest(parts=[UserPromptPart(prompt)]),
        ModelResponse(parts=[TextPart(note)]),
    ]
    await session.journal.check()
    await store.save_run(
        task.task_id,
        transcript=ModelMessagesTypeAdapter.dump_json(messages),
        consumed=consumed,
        fence=session.journal.fence,
    )
    return RunOutcome(task.task_id, "refused", session.replied, "", consumed)
