"""Involving a person: ``channel_ask``, ``channel_request_approval``, ``channel_check_approval`` and
``no_reply``.

The cards, clicks and answers are the host's (:class:`AskHost`, ``app.agent.asks``): the session
validates the call, hands it over, and records that the turn ends at the next model request —
``waiting`` once it asked someone, ``silent`` after ``no_reply`` (nothing of the turn is posted).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

from storage.base import EffectRecord

from ..errors import ChannelError
from ..tools import AskArgs, CheckApprovalArgs, NoReplyArgs, RequestApprovalArgs
from .state import Result

TurnEnd = Literal["", "waiting", "silent"]
#: Tools that post a card and end the turn waiting for its answer (their journal tool names too).
ASK_TOOLS = frozenset({"channel_ask", "channel_request_approval"})


class AskHost(Protocol):
    """What the host does for the ask tools; each returns the tool's result (an error result when refused)."""

    async def ask(self, session: Any, args: AskArgs) -> Result: ...

    async def request_approval(self, session: Any, args: RequestApprovalArgs) -> Result: ...

    async def check_approval(self, session: Any, handle: str) -> Result: ...

    async def settle(self, session: Any, effect: EffectRecord) -> None:
        """Settle an ask's card effect a crash left open (found by its effect id, else posted),
        closing it with the call's result."""

    async def close_cardless(self, session: Any, asks: Sequence[Any] | None = None) -> list[Any]:
        """Close the task's open asks whose card was never posted (they take no answer and wake
        nobody); the task's other undecided asks. ``asks``: those undecided asks, if read."""

    async def row(self, session: Any, payload: dict[str, Any]) -> Result:
        """An answer's inbox item as the prompt shows it ("Alice answered q_…: staging")."""

    async def free_text(
        self, session: Any, user: str, row: Result, at: float, asks: Sequence[Any] | None = None
    ) -> Result | None:
        """A message row that answers an open free-text question of the task, as the answer's
        row (``{"answer": …, "question": "q_…", …}``); None when it answers none. ``asks``: the
        task's undecided asks if the caller has read them (else they are read)."""


class Asking:
    """Whether the turn ends before its next model request, and the tools that end it. The host's
    calls receive the whole session (``session``): a card is the session's."""

    def __init__(self, host: AskHost | None) -> None:
        """``host``: the host's cards, for adapters that post them (``ChannelFeatures.ask``)."""
        self.host = host
        #: ``waiting``/``silent``: the turn ends before its next model request.
        self.turn_end: TurnEnd = ""

    @property
    def silent(self) -> bool:
        """The model ended its turn with ``no_reply``: nothing more of it is posted."""
        return self.turn_end == "silent"

    async def settle_asks(self, session: Any, effects: Sequence[EffectRecord]) -> list[EffectRecord]:
        """Settle the asks' card effects among ``effects`` a crash left open (the host finds the card
        by its effect id, so it is posted once); the others, for the journal's reconcile."""
        rest = []
        for effect in effects:
            if effect.tool in ASK_TOOLS and self.host is not None:
                await self.host.settle(session, effect)
            else:
                rest.append(effect)
        return rest

    def _host(self) -> AskHost:
        if self.host is None:
            raise ChannelError("unsupported", "Asking people is not available in this conversation.")
        return self.host

    async def ask(self, session: Any, args: AskArgs) -> Result:
        """``channel_ask``: the host posts the question's card; the turn then waits for the answer."""
        return self._waiting(await self._host().ask(session, args))

    async def request_approval(self, session: Any, args: RequestApprovalArgs) -> Result:
        """``channel_request_approval``: the host posts the card; the turn then waits for the decision."""
        return self._waiting(await self._host().request_approval(session, args))

    async def check_approval(self, session: Any, args: CheckApprovalArgs) -> Result:
        """``channel_check_approval``: the host looks the approval up."""
        return await self._host().check_approval(session, args.approval)

    async def no_reply(self, args: NoReplyArgs) -> Result:
        """``no_reply``: the turn ends silently."""
        self.turn_end = "silent"
        return {"ok": True, "message": "Your turn ends now; nothing more is posted."}

    def _waiting(self, result: Result) -> Result:
        if "error" not in result and not self.turn_end:
            self.turn_end = "waiting"
        return result
