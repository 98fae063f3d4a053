"""Involving a person: ``channel_ask``, ``channel_request_approval``, ``channel_check_approval`` and
``no_reply`` (issue 24).

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
from .state import Result, SessionState

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

    async def row(self, session: Any, payload: dict[str, Any]) -> Result:
        """An answer's inbox item as the prompt shows it ("Alice answered q_…: staging")."""

    async def free_text(
        self, session: Any, user: str, row: Result, at: float, asks: Sequence[Any] | None = None
    ) -> Result | None:
        """A message row that answers an open free-text question of the task, as the answer's
        row (``{"answer": …, "question": "q_…", …}``); None when it answers none. ``asks``: the
        task's undecided asks if the caller has read them (else they are read)."""


class Asking(SessionState):
    #: Set by the host for adapters that post cards (``ChannelFeatures.ask``).
    asks: AskHost | None = None
    #: ``waiting``/``silent``: the turn ends before its next model request.
    turn_end: TurnEnd = ""
    #: The person whose message led to this step (set by the run): who may answer an ask by default.
    requester: str = ""

    @property
    def silent(self) -> bool:
        """The model ended its turn with ``no_reply``: nothing more of it is posted."""
        return self.turn_end == "silent"

    async def settle_asks(self, effects: Sequence[EffectRecord]) -> list[EffectRecord]:
        """Settle the asks' card effects among ``effects`` a crash left open (the host finds the card
        by its effect id, so it is posted once); the others, for the journal's reconcile."""
        rest = []
        for effect in effects:
            if effect.tool in ASK_TOOLS and self.asks is not None:
                await self.asks.settle(self, effect)
            else:
                rest.append(effect)
        return rest

    def _host(self) -> AskHost:
        if self.asks is None:
            raise ChannelError("unsupported", "Asking people is not available in this conversation.")
        return self.asks

    async def _ask(self, args: AskArgs) -> Result:
        return self._waiting(await self._host().ask(self, args))

    async def _request_approval(self, args: RequestApprovalArgs) -> Result:
        return self._waiting(await self._host().request_approval(self, args))

    async def _check_approval(self, args: CheckApprovalArgs) -> Result:
        return await self._host().check_approval(self, args.approval)

    async def _no_reply(self, args: NoReplyArgs) -> Result:
        self.turn_end = "silent"
        return {"ok": True, "message": "Your turn ends now; nothing more is posted."}

    def _waiting(self, result: Result) -> Result:
        if "error" not in result and not self.turn_end:
            self.turn_end = "waiting"
        return result
