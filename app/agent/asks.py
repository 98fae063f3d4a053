"""The agent asks the thread: ``channel_ask`` questions, ``channel_request_approval``,
``channel_check_approval``; the host side of :class:`channel.session.asking.AskHost`.

- **Asking.** The ask is recorded (``q_…``/``ap_…``, task-scoped) and its card posted through the
  task's journal (tool ``channel_ask``/``channel_request_approval``); the session then ends the turn.
  Nothing waits in memory and no lease is held: an open ask does not hold the task's inbox.
- **Answers.** A click on an option (or Approve/Deny) by someone allowed decides the ask once
  (``Store.decide_ask``: the first answer wins across instances and restarts) and appends an inbox
  item in the same transaction, which resumes the task on any instance ("Alice answered q_…:
  staging"). The card is updated to show who answered what, without buttons. Anyone else is told
  privately and nothing changes. A free-text question is answered by the next message in the
  thread from an allowed person (:meth:`Asks.free_text`, when the prompt is rendered).
- **Who may answer.** ``only_requester`` (default): the person whose message led to the ask, or a
  user in ``APPROVERS``; otherwise anyone in the conversation. Approvals follow the operator-gated
  rules (requester or ``APPROVERS``; only ``APPROVERS`` with ``APPROVAL_BY=approvers``).
- **Expiry.** Open longer than ``APPROVAL_TTL``: decided ``expired`` by the sweep (or on click),
  which resumes the task with ``expired``.

An approval the model requested unlocks nothing by itself: it is the model's own promise.
"""

from __future__ import annotations

import datetime
import json
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from app.clicks import Action
from channel.contract import Origin, Posted
from channel.errors import ChannelError
from channel.session import ChannelSession
from channel.tools import AskArgs, RequestApprovalArgs
from storage.base import AskDecision, AskKind, AskRecord, EffectRecord, StoreError

from .approvals import Approvals
from .ask_cards import ASK_APPROVE, ASK_DENY, OPTION_ACTIONS, decided_card, open_card

log = logging.getLogger(__name__)

#: ``kind`` of the inbox payload an answer or decision appends.
ASK_KIND = "ask_decision"
#: The card effect's result when the ask was not (or no longer) recorded: the model may ask again.
_NOT_RECORDED = ChannelError("not_found", "the question was not recorded and no card was posted; ask again")
#: Characters of a free-text answer kept with the ask (the message itself stays whole in the prompt).
_MAX_ANSWER = 4000
Result = dict[str, Any]


def is_answer(payload: Any) -> bool:
    """The inbox payload is an ask's answer or decision (resumes the task; no message)."""
    return isinstance(payload, dict) and payload.get("kind") == ASK_KIND


def answer_row(payload: dict[str, Any], name: str) -> dict[str, Any]:
    """The prompt row of an answer's inbox payload, ``name`` the display name of who answered."""
    handle = str(payload.get("ask") or "")
    decision = str(payload.get("decision") or "")
    row: dict[str, Any] = {"approval" if handle.startswith("ap_") else "question": handle, "status": decision}
    if decision == "expired":
        row["event"] = f"Nobody answered {handle} in time: expired"
    elif decision == "answered":
        answer = str(payload.get("answer") or "")
        row |= {"event": f"{name} answered {handle}: {answer}", "author": name, "answer": answer}
    else:
        row |= {"event": f"{name} {decision} {handle}", "author": name}
    return row


