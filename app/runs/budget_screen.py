"""Budgets charged to the author of each message, steered ones included.

A run answers every message in its inbox, and messages steered into it mid-run. Each of them is
checked against its own author's ``USER_DAILY_TOKEN_BUDGET`` before the model sees it: a message
whose author has used up their budget is not shown to the model (so posting after someone else no
longer gets an over-budget person an answer); it is consumed with the run, and its author gets the
budget's short note in the thread, once per run. The note is journalled under an effect id of its own
(the task, the person, their first message left out): a crash after it was posted, before the run
consumed the message, finds it on restart instead of posting it again. Model requests are charged
to the author of the newest message shown (see :func:`newest_author`). A run whose messages are
*all* over budget is refused as a whole (``app.runs.refusal``), with the same note.

Before budgets, the screen leaves out messages whose authors the conversation does not admit
(``app.agent.admission``: access lists, organisation, profile users, guests): they are consumed with
the run and never reach the model, and nothing is posted for them. A run left with no person's
message ends without a model call.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from app.agent.usage import BudgetHit, Budgets
from channel import inbound
from channel.errors import ChannelError
from channel.session import ChannelSession
from storage.base import InboxItem

from .outcome import RunStopped

log = logging.getLogger(__name__)

__all__ = ["BudgetScreen", "Refusal", "author", "newest_author"]

#: Why a person may not use the bot in the run's conversation (None when they may), given the
#: organisation their message's event named (``""``: none; None: the router checked it).
Refusal = Callable[[str, str | None], Awaitable[str | None]]


def author(item: InboxItem) -> str:
    """The person who wrote an inbox message; ``""`` for a decision or a bot's message."""
    return inbound.person(item.payload)


def _organisation(item: InboxItem) -> str | None:
    """The organisation an inbox message's event named for its author (``""``: none); None for a
    row that is not a message (a decision, a follow-up, an answer)."""
    message = inbound.stored(item.payload)
    return message.author.organisation if message is not None else None


def newest_author(items: Sequence[InboxItem]) -> str:
    """The author of the newest person's message in ``items``; ``""`` when there is none."""
    for item in reversed(items):
        if found := author(item):
            return found
    return ""


class BudgetScreen:
    """One run's check of each message against its author's daily budget (see the module doc)."""

    def __init__(self, budgets: Budgets, session: ChannelSession, refusal: Refusal | None = None) -> None:
        """``refusal``: why a person may not use the bot in this conversation (None: they may),
        ``app.agent.admission``; their messages are left out before budgets are looked at."""
        self.budgets = budgets
        self.session = session
        self.refusal = refusal
        self._told: set[str] = set()
        self._refused: dict[str, str | None] = {}

    async def admitted(self, items: Sequence[InboxItem]) -> list[InboxItem]:
        """``items`` without the messages of people the conversation does not admit (logged once a
        run each, nothing posted: they start nothing)."""
        if self.refusal is None:
            return list(items)
        for person in sorted({author(i) for i in items} - {""} - set(self._refused)):
            # An organisation the event did not tell ("") is asked of the platform; else the router
            # decided it (None).
            untold = any(author(i) == person and _organisation(i) == "" for i in items)
            why = self._refused[person] = await self.refusal(person, "" if untold else None)
            if why is not None:
                log.warning("a message was not shown to the model: its author is %s", why)
        return [i for i in items if self._refused.get(author(i)) is None]

    @property
    def refused_anyone(self) -> bool:
        """Whether the run left out a message because its author is not admitted."""
        return any(why is not None for why in self._refused.values())

    async def screen(self, items: Sequence[InboxItem]) -> list[InboxItem]:
        """The run's first messages as the model may see them: those of people not admitted left
        out, then those of over-budget authors (and told), unless every person's message is (then
        all stay, for the run's refusal)."""
        items = await self.admitted(items)
        over = await self.over(items)
        if not {author(i) for i in items} - {"", *over}:
            return list(items)
        return await self.shown(items, over)

    async def over(self, items: Sequence[InboxItem]) -> dict[str, BudgetHit]:
        """Authors of ``items`` past their own daily budget, with what they spent."""
        found: dict[str, BudgetHit] = {}
        if not self.budgets.per_user:
            return found
        for person in {author(i) for i in items} - {""}:
            hit = await self.budgets.exceeded(person)
            if hit is not None and hit.kind == "user":
                found[person] = hit
        return found

    async def shown(self, items: Sequence[InboxItem], over: dict[str, BudgetHit]) -> list[InboxItem]:
        """``items`` without the messages of people not admitted and of over-budget authors, who
        are each told once."""
        items = await self.admitted(items)
        kept = [i for i in items if author(i) not in over]
        for person in sorted({author(i) for i in items} & set(over)):
            if person in self._told:
                continue
            self._told.add(person)
            log.warning("a message from a person past their daily token budget was not shown to the model")
            first = min(i.item_id for i in items if author(i) == person)
            try:
                effect_id = f"budget_{self.session.task.task_id}_{person}_{first}"
                await self.session.post_note_once(effect_id, over[person].note())
            except (ChannelError, RunStopped) as exc:
                log.warning("could not post the budget note: %s", exc)
        return kept
