"""An MCP server's questions (``elicitation/create``) asked of the person in the thread.

- **Form mode.** The server's message and its fields become a card in the thread for the person
  whose message led to the call (:func:`form_card`): one input per field (text, number, yes/no, one
  of a list) and Submit / Decline / Cancel. The card has its record (an ask of kind ``form``,
  ``el_…``) before it is posted, so a click on any instance decides it once; the call waits — the
  run keeps its lease — until it is decided or ``MCP_ELICITATION_TIMEOUT_S`` passes, then answers
  the server ``accept`` with the form's values, ``decline``, or ``cancel`` (also on time-out). A
  submission that does not fit the form (a required field empty, "abc" for a number) is refused
  privately and the card stays open.
- **URL mode.** The link goes to the requester privately (an ephemeral message), never as a public
  post; the server hears ``accept`` once it was shown, and the person decides whether to open it.
- Only the requester answers; anyone else is told so privately. A request that cannot be tied to
  one run's call (``app.agent.mcp.scope``), a form with fields a card cannot hold (nested objects,
  lists), or a call with no person behind it is answered ``decline`` or ``cancel`` at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from app.agent.cards import CardDesk
from app.clicks import Action
from channel.cards import Card, Choice, Icon, Input, Line, Mention, Strong, Text, Time
from channel.contract import Origin
from channel.errors import ChannelError
from storage.base import AskDecision, AskRecord, StoreError

from .scope import CallScope, InFlight

if TYPE_CHECKING:
    from channel.contract import ChannelAdapter
    from storage.base import Store

log = logging.getLogger(__name__)

FORM_SUBMIT = "threadbound_form_submit"
FORM_DECLINE = "threadbound_form_decline"
FORM_CANCEL = "threadbound_form_cancel"
GROUP = "threadbound_form"
#: Seconds between two looks at the store while a form waits (a click on another instance).
POLL_S = 0.5
#: Fields a form card holds (Slack allows 50 blocks a message).
MAX_FIELDS = 20
#: Characters one field's answer may have (Slack's text input holds 3,000; a forged click more).
MAX_VALUE_CHARS = 3_000
_KINDS = {"string": "text", "number": "number", "integer": "integer", "boolean": "boolean"}


class Unshowable(ValueError):
    """A form a card cannot hold; the server is answered ``decline``."""


def form_inputs(schema: Mapping[str, Any]) -> tuple[Input, ...]:
    """The card's inputs for a ``requestedSchema`` (a flat object of primitive properties)."""
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        return ()
    if len(properties) > MAX_FIELDS:
        raise Unshowable(f"the form has {len(properties)} fields; a card holds {MAX_FIELDS}")
    required = set(schema.get("required") or ())
    inputs = []
    for name, prop in properties.items():
        if not isinstance(prop, dict):
            raise Unshowable(f"field {name!r} has no schema")
        many = prop.get("type") == "array" and isinstance(prop.get("items"), dict)
        options, labels = _options(prop["items"] if many else prop)
        kind = ("choices" if many else "choice") if options else _KINDS.get(str(prop.get("type")))
        if kind is None or (many and not options):
            raise Unshowable(f"field {name!r} is of type {prop.get('type')!r}, which a card cannot hold")
        initial = _initial(prop.get("default"))
        inputs.append(
            Input(
                name=str(name),
                label=str(prop.get("title") or name),
                kind=kind,  # type: ignore[arg-type]
                options=options,
                labels=labels,
                required=name in required,
                hint=str(prop.get("description") or ""),
                initial=initial,
            )
        )
    return tuple(inputs)