class Asks:
    """Cards, clicks, free-text answers and expiry of the agent's own asks (module doc). Shares the
    approvals' settings (``APPROVERS``, ``APPROVAL_BY``, ``APPROVAL_TTL``), wake-up and private notes."""

    def __init__(
        self, approvals: Approvals, name_of: Callable[[str], Awaitable[tuple[str, bool]]] | None = None
    ) -> None:
        """``name_of``: a user's display name (and whether a bot), as ``SlackAdapter.user``."""
        self.approvals = approvals
        self.store = approvals.store
        self.adapter = approvals.adapter
        self.name_of = name_of

    # -- asking (the session's tools) ---------------------------------------------------------
    async def ask(self, session: ChannelSession, args: AskArgs) -> Result:
        options = tuple(args.options or ())
        return await self._open(session, "question", args.question, "", options, args.only_requester)

    async def request_approval(self, session: ChannelSession, args: RequestApprovalArgs) -> Result:
        return await self._open(session, "approval", args.action, args.details or "", (), True)

    async def _open(
        self,
        session: ChannelSession,
        kind: AskKind,
        text: str,
        details: str,
        options: tuple[str, ...],
        only_requester: bool,
    ) -> Result:
        prefix, tool = ("q_", "channel_ask") if kind == "question" else ("ap_", "channel_request_approval")
        record = AskRecord(
            ask_id=prefix + secrets.token_urlsafe(16),
            task_id=session.task.task_id,
            kind=kind,
            text=text,
            details=details,
            options=options,
            only_requester=only_requester,
            requester=session.requester,
            channel=session.origin.channel,
            thread_ts=session.origin.thread,
            card_ts="",
            created_at=self.approvals.clock(),
        )
        # Journal first (A card has its record): a crash after the entry leaves a card effect the
        # resumed run settles (:meth:`settle`: posted, or closed when the record never was); a store
        # error after it withdraws the record. A record without a card takes no answer (module doc).
        effect_id = await session.journal.open(tool, {"ask": record.ask_id})
        try:
            await self.store.open_ask(record)
        except StoreError:
            await self._withdraw(session, record, effect_id, _NOT_RECORDED)
            raise
        return await self._post_card(session, record, effect_id, [])

    async def _withdraw(
        self, session: ChannelSession, record: AskRecord, effect_id: str, error: ChannelError
    ) -> None:
        """Close the card's effect with ``error`` and decide the record ``expired`` without waking the
        task (nobody saw its card), as far as the store lets: what it does not, the resumed run settles."""
        try:
            await session.journal.close(effect_id, error.as_result())
            await self.store.decide_ask(
                record.ask_id, decision="expired", answer="", user_id="", payload="", now=record.created_at
            )
        except StoreError:
            log.warning("could not withdraw ask %s; the resumed run settles it", record.ask_id)

    async def _post_card(
        self, session: ChannelSession, record: AskRecord, effect_id: str, found: Sequence[Posted]
    ) -> Result:
        """Post the ask's card under ``effect_id`` (or take it as ``found``, posted before a crash)
        and close the effect with the call's result."""
        try:
            if found:
                posted = found[0]
            else:
                where = Origin(record.channel, record.thread_ts)
                card = open_card(record, self.approvals.ttl)
                posted = await self.adapter.post_card(where, card, effect_id=effect_id)
        except ChannelError as exc:
            # Nobody can answer a card that was never posted: withdrawn, resuming nothing.
            await self._withdraw(session, record, effect_id, exc)
            raise
        # The store keeps the key the adapter gives (what a click reports), never a piece of the ref.
        await self.store.set_ask_card(record.ask_id, self.adapter.click_key(posted.ref))
        result: Result = (
            {"question": record.ask_id, "status": "asked"}
            if record.kind == "question"
            else {"approval": record.ask_id, "status": "pending"}
        )
        await session.journal.close(effect_id, result)
        return result

    async def settle(self, session: ChannelSession, effect: EffectRecord) -> None:
        """Settle an ask whose run died between journalling its card and recording the result: the
        card is found in the thread by the effect id it carries (else posted now), so it is posted
        once and the resumed run reads the call's own result from the journal."""
        record = await self.store.get_ask(str(json.loads(effect.args).get("ask") or ""))
        if record is None or (record.decision is not None and not record.card_ts):
            # Never recorded, or withdrawn (or expired) before its card was known: not posted now.
            await session.journal.close(effect.effect_id, _NOT_RECORDED.as_result())
            return
        found = await self.adapter.find_posted(Origin(record.channel, record.thread_ts), effect.effect_id)
        try:
            await self._post_card(session, record, effect.effect_id, found)
        except ChannelError as exc:
            log.warning("could not post the card of interrupted ask %s: %s", record.ask_id, exc.message)

    async def close_cardless(
        self, session: ChannelSession, asks: Sequence[AskRecord] | None = None
    ) -> list[AskRecord]:
        """Decide ``expired``, waking nobody, the task's open asks whose card was never posted (a store
        error or crash between the record and its card; run before the prompt, after the crashed run's
        card effects are settled); the others. ``asks``: the task's undecided asks, if read."""
        kept = []
        for ask in asks if asks is not None else await self.store.open_asks(session.task.task_id):
            if ask.card_ts:
                kept.append(ask)
                continue
            log.warning("ask %s has no card: closed", ask.ask_id)
            await self.store.decide_ask(
                ask.ask_id, decision="expired", answer="", user_id="", payload="", now=self.approvals.clock()
            )
        return kept

    async def check_approval(self, session: ChannelSession, handle: str) -> Result:
        ask = await self.store.get_ask(handle)
        if ask is None or ask.task_id != session.task.task_id or ask.kind != "approval":
            raise ChannelError(
                "invalid_handle",
                f"{handle[:60]} is not an approval of this conversation (ap_… from its result).",
            )
        status = ask.decision or ("expired" if self._overdue(ask) else "pending")
        result: Result = {"status": status}
        if ask.decided_by:
            result["by"] = await self._name(ask.decided_by)
        if ask.decided_at is not None:
            result["at"] = _iso(ask.decided_at)
        return result

    async def free_text(
        self,
        session: ChannelSession,
        user: str,
        row: Result,
        at: float,
        asks: Sequence[AskRecord] | None = None,
    ) -> Result | None:
        """``row`` (a message by ``user`` that arrived at ``at``) as the answer to the task's oldest
        open free-text question it may answer; None when it answers none. ``asks``: the task's
        undecided asks as the caller read them (one decided since loses its ``decide_ask`` below)."""
        for ask in asks if asks is not None else await self.store.open_asks(session.task.task_id):
            if not ask.card_ts:
                continue  # its card was never posted: nobody is answering it (:meth:`close_cardless`)
            if ask.kind != "question" or ask.options or at < ask.created_at or self._overdue(ask):
                continue
            if not self.may_answer(user, ask):
                continue
            text = str(row.get("text") or "")
            won = await self.store.decide_ask(
                ask.ask_id,
                decision="answered",
                answer=text[:_MAX_ANSWER],
                user_id=user,
                payload="",
                now=self.approvals.clock(),
            )
            if won:
                self._update_card(ask.ask_id)
                name = str(row.get("author") or "")
                return {
                    "event": f"{name} answered {ask.ask_id}: {text}",
                    "author": name,
                    "message": row.get("message"),
                    "question": ask.ask_id,
                    "answer": text,
                }
        return None

    # -- clicks -----------------------------------------------------------------------------------
    async def click(self, action: Action) -> None:
        ask_id, _, index = action.value.partition(":")
        try:
            ask = await self.store.get_ask(ask_id)
        except StoreError:
            log.exception("could not read ask %s for a click", ask_id[:60])
            self.approvals.tell(action, "Your answer could not be recorded just now; please click again.")
            return
        if ask is None or action.channel != ask.channel or (ask.card_ts and action.message_ts != ask.card_ts):
            self.approvals.tell(action, "That question is unknown; nothing was changed.")
            return
        if not self.may_answer(action.user_id, ask):
            who = f"<@{ask.requester}> or an approver" if ask.requester else "an approver"
            if ask.kind == "approval" and self.approvals.approval_by == "approvers":
                who = "an approver"
            self.approvals.tell(action, f"Only {who} can answer this; nothing was changed.")
            return
        decision: AskDecision
        answer = ""
        if ask.kind == "approval":
            decision = "approved" if action.action_id == ASK_APPROVE else "denied"
        else:
            decision = "answered"
            position = int(index) if index.isdigit() else -1
            if not 0 <= position < len(ask.options):
                self.approvals.tell(action, "That answer is not one of the options; nothing was changed.")
                return
            answer = ask.options[position]
        if ask.decision is None and self._overdue(ask):
            decision, answer = "expired", ""
        won = await self.store.decide_ask(
            ask.ask_id,
            decision=decision,
            answer=answer,
            user_id=action.user_id,
            payload=self._payload(ask, decision, answer, action.user_id),
            now=self.approvals.clock(),
        )
        if won:
            log.info("ask decided", extra={"fields": {"ask": ask.ask_id, "decision": decision}})
            self.approvals.wake(ask.task_id)
            self._update_card(ask.ask_id)
            if decision == "expired":
                self.approvals.tell(action, "This had expired; nothing was changed.")
            return
        current = await self.store.get_ask(ask.ask_id)
        if current is not None and current.decided_by == action.user_id and current.answer == answer:
            return  # the same click delivered twice: already done
        self.approvals.tell(action, "This was already answered; nothing was changed.")

    def may_answer(self, user_id: str, ask: AskRecord) -> bool:
        if not user_id:
            return False
        if user_id in self.approvals.approvers:
            return True
        if ask.kind == "approval":
            return self.approvals.approval_by != "approvers" and user_id == ask.requester
        return not ask.only_requester or not ask.requester or user_id == ask.requester

    # -- expiry -----------------------------------------------------------------------------------
    async def sweep(self) -> int:
        """Decide ``expired`` every ask open longer than ``APPROVAL_TTL``; how many this call decided."""
        decided = 0
        before = self.approvals.clock() - self.approvals.ttl
        for ask in await self.store.expired_asks(before=before):
            # An ask whose card was never posted expires silently: nobody was waiting for it. Nor is a
            # form (an MCP server's question) that outlived its call: no run waits on the inbox for it.
            payload = self._payload(ask, "expired", "", "") if ask.card_ts and ask.kind != "form" else ""
            now = self.approvals.clock()
            won = await self.store.decide_ask(
                ask.ask_id, decision="expired", answer="", user_id="", payload=payload, now=now
            )
            if won:
                decided += 1
            if won and payload:
                self.approvals.wake(ask.task_id)
                self._update_card(ask.ask_id)
        return decided

    def register(self, on: Callable[[str, Callable[[Action], Awaitable[None]]], None]) -> None:
        """Route the cards' buttons here (``Interactions.on``)."""
        for action_id in (*OPTION_ACTIONS, ASK_APPROVE, ASK_DENY):
            on(action_id, self.click)

    # -- inside -----------------------------------------------------------------------------------
    def _overdue(self, ask: AskRecord) -> bool:
        return self.approvals.clock() - ask.created_at > self.approvals.ttl

    def _payload(self, ask: AskRecord, decision: AskDecision, answer: str, by: str) -> str:
        # ``user``: whom the resumed run is for (and charged to): the asker, as for gated calls.
        payload = {"kind": ASK_KIND, "ask": ask.ask_id, "user": ask.requester or by, "by": by}
        return json.dumps(payload | {"decision": decision, "answer": answer}, ensure_ascii=False)

    async def row(self, session: ChannelSession, payload: dict[str, Any]) -> Result:
        """An answer's inbox payload as the prompt shows it: "Alice answered q_…: staging"."""
        return answer_row(payload, await self._name(str(payload.get("by") or "")))

    async def _name(self, user: str) -> str:
        if not user or self.name_of is None:
            return user
        try:
            return (await self.name_of(user))[0] or user
        except ChannelError:
            return user

    def _update_card(self, ask_id: str) -> None:
        self.approvals.cards.redraw(ask_id, self.store.get_ask, decided_card)


def _iso(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).isoformat(timespec="seconds")
