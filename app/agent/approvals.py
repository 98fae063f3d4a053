"""Approvals: a call matching ``approval`` in agent.toml waits in the thread for a person's decision.

The flow, and what keeps each step safe:

1. **Gate.** :class:`ApprovalGate` wraps the agent's toolsets (pydantic-ai's ``approval_required``
   pattern): a matching call raises ``ApprovalRequired`` instead of running, and the run ends with a
   ``DeferredToolRequests``. The executor then records one approval per call — the row and the
   journal entry of its card in one transaction — saves the transcript (ending in the open calls)
   and posts one card per call. The run ends: no lease, nothing in memory.
2. **Cards** are journalled posts (effect tool ``approval_card``): after a crash the next driver
   settles them (:meth:`Approvals.settle`) — found in the thread by their effect id, else posted
   then; an approval whose call never reached a saved transcript is withdrawn (``void``).
3. **Decisions.** A click (``threadbound_approve``/``threadbound_deny``, value the approval id) is
   decided by the requester or a user in ``APPROVERS``; anyone else is told privately and nothing
   changes. ``Store.decide_approval`` claims the decision atomically (the first one wins, across
   instances, double clicks and restarts) and appends an inbox item in the same transaction, before
   the click is acknowledged; the scheduler is woken like for a message. The card is updated to show
   who decided and when, without buttons.
4. **Expiry.** An approval open longer than ``APPROVAL_TTL`` is decided ``expired`` — when clicked
   (checked on click) and by the scheduler's sweep (:meth:`Approvals.sweep`), whichever comes first.
5. **Resume.** While any approval of a task is open, its messages wait in the inbox (the store does
   not report it due). Once all are decided, the next run passes ``DeferredToolResults`` built from
   the decisions (:meth:`Approvals.results`): approved calls run, denied/expired ones read
   ``{"error": {"code": "denied"|"expired", ...}}``. An approved call is marked started in the store
   before it runs (:meth:`ApprovalGate.call_tool`), so it runs at most once even if the run crashes.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial

from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolDenied
from pydantic_ai.messages import ModelMessage

from app.clicks import Action
from app.settings import Settings
from channel import inbound
from channel.contract import ChannelAdapter, Origin
from channel.errors import ChannelError
from channel.session import ChannelSession
from storage.base import ApprovalDecision, ApprovalRecord, EffectRecord, InboxItem, Store, StoreError

from .approval_cards import APPROVE, DENY, decided_card, open_card, showable
from .approval_gate import ApprovalGate, decision_result, gated, newest_approval, open_calls
from .cards import CardDesk

__all__ = ["CARD_EFFECT", "DECISION_KIND", "WAITING", "ApprovalGate", "Approvals", "gated", "is_decision"]

log = logging.getLogger(__name__)

#: The journal's tool name for posting an approval card.
CARD_EFFECT = "approval_card"
#: Card post failures that will not pass (``not_in_channel``, ``is_archived``, ``channel_not_found``…).
_UNPOSTABLE = frozenset({"unsupported", "not_found"})
#: ``kind`` of the inbox payload a decision appends.
DECISION_KIND = "approval_decision"


def is_decision(item: InboxItem) -> bool:
    """The inbox item is a decision (resumes the task), not a message to show the model."""
    try:
        payload = json.loads(item.payload)
    except ValueError:
        return False
    return isinstance(payload, dict) and payload.get("kind") == DECISION_KIND


@dataclass(frozen=True, slots=True)
class Waiting:
    """The task still waits for a decision on some approval."""


WAITING = Waiting()


class Approvals:
    """Cards, clicks, the expiry sweep and the results a resumed run passes to pydantic-ai."""

    def __init__(
        self,
        *,
        store: Store,
        adapter: ChannelAdapter,
        approvers: Sequence[str] = (),
        approval_by: str = "requester",
        ttl: float = 86_400.0,
        wake: Callable[[str], None] = lambda task_id: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.adapter = adapter
        self.approvers = frozenset(approvers)
        #: ``requester``: the person whose message led to the call, or an approver; ``approvers``: only these.
        self.approval_by = approval_by
        self.ttl = ttl
        self.wake = wake
        self.clock = clock
        # Card updates and notes after a click run here, so the click's 200 never waits on Slack.
        self.cards = CardDesk(adapter)
        #: The conversation's profile ``approvers`` as user ids (``app.agent.admission``), who may
        #: decide there besides ``APPROVERS``; None: nobody more.
        self.deciders: Callable[[str], Awaitable[frozenset[str]]] | None = None

    @classmethod
    def from_settings(cls, store: Store, adapter: ChannelAdapter, settings: Settings) -> Approvals:
        """Approvals as ``APPROVERS``, ``APPROVAL_BY`` and ``APPROVAL_TTL`` say."""
        return cls(
            store=store,
            adapter=adapter,
            approvers=settings.approvers,
            approval_by=settings.approval_by,
            ttl=settings.approval_ttl,
        )

    # -- the run that made gated calls ---------------------------------------------------------
    async def open(
        self, session: ChannelSession, requests: DeferredToolRequests, requester: str
    ) -> list[str]:
        """Record one approval (and its card's journal entry) per gated call; their ids."""
        await session.journal.check()
        ids = []
        for call in requests.approvals:
            approval_id = f"apv_{uuid.uuid4().hex}"
            await self.store.open_approval(
                approval_id=approval_id,
                task_id=session.task.task_id,
                tool_call_id=call.tool_call_id,
                tool=call.tool_name,
                args=json.dumps(call.args_as_dict(), ensure_ascii=False),
                requester=requester,
                channel=session.origin.channel,
                thread_ts=session.origin.thread,
                card_effect=uuid.uuid4().hex,
                now=self.clock(),
            )
            ids.append(approval_id)
        return ids

    async def settle(
        self,
        session: ChannelSession,
        effects: Sequence[EffectRecord],
        history: Sequence[ModelMessage],
        *,
        interrupted: bool = True,
    ) -> None:
        """Post (or find, after a crash) the cards of open card effects; withdraw an approval whose
        call is not pending in the saved transcript (its run never saved). ``interrupted``: the
        effects were left open by a run that is gone, so a card of theirs may still be on its way
        and is looked for until it can no longer land (``EffectJournal.look_for``) before it is
        posted; else (this run's own, or ones whose post was already waited out) one look."""
        pending = {c.tool_call_id for c in open_calls(history)}
        for effect in effects:
            await session.journal.check()
            approval_id = str(json.loads(effect.args).get("approval_id") or "")
            approval = await self.store.get_approval(approval_id)
            if approval is None or approval.decision is not None:
                # Decided (expired, say) before its card could be posted: no card is needed any more.
                await session.journal.close(effect.effect_id, {"card": None})
                continue
            if approval.tool_call_id not in pending:
                await self.store.decide_approval(
                    approval_id,
                    decision="void",
                    user_id="",
                    payload=_decision_payload(approval_id),
                    now=self.clock(),
                )
                await session.journal.close(effect.effect_id, {"void": True})
                continue
            origin = Origin(approval.channel, approval.thread_ts)
            find = partial(self.adapter.find_posted, origin, effect.effect_id)
            found = await (session.journal.look_for(self.adapter, effect, find) if interrupted else find())
            if found:
                posted = found[0]
            else:
                card = open_card(
                    approval, self.ttl, "approvers" if self.approval_by == "approvers" else "requester"
                )
                try:
                    posted = await self.adapter.post_card(origin, card, effect_id=effect.effect_id)
                except ChannelError as exc:
                    if exc.ambiguous or (exc.code not in _UNPOSTABLE and not exc.for_good):
                        raise  # passing (or unknown): the sweep looks for the card and posts it if absent
                    await self._unpostable(session, approval, effect, exc)
                    continue
            # The store keeps the key the adapter gives (what a click reports), never a piece of the ref.
            await self.store.set_approval_card(approval_id, self.adapter.click_key(posted.ref))
            await session.journal.close(effect.effect_id, {"card": posted.ref})

    async def _unpostable(
        self, session: ChannelSession, approval: ApprovalRecord, effect: EffectRecord, exc: ChannelError
    ) -> None:
        """The provider will not take the card here (``not_in_channel``, ``is_archived``…) or ever
        (refused for good: its blocks, a revoked token): nobody can approve it, so the call is decided
        ``failed`` at once and the task goes on, instead of the sweep posting it again until it expires."""
        log.warning("approval card %s cannot be posted: %s", approval.approval_id, exc.message)
        await self.store.decide_approval(
            approval.approval_id,
            decision="failed",
            user_id="",
            payload=_decision_payload(approval.approval_id),
            now=self.clock(),
        )
        await session.journal.close(effect.effect_id, exc.as_result())
        self.wake(approval.task_id)

    async def post_cards(self, session: ChannelSession, history: Sequence[ModelMessage]) -> None:
        """Post the cards of this task's approvals whose card effects are still open. A failed post
        leaves its effect open: the next sweep looks for the card in the thread and posts it if absent."""
        effects = [e for e in await self.store.open_effects(session.task.task_id) if e.tool == CARD_EFFECT]
        try:
            await self.settle(session, effects, history, interrupted=False)
        except ChannelError as exc:
            log.warning("an approval card was not posted (%s); the sweep retries it", exc.message)

    async def waiting(self, task_id: str) -> bool:
        return await self.store.has_open_approval(task_id)

    async def requester(self, items: Sequence[InboxItem]) -> str:
        """The person whose message led to this run: the newest message's author, else (a run
        resumed by decisions) the requester of the approvals it resumes."""
        for item in reversed(items):
            try:
                payload = json.loads(item.payload)
            except ValueError:
                continue
            if not isinstance(payload, dict):
                continue
            if payload.get("kind") == DECISION_KIND:
                approval = await self.store.get_approval(str(payload.get("approval_id") or ""))
                if approval is not None and approval.requester:
                    return approval.requester
            elif who := inbound.person(item.payload):
                return who
        return ""

    # -- the run that resumes ----------------------------------------------------------------
    async def results(
        self, task_id: str, history: Sequence[ModelMessage]
    ) -> DeferredToolResults | Waiting | None:
        """What to pass as ``deferred_tool_results`` for the transcript's pending calls: None when
        there are none, :data:`WAITING` while one is undecided."""
        calls = open_calls(history)
        if not calls:
            return None
        approvals = await self.store.task_approvals(task_id)
        results: dict[str, bool | ToolDenied] = {}
        for call in calls:
            approval = newest_approval(approvals, call.tool_call_id)
            if approval is not None and approval.decision is None:
                return WAITING
            results[call.tool_call_id] = decision_result(approval)
        return DeferredToolResults(approvals=dict(results))

    # -- clicks ----------------------------------------------------------------------------------
    async def click(self, action: Action) -> None:
        """A click on a card's button: decide, or tell the clicker privately why not."""
        decision: ApprovalDecision = "approved" if action.action_id == APPROVE else "denied"
        try:
            approval = await self.store.get_approval(action.value)
        except StoreError:
            # E.g. a store on a schema from before approvals during a rolling deploy: say so.
            log.exception("could not read approval %s for a click", action.value[:60])
            self.tell(action, "Your decision could not be recorded just now; please click again in a minute.")
            return
        if approval is None or not _on_its_card(action, approval):
            # A click counts only on the card itself, where the task posted it: a payload whose
            # container points at another channel or message decides nothing.
            self.tell(action, "That approval request is unknown; nothing was changed.")
            return
        if not self.may_decide(action.user_id, approval) and not await self._profile_decider(
            action, approval
        ):
            if self.approval_by == "approvers":
                who = "an approver"
            else:
                who = f"<@{approval.requester}> or an approver" if approval.requester else "an approver"
            self.tell(action, f"Only {who} can decide this request; nothing was changed.")
            return
        if decision == "approved" and not showable(approval):
            self.tell(
                action, "This call's arguments are too large to show, so it cannot be approved; deny it."
            )
            return
        if approval.decision is None and self.clock() - approval.created_at > self.ttl:
            decision = "expired"  # checked on click: a late click cannot approve
        try:
            won = await self.store.decide_approval(
                approval.approval_id,
                decision=decision,
                user_id=action.user_id,
                payload=_decision_payload(
                    approval.approval_id, action.user_id if decision != "expired" else ""
                ),
                now=self.clock(),
            )
        except StoreError:
            log.exception("could not record a decision on approval %s", approval.approval_id)
            self.tell(action, "Your decision could not be recorded just now; please click again.")
            return
        if won:
            log.info(
                "approval decided",
                extra={
                    "fields": {"approval": approval.approval_id, "decision": decision, "tool": approval.tool}
                },
            )
            self.wake(approval.task_id)
            self._update_card(approval.approval_id)
            if decision == "expired":
                self.tell(action, "This request had expired; the call did not run.")
            return
        current = await self.store.get_approval(approval.approval_id)
        if current is not None and current.decided_by == action.user_id and current.decision == decision:
            return  # the same click delivered twice (or to two instances): already done
        if current is not None and current.decision is not None:
            self.tell(action, f"This request was already {current.decision}; nothing was changed.")

    async def _profile_decider(self, action: Action, approval: ApprovalRecord) -> bool:
        """Whether the clicker is among the ``approvers`` of the conversation's profile."""
        return self.deciders is not None and action.user_id in await self.deciders(approval.channel)

    def may_decide(self, user_id: str, approval: ApprovalRecord) -> bool:
        """Whether ``user_id`` may decide ``approval`` (``APPROVAL_BY``, ``APPROVERS``)."""
        if user_id in self.approvers:
            return True
        return self.approval_by != "approvers" and bool(user_id) and user_id == approval.requester

    def tell(self, action: Action, text: str) -> None:
        """Tell the clicker ``text`` privately, in the background (``app.agent.cards``)."""
        self.cards.tell(action, text)

    def _update_card(self, approval_id: str) -> None:
        self.cards.redraw(approval_id, self.store.get_approval, decided_card)

    # -- expiry ------------------------------------------------------------------------------------
    async def sweep(self) -> int:
        """Decide ``expired`` every approval open longer than the TTL; how many this call decided."""
        decided = 0
        for approval in await self.store.expired_approvals(before=self.clock() - self.ttl):
            won = await self.store.decide_approval(
                approval.approval_id,
                decision="expired",
                user_id="",
                payload=_decision_payload(approval.approval_id),
                now=self.clock(),
            )
            if won:
                decided += 1
                self.wake(approval.task_id)
                self._update_card(approval.approval_id)
        return decided

    async def idle(self) -> None:
        """Wait for card updates and notes in flight, the asks' too (tests, shutdown)."""
        await self.cards.idle()

    def register(self, on: Callable[[str, Callable[[Action], Awaitable[None]]], None]) -> None:
        """Route the two buttons' clicks here (``Interactions.on``)."""
        on(APPROVE, self.click)
        on(DENY, self.click)


def _decision_payload(approval_id: str, by: str = "") -> str:
    """The inbox item a decision appends; ``by``: the person who clicked (``""``: an expiry, a
    withdrawal), which tells a run a person acted (ceilings on follow-ups, ``app.runs.follow_ups``)."""
    return json.dumps({"kind": DECISION_KIND, "approval_id": approval_id, "by": by})


def _on_its_card(action: Action, approval: ApprovalRecord) -> bool:
    """The click came from the approval's card: its channel, and its message once the card's ts is known."""
    if action.channel != approval.channel:
        return False
    return not approval.card_ts or action.message_ts == approval.card_ts
