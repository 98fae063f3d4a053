"""The agent's steps within one run, and the :class:`Turn` they change: model requests and tool calls,
with steering, budgets and streaming.

Before each model request (and before a final answer is accepted) the run checks its lease, its
budgets, and asks its :data:`~app.runs.outcome.Inbox` for messages that arrived meanwhile, which are
enqueued into the running agent so they are consumed with this run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

from pydantic_ai import (
    Agent,
    AgentRun,
    CallToolsNode,
    DeferredToolRequests,
    DeferredToolResults,
    ModelRequestNode,
)
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.usage import UsageLimits

from app.agent.runtime import RunDeps
from app.agent.usage import Budgets, UsageMeter
from channel.session import ChannelSession
from storage.base import InboxItem
from storage.crashpoints import crash_point

from .budget_screen import BudgetScreen, newest_author
from .checkpoint import Checkpoints, synced_by_next_write, tag_streamed
from .outcome import RUNAWAY, Inbox
from .prompt import render_prompt
from .streaming import EventFeed

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Turn:
    """One run's exchange with its inbox: the prompt and items it starts on, the items it consumes,
    and the messages steered into it mid-run.

    The executor (``app.runs.run``) makes it when a run begins. The agent's steps (:class:`AgentSteps`)
    change it, only through its methods, as they steer new messages in (:meth:`steer`, :meth:`take`),
    send them to the model (:meth:`sent`, :meth:`reached_model`) or end the turn before they were
    sent (:meth:`take_back_unsent`). The run's checkpoints read :attr:`consumed` as it grows
    (``app.runs.checkpoint.Checkpoints`` holds this very list) and the run's save consumes it; a
    failed run keeps :attr:`steered` in its transcript.
    """

    #: The prompt rendered from :attr:`items` (empty: a run resumed only by decisions).
    prompt: str
    #: The inbox items the run starts on, oldest first.
    items: list[InboxItem]
    #: Inbox items consumed with the run: its own, then each one steered in (shown, or left out by
    #: a budget). Changed in place: the checkpoints hold this list.
    consumed: list[int] = field(init=False)
    #: Prompts of messages steered in mid-run: consumed with the run, so a failed run keeps them too.
    steered: list[str] = field(default_factory=list, init=False)
    #: Steered prompts not yet seen by the model.
    unanswered: list[str] = field(default_factory=list, init=False)
    #: Steered in since the last model request went out: each prompt and the items it shows.
    #: pydantic-ai puts them in the next request; a turn that ends before it leaves them unshown.
    queued: list[tuple[str, list[int]]] = field(default_factory=list, init=False)
    #: Items looked at already (consumed, or taken back unsent): each is steered in once a run.
    _seen: set[int] = field(init=False)

    def __post_init__(self) -> None:
        self.consumed = [i.item_id for i in self.items]
        self._seen = set(self.consumed)

    def fresh(self, looked: Sequence[InboxItem]) -> list[InboxItem]:
        """The items of ``looked`` (the inbox now) this run has not looked at yet."""
        return [i for i in looked if i.item_id not in self._seen]

    def steer(self, prompt: str, shown: Sequence[InboxItem]) -> None:
        """``prompt``, showing ``shown``, was enqueued into the running agent for its next request."""
        self.steered.append(prompt)
        self.unanswered.append(prompt)
        self.queued.append((prompt, [item.item_id for item in shown]))

    def take(self, fresh: Sequence[InboxItem]) -> None:
        """Consume ``fresh`` with this run (shown or not): each is looked at once."""
        for item in fresh:
            self._seen.add(item.item_id)
            self.consumed.append(item.item_id)

    def sent(self) -> None:
        """The model request going out carries what was queued (pydantic-ai puts it first)."""
        self.queued.clear()

    def reached_model(self) -> None:
        """The steered prompts are in a request the model was sent."""
        self.unanswered.clear()

    def take_back_unsent(self) -> None:
        """Take what was steered in but never sent to the model back out of the consumed items and
        steered prompts: the items stay pending, and the next run shows them."""
        for prompt, items in self.queued:
            self.consumed[:] = [i for i in self.consumed if i not in items]  # in place: see consumed
            self.steered = [p for p in self.steered if p != prompt]
            self.unanswered = [p for p in self.unanswered if p != prompt]
        self.queued.clear()


class Ending(NamedTuple):
    """How the agent's steps ended."""

    #: The run's messages, ending with its final response (or the note it stopped with).
    messages: list[ModelMessage]
    #: Its output: the final text, or the gated calls waiting for approval.
    output: str | DeferredToolRequests | None
    #: The note it stopped with (``""``: it finished).
    note: str


