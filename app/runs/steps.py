"""The agent's steps within one run: model requests and tool calls, with steering, budgets and streaming.

Before each model request (and before a final answer is accepted) the run checks its lease, its
budgets, and asks its :data:`~app.runs.outcome.Inbox` for messages that arrived meanwhile, which are
enqueued into the running agent so they are consumed with this run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
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


class AgentSteps:
    """Drives one agent run node by node for a :class:`~app.runs.run.RunExecutor`."""

    def __init__(
        self,
        agent: Agent[RunDeps, Any],
        *,
        max_requests: int,
        budgets: Budgets,
        on_budget: Callable[[ChannelSession, str], None] | None = None,
    ) -> None:
        self.agent = agent
        self.max_requests = max_requests
        self.budgets = budgets
        self.on_budget = on_budget

    async def run(
        self,
        session: ChannelSession,
        prompt: str,
        history: list[ModelMessage],
        instructions: str,
        consumed: list[int],
        steered: list[str],
        inbox: Inbox,
        meter: UsageMeter,
        results: DeferredToolResults | None = None,
        *,
        checkpoints: Checkpoints | None = None,
        screen: BudgetScreen | None = None,
    ) -> tuple[list[ModelMessage], str | DeferredToolRequests | None, str]:
        """The run's messages, its output (text, or the gated calls waiting for approval), and the
        note it stopped with (``""``: it finished)."""
        seen = set(consumed)
        unanswered: list[str] = []  # prompts steered in, not yet seen by the model
        # Steered in since the last model request that went out: its prompt and the items it shows.
        # pydantic-ai puts them in the next request; a turn that ends before it leaves them unshown.
        queued: list[tuple[str, list[int]]] = []
        screen = screen or BudgetScreen(self.budgets, session)  # the run's: each person told once
        limit = self.max_requests
        # Streaming: each model request and tool step is driven through node.stream(), its events
        # fed to the session's streamed answer (app.streaming); otherwise the nodes just run.
        feed = EventFeed(session) if session.streaming else None
        session.requester = meter.person
        async with self.agent.iter(
            prompt or None,  # a run resumed only by decisions brings no new prompt
            message_history=history,
            deps=RunDeps(session),
            instructions=instructions,
            usage_limits=UsageLimits(request_limit=limit),
            deferred_tool_results=results,
        ) as run:
            try:
                async for node in run:
                    if run.result is not None:
                        break  # the run ended; anything newer starts the next run
                    if unanswered and _delivered(node, run.all_messages(), unanswered):
                        # A message steered in after a reply now reaches the model: that reply was
                        # not its answer (the final text is posted unless the model replies again).
                        session.shown_new_message()
                        unanswered.clear()
                    looked: Sequence[InboxItem] | None = None
                    calls_tools = False
                    if Agent.is_call_tools_node(node):
                        calls_tools = any(isinstance(p, ToolCallPart) for p in node.model_response.parts)
                        # The usage row and the checkpoint go to the store together (one trip on
                        # SQLite: the two writes share a transaction). Only a final answer needs a
                        # look at the inbox here, before it is accepted: a response that calls tools
                        # is followed by a model request, which looks just before it goes out.
                        messages = list(run.all_messages())  # pydantic-ai's own list: not ours to change
                        if session.answer is not None:
                            answer = session.answer
                            answer.own(tag_streamed(messages, answer.sources, answer.key))
                        if calls_tools and checkpoints is not None and synced_by_next_write(messages):
                            # Only the run's own tools: held until their first write (a journal
                            # entry), which takes it and the usage row along (app.runs.checkpoint).
                            record = meter.count(node.model_response)
                            checkpoints.hold(messages, partial(meter.store_usage, record))
                        else:
                            work: list[Awaitable[Any]] = [meter.add(node.model_response)]
                            if calls_tools and checkpoints is not None:
                                # Before its tools run: a crash from here on resumes with this
                                # response (its calls answered from the journal), the items shown so
                                # far consumed.
                                work.append(checkpoints.save(messages))
                            elif not calls_tools:
                                work.append(inbox())
                            done = await asyncio.gather(*work)
                            looked = None if calls_tools else done[-1]
                    elif Agent.is_model_request_node(node):
                        if session.turn_end:
                            # no_reply, or it asked someone: the turn ends here, with no more text.
                            # Messages steered in while the model wrote that step never reached it:
                            # they stay in the inbox for the next run, not consumed unseen.
                            _unqueue(queued, consumed, steered, unanswered)
                            said = "(no reply)" if session.silent else "(waiting for the answer)"
                            return [*run.all_messages(), node.request, _said(said)], None, ""
                        if checkpoints is not None:
                            await checkpoints.settle()  # held by a step that only read: written now
                        crash_point("model.request")
                    # Steering: before each model request (and before a final answer is accepted),
                    # show messages that arrived mid-run. Other nodes need no look at the inbox.
                    if not (Agent.is_model_request_node(node) or Agent.is_call_tools_node(node)):
                        continue
                    await session.journal.check()  # a run that lost its lease spends no more model calls
                    if Agent.is_model_request_node(node) and meter.bounded and meter.total.requests:
                        hit = await self.budgets.exceeded(meter.person)
                        if hit is not None:
                            # Crossed mid-way: the step that crossed it is done (its tools ran); its
                            # results are kept, answered by the note, so the transcript stays whole.
                            if self.on_budget:
                                self.on_budget(session, hit.kind)
                            _unqueue(queued, consumed, steered, unanswered)  # as at a turn's end, above
                            note = hit.note()
                            stop = ModelResponse(parts=[TextPart(note)])
                            return [*run.all_messages(), node.request, stop], "", note
                    if not calls_tools:
                        looked = await inbox() if looked is None else looked
                    fresh = [i for i in looked or () if i.item_id not in seen]
                    if fresh:
                        # Each steered message against its own author's budget; from here on the
                        # requests are charged to the newest author shown.
                        shown = await screen.shown(fresh, await screen.over(fresh))
                        if shown:
                            steering = await render_prompt(session, shown)
                            run.enqueue(steering, priority="asap")
                            steered.append(steering)
                            unanswered.append(steering)
                            queued.append((steering, [item.item_id for item in shown]))
                            meter.person = session.requester = newest_author(shown) or meter.person
                        for item in fresh:
                            seen.add(item.item_id)
                            consumed.append(item.item_id)
                    if Agent.is_model_request_node(node):
                        queued.clear()  # this request carries them (pydantic-ai puts them first)
                    if feed is None:
                        continue
                    if Agent.is_model_request_node(node):
                        feed.new_request()
                        async with node.stream(run.ctx) as model_events:
                            async for model_event in model_events:
                                feed.model_event(model_event)
                    else:
                        async with node.stream(run.ctx) as tool_events:
                            async for tool_event in tool_events:
                                await feed.tool_event(tool_event)
            except UsageLimitExceeded:
                # A runaway tool loop. The request that would pass the limit is already in the
                # history (with the last tool results); the apology answers it.
                log.warning("run of task %s reached max_requests_per_run (%d)", session.task.task_id, limit)
                note = RUNAWAY.format(limit=limit)
                return [*run.all_messages(), ModelResponse(parts=[TextPart(note)])], "", note
            result = run.result
            if result is None:  # pragma: no cover - iter always ends with a result
                raise RuntimeError("agent run ended without a result")
            return list(result.all_messages()), result.output, ""


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


def _unqueue(
    queued: list[tuple[str, list[int]]], consumed: list[int], steered: list[str], unanswered: list[str]
) -> None:
    """Take what was steered in but never sent to the model back out of the run's consumed items
    and steered prompts: the items stay pending, and the next run shows them."""
    for prompt, items in queued:
        consumed[:] = [i for i in consumed if i not in items]
        steered[:] = [p for p in steered if p != prompt]
        unanswered[:] = [p for p in unanswered if p != prompt]
    queued.clear()


def _said(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text)])