def _options(prop: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The values a property offers and their labels (``enum``/``enumNames``, or ``oneOf``/``anyOf``
    of ``const`` with ``title``)."""
    if isinstance(prop.get("enum"), list):
        values = tuple(str(v) for v in prop["enum"])
        names = prop.get("enumNames")
        labels = tuple(str(n) for n in names) if isinstance(names, list) and len(names) == len(values) else ()
        return values, labels
    listed = [o for o in prop.get("oneOf") or prop.get("anyOf") or () if isinstance(o, dict) and "const" in o]
    return tuple(str(o["const"]) for o in listed), tuple(str(o.get("title") or o["const"]) for o in listed)


def _initial(default: Any) -> str:
    if default is None:
        return ""
    if isinstance(default, list):
        return "\n".join(str(d) for d in default)
    return str(default).lower() if isinstance(default, bool) else str(default)


def form_content(values: Mapping[str, str], inputs: tuple[Input, ...]) -> dict[str, Any]:
    """The accepted content from the card's values, typed as the form asks; ValueError says what is wrong."""
    content: dict[str, Any] = {}
    for field in inputs:
        raw = values.get(field.name, "").strip()
        if len(raw) > MAX_VALUE_CHARS:
            raise ValueError(f"{field.label} is longer than {MAX_VALUE_CHARS:,} characters")
        if not raw:
            if field.required:
                raise ValueError(f"{field.label} is required")
            continue
        if field.kind == "integer":
            try:
                content[field.name] = int(raw)
            except ValueError:
                raise ValueError(f"{field.label} must be a whole number") from None
        elif field.kind == "number":
            try:
                content[field.name] = float(raw)
            except ValueError:
                raise ValueError(f"{field.label} must be a number") from None
        elif field.kind == "boolean":
            content[field.name] = raw == "true"
        elif field.kind == "choice" and raw not in field.options:
            raise ValueError(f"{field.label} must be one of {', '.join(field.options)}")
        elif field.kind == "choices":
            picked = [v for v in raw.split("\n") if v]
            if any(v not in field.options for v in picked):
                raise ValueError(f"{field.label} takes only {', '.join(field.options)}")
            content[field.name] = picked
        else:
            content[field.name] = raw
    return content


def form_card(record: AskRecord, inputs: tuple[Input, ...], server: str, until: float) -> Card:
    """The open card of a form."""
    title: Line = (Icon("memo"), Text(" "), Strong(f"{server} asks"))
    note: Line = (Text("For "), Mention(record.requester), Text(" · open until "), Time(until, "in a while"))
    choices = (
        Choice(FORM_SUBMIT, "Submit", record.ask_id, "primary"),
        Choice(FORM_DECLINE, "Decline", record.ask_id, "danger"),
        Choice(FORM_CANCEL, "Cancel", record.ask_id),
    )
    return Card(
        f"{server} asks: {record.text[:150]}",
        title,
        (record.text,),
        note=note,
        inputs=inputs,
        choices=choices,
        group=GROUP,
        requester=record.requester,
    )


def decided_form_card(record: AskRecord) -> Card:
    """The card of a decided form: what happened, and when; no inputs, no choices."""
    when = Time(record.decided_at or record.created_at, "just now")
    by = Mention(record.decided_by or "")
    server = record.details or "The server"
    if record.decision == "answered":
        line: Line = (Icon("white_check_mark"), Text(" "), by, Text(" answered "), when)
    elif record.decision == "denied":
        word = "cancelled" if record.answer == "cancel" else "declined"
        line = (Icon("no_entry_sign"), Text(" "), by, Text(f" {word} "), when)
    else:
        line = (
            Icon("hourglass"),
            Text(" "),
            Strong("Expired"),
            Text(" "),
            when,
            Text(": nobody answered in time."),
        )
    title: Line = (Icon("memo"), Text(" "), Strong(f"{server} asked"))
    card = Card(
        f"{server} asked: {record.text[:150]}", title, (record.text,), note=line, requester=record.requester
    )
    return replace(card, state="decided", decided_by=record.decided_by or "")


class Elicitor:
    """Asks the servers' questions in the thread and routes the answers' clicks (module doc)."""

    def __init__(
        self, store: Store, adapter: ChannelAdapter, timeout: float, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.adapter = adapter
        self.cards = CardDesk(adapter)
        self.timeout = timeout
        self.clock = clock
        # Forms waiting on this instance: a click handled here wakes its call at once.
        self._waiting: dict[str, asyncio.Event] = {}

    def handler(self, server: str, inflight: InFlight) -> Callable[..., Awaitable[Any]]:
        """The FastMCP elicitation handler of one server."""

        async def elicit(message: str, response_type: Any, params: Any, context: Any) -> Any:
            return await self.elicit(server, inflight, message, params)

        return elicit

    async def elicit(self, server: str, inflight: InFlight, message: str, params: Any) -> Any:
        from fastmcp.client.elicitation import ElicitResult

        scope = inflight.owner()
        if scope is None or not scope.person:
            why = "no call of one person's is in flight" if scope is None else "no person is behind the call"
            log.info("MCP server %s asked a question nobody can answer (%s): cancelled", server, why)
            return ElicitResult(action="cancel")
        if getattr(params, "mode", "form") == "url":
            return await self._link(server, scope, message, str(getattr(params, "url", "")))
        try:
            inputs = form_inputs(getattr(params, "requested_schema", None) or {})
        except Unshowable as exc:
            log.info("MCP server %s asked with a form a card cannot show (%s): declined", server, exc)
            return ElicitResult(action="decline")
        return await self._form(server, scope, message, inputs)

    async def _link(self, server: str, scope: CallScope, message: str, url: str) -> Any:
        from fastmcp.client.elicitation import ElicitResult

        origin = scope.session.origin
        text = f"{server} asks you to open a link: {message}\n{url}"
        try:
            await self.adapter.tell_privately(origin.channel, scope.person, text, thread_ts=origin.thread)
        except ChannelError as exc:
            log.warning("MCP server %s: the link could not be shown: %s", server, exc.code)
            return ElicitResult(action="cancel")
        return ElicitResult(action="accept")

    async def _form(self, server: str, scope: CallScope, message: str, inputs: tuple[Input, ...]) -> Any:
        from fastmcp.client.elicitation import ElicitResult

        session = scope.session
        now = self.clock()
        record = AskRecord(
            ask_id="el_" + secrets.token_urlsafe(16),
            task_id=session.task.task_id,
            kind="form",
            text=message,
            details=server,
            options=tuple(_field_json(i) for i in inputs),
            only_requester=True,
            requester=scope.person,
            channel=session.origin.channel,
            thread_ts=session.origin.thread,
            card_ts="",
            created_at=now,
        )
        event = self._waiting[record.ask_id] = asyncio.Event()
        try:
            # The record first (A card has its record): a click finds it on any instance.
            await self.store.open_ask(record)
            card = form_card(record, inputs, server, now + self.timeout)
            where = Origin(record.channel, record.thread_ts)
            posted = await self.adapter.post_card(where, card, effect_id=record.ask_id)
            await self.store.set_ask_card(record.ask_id, self.adapter.click_key(posted.ref))
            decided = await self._decided(record.ask_id, event)
        except (ChannelError, StoreError) as exc:
            log.warning("MCP server %s: its question could not be asked: %s", server, exc)
            await self._expire(record.ask_id)
            return ElicitResult(action="cancel")
        finally:
            self._waiting.pop(record.ask_id, None)
        self.cards.redraw(record.ask_id, self.store.get_ask, decided_form_card)
        if decided is None or decided.decision == "expired":
            return ElicitResult(action="cancel")
        if decided.decision == "denied":
            return ElicitResult(action="cancel" if decided.answer == "cancel" else "decline")
        return ElicitResult(action="accept", content=json.loads(decided.answer or "{}"))

    async def _decided(self, ask_id: str, event: asyncio.Event) -> AskRecord | None:
        """The form's record once decided; decided ``expired`` here at the time-out."""
        deadline = time.monotonic() + self.timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                async with asyncio.timeout(min(POLL_S, left)):
                    await event.wait()
            except TimeoutError:
                pass
            record = await self.store.get_ask(ask_id)
            if record is not None and record.decision is not None:
                return record
        await self._expire(ask_id)
        return await self.store.get_ask(ask_id)  # a click may have won just before the time-out

    async def _expire(self, ask_id: str) -> None:
        try:
            await self.store.decide_ask(
                ask_id, decision="expired", answer="", user_id="", payload="", now=self.clock()
            )
        except StoreError:
            log.warning("could not close form %s; the sweep expires it", ask_id)

    # -- clicks -----------------------------------------------------------------------------------
    async def click(self, action: Action) -> None:
        tell = self.cards.tell
        try:
            record = await self.store.get_ask(action.value)
        except StoreError:
            tell(action, "Your answer could not be recorded just now; please click again.")
            return
        if record is None or record.kind != "form" or action.channel != record.channel:
            tell(action, "That form is unknown; nothing was changed.")
            return
        if action.user_id != record.requester:
            tell(action, f"Only <@{record.requester}> can answer this; nothing was changed.")
            return
        if record.decision is not None:
            tell(action, "This was already answered; nothing was changed.")
            return
        decision: AskDecision
        if action.action_id == FORM_SUBMIT:
            inputs = tuple(_field(raw) for raw in record.options)
            try:
                answer = json.dumps(form_content(action.values, inputs), ensure_ascii=False)
            except ValueError as exc:
                tell(action, f"{exc}; the form is still open.")
                return
            decision = "answered"
        else:
            decision, answer = "denied", ("cancel" if action.action_id == FORM_CANCEL else "decline")
        won = await self.store.decide_ask(
            record.ask_id,
            decision=decision,
            answer=answer,
            user_id=action.user_id,
            payload="",
            now=self.clock(),
        )
        if not won:
            tell(action, "This was already answered; nothing was changed.")
            return
        event = self._waiting.get(record.ask_id)
        if event is not None:
            event.set()

    def register(self, on: Callable[[str, Callable[[Action], Awaitable[None]]], None]) -> None:
        """Route the forms' buttons here (``Interactions.on``)."""
        for action_id in (FORM_SUBMIT, FORM_DECLINE, FORM_CANCEL):
            on(action_id, self.click)


def _field_json(field: Input) -> str:
    """One field as the form's record keeps it (its ``options``): what a submission is checked against."""
    kept = {"name": field.name, "label": field.label, "kind": field.kind, "required": field.required}
    return json.dumps(kept | {"options": list(field.options)}, ensure_ascii=False)


def _field(raw: str) -> Input:
    data = json.loads(raw)
    return Input(
        name=str(data["name"]),
        label=str(data["label"]),
        kind=data["kind"],
        options=tuple(str(o) for o in data.get("options") or ()),
        required=bool(data.get("required")),
    )