_Run = AgentRun[RunDeps, Any]


class AgentSteps:
    """Drives one agent run node by node for a :class:`~app.runs.run.RunExecutor`, changing its
    :class:`Turn` as messages are steered in."""

    def __init__(
        self,
        agent: Agent[RunDeps, Any],
        session: ChannelSession,
        turn: Turn,
        *,
        meter: UsageMeter,
        inbox: Inbox,
        max_requests: int,
        budgets: Budgets,
        on_budget: Callable[[ChannelSession, str], None] | None = None,
        checkpoints: Checkpoints | None = None,
        screen: BudgetScreen | None = None,
    ) -> None:
        self.agent, self.session, self.turn = agent, session, turn
        self.meter, self.inbox, self.checkpoints = meter, inbox, checkpoints
        self.max_requests = max_requests
        self.budgets = budgets
        self.on_budget = on_budget
        self.screen = screen or BudgetScreen(budgets, session)  # the run's: each person told once
        # Streaming: each model request and tool step is driven through node.stream(), its events
        # fed to the session's streamed answer (app.runs.streaming); otherwise the nodes just run.
        self.feed: EventFeed | None = None

    async def run(
        self, history: list[ModelMessage], instructions: str, results: DeferredToolResults | None = None
    ) -> Ending:
        """The agent run on ``history`` and the turn's prompt, node by node (:meth:`_step`)."""
        limit = self.max_requests
        self.feed = EventFeed(self.session) if self.session.streaming else None
        self.session.requester = self.meter.person
        async with self.agent.iter(
            self.turn.prompt or None,  # a run resumed only by decisions brings no new prompt
            message_history=history,
            deps=RunDeps(self.session, self.meter),
            instructions=instructions,
            usage_limits=UsageLimits(request_limit=limit),
            deferred_tool_results=results,
        ) as run:
            try:
                async for node in run:
                    if run.result is not None:
                        break  # the run ended; anything newer starts the next run
                    ending = await self._step(run, node)
                    if ending is not None:
                        return ending
            except UsageLimitExceeded:
                # A runaway tool loop. The request that would pass the limit is already in the
                # history (with the last tool results); the apology answers it.
                log.warning(
                    "run of task %s reached max_requests_per_run (%d)", self.session.task.task_id, limit
                )
                note = RUNAWAY.format(limit=limit)
                return Ending([*run.all_messages(), _said(note)], "", note)
            result = run.result
            if result is None:  # pragma: no cover - iter always ends with a result
                raise RuntimeError("agent run ended without a result")
            return Ending(list(result.all_messages()), result.output, "")

    async def _step(self, run: _Run, node: Any) -> Ending | None:
        """One node of the agent's graph. A model response is recorded (:meth:`_responded`); a model
        request first writes what is held, unless the turn ends there (:meth:`_turn_ended`,
        :meth:`_over_budget`). At either, messages that arrived meanwhile are steered in
        (:meth:`_steer`) and a streamed run streams the node. Returns how the run ended, if it did."""
        if self.turn.unanswered and _delivered(node, run.all_messages(), self.turn.unanswered):
            # A message steered in after a reply now reaches the model: that reply was not its
            # answer (the final text is posted unless the model replies again).
            self.session.shown_new_message()
            self.turn.reached_model()
        looked: Sequence[InboxItem] | None = None
        calls_tools = False
        if Agent.is_call_tools_node(node):
            calls_tools, looked = await self._responded(run, node)
        elif Agent.is_model_request_node(node):
            if self.session.turn_end:
                return self._turn_ended(run, node)
            if self.checkpoints is not None:
                await self.checkpoints.settle()  # held by a step that only read: written now
            crash_point("model.request")
        else:
            return None  # only a model request or a final answer needs a look at the inbox
        await self.session.journal.check()  # a run that lost its lease spends no more model calls
        if Agent.is_model_request_node(node):
            stop = await self._over_budget(run, node)
            if stop is not None:
                return stop
        if not calls_tools:
            looked = await self.inbox() if looked is None else looked
        await self._steer(run, looked)
        if Agent.is_model_request_node(node):
            self.turn.sent()  # this request carries them (pydantic-ai puts them first)
        if self.feed is not None:
            await self._stream(run, node, self.feed)
        return None

    async def _responded(
        self, run: _Run, node: CallToolsNode[RunDeps, Any]
    ) -> tuple[bool, Sequence[InboxItem] | None]:
        """A model response: whether it calls tools, and the inbox as a final answer found it.

        The usage row and the checkpoint go to the store together (one trip on SQLite: the two
        writes share a transaction). Only a final answer needs a look at the inbox here, before it
        is accepted: a response that calls tools is followed by a model request, which looks just
        before it goes out."""
        calls_tools = any(isinstance(p, ToolCallPart) for p in node.model_response.parts)
        messages = list(run.all_messages())  # pydantic-ai's own list: not ours to change
        if self.session.answer is not None:
            answer = self.session.answer
            answer.own(tag_streamed(messages, answer.sources, answer.key))
        if calls_tools and self.checkpoints is not None and synced_by_next_write(messages):
            # Only the run's own tools: held until their first write (a journal entry), which takes
            # it and the usage row along (app.runs.checkpoint).
            record = self.meter.count(node.model_response)
            self.checkpoints.hold(messages, partial(self.meter.store_usage, record))
            return calls_tools, None
        work: list[Awaitable[Any]] = [self.meter.add(node.model_response)]
        if calls_tools and self.checkpoints is not None:
            # Before its tools run: a crash from here on resumes with this response (its calls
            # answered from the journal), the items shown so far consumed.
            work.append(self.checkpoints.save(messages))
        elif not calls_tools:
            work.append(self.inbox())
        done = await asyncio.gather(*work)
        return calls_tools, None if calls_tools else done[-1]

    def _turn_ended(self, run: _Run, node: ModelRequestNode[RunDeps, Any]) -> Ending:
        """no_reply, or it asked someone: the turn ends here, with no more text. Messages steered in
        while the model wrote that step never reached it: they stay in the inbox for the next run,
        not consumed unseen."""
        self.turn.take_back_unsent()
        said = "(no reply)" if self.session.silent else "(waiting for the answer)"
        return Ending([*run.all_messages(), node.request, _said(said)], None, "")

    async def _over_budget(self, run: _Run, node: ModelRequestNode[RunDeps, Any]) -> Ending | None:
        """A budget crossed mid-way, before the next model request: the step that crossed it is done
        (its tools ran); its results are kept, answered by the note, so the transcript stays whole."""
        if not (self.meter.bounded and self.meter.total.requests):
            return None
        hit = await self.budgets.exceeded(self.meter.person)
        if hit is None:
            return None
        if self.on_budget:
            self.on_budget(self.session, hit.kind)
        self.turn.take_back_unsent()  # as at a turn's end (_turn_ended)
        note = hit.note()
        return Ending([*run.all_messages(), node.request, _said(note)], "", note)

    async def _steer(self, run: _Run, looked: Sequence[InboxItem] | None) -> None:
        """Steering: show the model the messages that arrived mid-run, each against its own author's
        budget; from here on the requests are charged to the newest author shown."""
        fresh = self.turn.fresh(looked or ())
        if not fresh:
            return
        shown = await self.screen.shown(fresh, await self.screen.over(fresh))
        if shown:
            steering = await render_prompt(self.session, shown)
            run.enqueue(steering, priority="asap")
            self.turn.steer(steering, shown)
            self.meter.person = self.session.requester = newest_author(shown) or self.meter.person
        self.turn.take(fresh)

    async def _stream(
        self, run: _Run, node: ModelRequestNode[RunDeps, Any] | CallToolsNode[RunDeps, Any], feed: EventFeed
    ) -> None:
        """Drive ``node`` through its stream, its events fed to the streamed answer."""
        if Agent.is_model_request_node(node):
            feed.new_request()
            async with node.stream(run.ctx) as model_events:
                async for model_event in model_events:
                    feed.model_event(model_event)
        else:
            async with node.stream(run.ctx) as tool_events:
                async for tool_event in tool_events:
                    await feed.tool_event(tool_event)


def _delivered(node: Any, messages: list[ModelMessage], prompts: list[str]) -> bool:
    """Whether one of ``prompts`` (steered in) is in the request the model is sent now (a model
    request node) or was sent last (a call-tools node, before its tools run)."""
    if Agent.is_model_request_node(node):
        request: ModelRequest | None = node.request
    elif Agent.is_call_tools_node(node):
        request = next((m for m in reversed(messages) if isinstance(m, ModelRequest)), None)
    else:
        return False
    return request is not None and any(
        isinstance(p, UserPromptPart) and p.content in prompts for p in request.parts
    )


def _said(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text)])
