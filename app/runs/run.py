"""One agent run: a task's inbound messages become a prompt, the agent runs, the transcript is saved.

The scheduler (``app.runs.scheduler``) decides *when* a task runs and holds its lease; this module does
one run. Beside it: ``prompt.py``, ``history.py``, ``steps.py`` (the ``Turn`` and the agent's steps:
steering, budgets, streaming, the turn's end), ``checkpoint.py``, ``refusal.py`` (budgets) and
``outcome.py`` (outcome and hooks).

- cost: budgets checked first (past one: a note, no model call), usage stored per response, a run
  crossing a budget or ``max_requests_per_run`` stops with a note; checkpoints: the transcript is
  saved (with the items shown so far) after each response calling tools and before the answer;
- the end: the final text is posted unless the model replied to the newest message it was shown
  (or repeats a reply) or chose ``no_reply`` (``checkpoint.post_answer``); a failure apologises,
  except a failure of the store (a checkpoint, a journal entry, the save): the run stops unsaved
  and the scheduler takes the task up again from its last checkpoint (``outcome.StoreFailed``);
  transcript saved, run closed, inbox consumed in one transaction; approvals
  (``app.agent.approvals``): gated calls are recorded, saved, their cards posted; a task with an
  undecided approval does not run; the decisions resume it (``deferred_tool_results``);
- the lease: awaited (``guard``) before every write and model request, and set as the channel's
  write guard (``channel.contract.guarding``) so the adapter awaits it before each attempt of a
  paced or retried write; its fence on every durable write; once the lease moved the run ends
  without posting or saving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
    repair_messages,
)

from app.agent.agent_file import AgentFile
from app.agent.approvals import CARD_EFFECT, WAITING, Approvals
from app.agent.runtime import RunDeps
from app.agent.usage import Budgets, UsageMeter, footer, requester
from channel.contract import ChannelAdapter, Origin, WriteGuard, guarding
from channel.errors import ChannelError, ConversationGone
from channel.file_quota import FileQuota
from channel.selection import ToolSelection
from channel.session import AskHost, ChannelSession
from channel.streaming import FLUSH_INTERVAL
from storage.base import (
    EffectRecord,
    Fence,
    HandleRecord,
    InboxItem,
    LeaseMoved,
    RunState,
    StopRecord,
    Store,
    StoreError,
    TaskRecord,
    UsageRecord,
)

from .budget_screen import BudgetScreen, newest_author
from .checkpoint import Checkpoints, post_answer, post_note
from .compaction import Compactor
from .feedback import feedback_notes
from .follow_ups import Recheck, recheck_follow_ups, unattended_chain
from .history import load_history, trim_history
from .instructions import run_instructions
from .limits import DEFAULT_LIMITS, RunLimits
from .outcome import (
    APOLOGY,
    Inbox,
    RunHooks,
    RunOutcome,
    RunStopped,
    StoreFailed,
    slack_refusal,
    stopped,
    store_failed,
)
from .policies import Policies, Policy
from .prompt import answer_recipient, render_prompt
from .refusal import refuse
from .resume import requester_of, resume_open_run
from .steps import AgentSteps, Turn
from .stop import STOPPED_NOTICE, stopped_note

#: Seconds a closed stream waits for a person's Stop to be recorded (by whichever instance Slack's
#: event reached) before the answer goes on in a new message; looked for every STOP_LOOK_S.
STOP_GRACE_S = 2.0
STOP_LOOK_S = 0.2

__all__ = ["APOLOGY", "RunExecutor", "RunHooks", "RunOutcome", "RunStopped", "trim_history"]

log = logging.getLogger(__name__)

#: Seconds each write of a stopped run's end (its streams finished, the note to the person) may take.
HALT_WRITE_S = 10.0


@dataclass
class _Exchange:
    """One run's messages as :meth:`RunExecutor._run`'s steps reach them, so a failure finds what was
    reached: the history it starts from and what it ends with."""

    #: The summary of what came before the transcript (``tasks.summary``), as the model is shown it.
    summary: str
    #: The saved transcript after the summary.
    transcript: list[ModelMessage]
    #: A summary this run's compaction made (saved with the run).
    new_summary: str | None = None
    #: The summary as messages at the start of the history (never saved).
    prefix: list[ModelMessage] = field(default_factory=list)
    #: What the agent runs on: the prefix and the transcript's newest part.
    history: list[ModelMessage] = field(default_factory=list)
    #: What the run ends with (saved after the prefix).
    messages: list[ModelMessage] = field(default_factory=list)
    #: The final text.
    output: str = ""
    #: Gated calls waiting for approval: their cards are posted once the run is saved.
    requests: DeferredToolRequests | None = None


class RunExecutor:
    """Runs the agent for one task at a time it is handed; knows nothing of leases or wake-ups."""

    def __init__(
        self,
        *,
        store: Store,
        adapter: ChannelAdapter,
        agent: Agent[RunDeps, Any],
        tools: ToolSelection,
        agent_file: AgentFile,
        data_dir: Path,
        limits: RunLimits = DEFAULT_LIMITS,
        hooks: RunHooks | None = None,
        clock: Callable[[], float] = time.time,
        approvals: Approvals | None = None,
        asks: AskHost | None = None,
        budgets: Budgets | None = None,
        compactor: Compactor | None = None,
        usage_footer: bool = False,
        stream: bool = False,
        stream_interval: float = FLUSH_INTERVAL,
        feedback: bool = False,
        policies: Policies | None = None,
        name_of: Callable[[str], Awaitable[tuple[str, bool]]] | None = None,
    ) -> None:
        """``stream``: answers stream as written (``STREAM``); ``feedback``: answers end with buttons;
        ``policies``: each conversation's profile (``app.runs.policies``; None: ``agent``, ``tools``,
        ``agent_file`` and ``budgets`` everywhere, nobody screened); ``name_of``: a person's display
        name (and whether a bot), to tell the model who stopped a turn."""
        self.store = store
        self.approvals = approvals
        self.asks = asks  # the agent's own asks (app.agent.asks): session tools that hold nothing
        self.adapter, self.agent, self.tools, self.agent_file = adapter, agent, tools, agent_file
        self.data_dir, self.limits = data_dir, limits
        # Disk reservations for every session this executor builds (channel/file_quota.py).
        self.file_quota = FileQuota(
            data_dir / "tasks",
            person_max=limits.user_files_max_bytes,
            install_max=limits.install_files_max_bytes,
        )
        self.hooks = hooks or RunHooks()
        self.clock = clock
        self.budgets = budgets or Budgets(store, clock=clock)
        self.compactor = compactor
        self.usage_footer = usage_footer
        self.stream = stream
        self.stream_interval = stream_interval
        self.feedback = feedback
        self.policies = policies
        self.follow_up_clock: Callable[[], float] | None = None  # the sweep's, if not clock (playground)
        self.recheck = Recheck()  # who a fired follow-up may still run for (service: from settings)
        self.active_runs: set[str] = set()  # runs in progress now, by task id (tests, benchmarks)
        self.name_of = name_of
        #: The runs a person's Stop can halt now (in their model's steps), and who stopped each.
        self._answering: dict[str, asyncio.Task[Any]] = {}
        self._halted: dict[str, str] = {}

    async def policy(self, channel: str) -> Policy:
        """What a run in ``channel`` works with: its profile's agent, tools, budgets, instructions."""
        if self.policies is None:
            return Policy.plain(self.agent, self.tools, self.budgets, self.agent_file)
        return await self.policies.of(channel)

    async def waiting(self, task_id: str) -> bool:
        """The task waits for a decision on an approval (its inbox waits with it)."""
        return self.approvals is not None and await self.approvals.waiting(task_id)

    def halt(self, task_id: str, by_user: str) -> bool:
        """A person stopped the task's run (``app.runs.stop``): cancel its steps now, if it is in them.
        The run then settles the stop itself (:meth:`_halt`). False when no run of it is in its steps
        here (it has not begun them, or has ended them: the stop is settled by its next run)."""
        running = self._answering.get(task_id)
        if running is None or task_id in self._halted:
            return False
        self._halted[task_id] = by_user
        running.cancel("stopped by a person")
        return True

    def session(
        self,
        task: TaskRecord,
        origin: Origin,
        *,
        adopt_first_root: bool = False,
        guard: WriteGuard | None = None,
        fence: Fence | None = None,
        tools: ToolSelection | None = None,
    ) -> ChannelSession:
        """The run's session; ``tools``: its profile's (default: the executor's)."""
        session = ChannelSession(
            adapter=self.adapter,
            store=self.store,
            task=task,
            origin=origin,
            tools=tools or self.tools,
            task_dir=self.data_dir / "tasks" / task.task_id,
            adopt_first_root=adopt_first_root,
            clock=self.clock,
            guard=guard,
            fence=fence,
            files_max_bytes=self.limits.files_max_bytes,
            file_quota=self.file_quota,
            follow_ups_max=self.limits.follow_ups_max,
            follow_up_clock=self.follow_up_clock,  # the sweep's (playground: demo); None: clock
            asks=self.asks,
        )
        session.follow_ups.per_person_max = self.limits.follow_ups_per_person_max
        session.follow_ups.unattended_max = self.limits.follow_ups_unattended_max
        return session

    async def run_prompt(
        self,
        task: TaskRecord,
        prompt: str,
        *,
        adopt_first_root: bool,
        inbox: Inbox,
        guard: WriteGuard | None = None,
        fence: Fence | None = None,
    ) -> RunOutcome:
        """Run a prompt given directly (the `run` command) rather than taken from the inbox."""
        origin = Origin(task.channel, task.thread_ts)
        policy = await self.policy(task.channel)
        session = self.session(
            task, origin, adopt_first_root=adopt_first_root, guard=guard, fence=fence, tools=policy.tools
        )
        with guarding(guard):  # and before each attempt of each of its Slack writes
            return await self.execute(session, prompt, [], inbox, policy=policy)

    async def run_inbox(
        self,
        task_id: str,
        items: Sequence[InboxItem],
        effects: Sequence[EffectRecord],
        inbox: Inbox,
        guard: WriteGuard | None = None,
        fence: Fence | None = None,
        task: TaskRecord | None = None,
        start: RunState | None = None,
        minted: Sequence[HandleRecord] = (),
    ) -> RunOutcome:
        """Run the task on ``items`` after settling ``effects``; ``inbox`` supplies steering messages,
        ``guard`` is awaited before every write and ``fence`` carried by every durable write (see the
        module docstring); ``task``: its record, read with them; ``start``: the rest of what the
        store read with them (``Store.run_state``), so the prompt costs no more trips; ``minted``:
        handles minted for the task already (the woken message's). A run left open by a crash goes
        on from its last checkpoint."""
        with guarding(guard):  # and before each attempt of each of its Slack writes
            return await self._run_inbox(task_id, items, effects, inbox, guard, fence, task, start, minted)

    async def _run_inbox(
        self,
        task_id: str,
        items: Sequence[InboxItem],
        effects: Sequence[EffectRecord],
        inbox: Inbox,
        guard: WriteGuard | None,
        fence: Fence | None,
        task: TaskRecord | None,
        start: RunState | None,
        minted: Sequence[HandleRecord],
    ) -> RunOutcome:
        task = task or await self.store.get_task(task_id)
        if task is None:
            raise StoreError(f"task {task_id} has inbox items but no record")
        thread_ts = items[-1].thread_ts if items else task.thread_ts
        policy = await self.policy(task.channel)
        origin = Origin(task.channel, thread_ts)
        session = self.session(task, origin, guard=guard, fence=fence, tools=policy.tools)
        session.handles.seed(minted)
        session.look_ahead()  # the instructions' channel lookup overlaps the store trips below
        stop = start.stop if start is not None else await self.store.stop_of(task_id)
        if stop is not None:  # A stop is final: the stopped turn's run ended before it settled it
            try:
                return await self._settle_left_stop(session, stop, items)
            except LeaseMoved:
                return RunOutcome(task_id, "stopped", False)
        cards = [e for e in effects if e.tool == CARD_EFFECT]
        effects = [e for e in effects if e.tool != CARD_EFFECT]  # settled apart
        try:
            notes = await session.reconcile(effects) if effects else []
            if self.approvals is not None:
                if cards:
                    await self.approvals.settle(session, cards, load_history(task.transcript))
                # A decision since the snapshot wakes the task again; only its own runs open approvals.
                if start.open_approval if start is not None else await self.approvals.waiting(task_id):
                    return RunOutcome(task_id, "waiting", False)  # its inbox waits for the decision
            # Interrupted mid-run: go on from the checkpoint, never from the conversation's start.
            if task.run_open and await resume_open_run(self.store, session, bool(items), self.feedback):
                return RunOutcome(task_id, "ok", True)  # it had its answer: now posted once
        except (RunStopped, LeaseMoved):
            log.warning("run of task %s stopped before it began: its lease was lost", task_id)
            return RunOutcome(task_id, "stopped", False)
        # Who may use the bot here (profile, guests), then each author's own budget, told once a run.
        refusal = self.policies.refusal(task.channel, policy.profile) if self.policies is not None else None
        # A fired follow-up's person, checked again as the provider sees them now (a note if refused).
        items = await recheck_follow_ups(session, items, self.recheck, refusal, policy.profile.guests)
        screen = BudgetScreen(policy.budgets, session, refusal)
        shown = await screen.screen(items)
        if items and not shown and screen.refused_anyone:
            # Nobody this run would answer is admitted: it ends without a model call (nothing in the
            # prompt), and the "is thinking…" the edge may have shown for the message goes.
            await self._clear_status(session)
            return await self.execute(session, "", list(items), inbox, policy=policy)
        # Read again when a crashed run's card effects were settled just now (a card since posted).
        asks = list(start.asks) if start is not None and not effects else None
        if session.asks is not None:
            asks = await session.asks.close_cardless(session, asks)  # A card has its record
        prompt = await render_prompt(session, shown, notes, asks=asks)
        upto = None
        if self.feedback:
            # Clicks on the task's answers since its last run (marked shown with the first checkpoint).
            pending = start.feedback if start is not None else None
            lines, upto = await feedback_notes(self.store, session, pending)
            if lines:
                prompt += "\n\nFeedback on your earlier answers:\n" + "\n".join(f"- {line}" for line in lines)
        person = newest_author(shown)  # charged for the run's model requests
        if not person and task.run_open:  # resumed: its messages were consumed with its checkpoint
            person = requester_of(session.task.transcript)
        return await self.execute(
            session,
            prompt,
            list(items),
            inbox,
            feedback_upto=upto,
            person=person,
            screen=screen,
            policy=policy,
        )

    async def _clear_status(self, session: ChannelSession) -> None:
        try:
            await self.adapter.set_status(session.origin, "")
        except ChannelError as exc:
            log.info("could not clear the status of a conversation nobody is answered in: %s", exc.message)

    async def execute(
        self,
        session: ChannelSession,
        prompt: str,
        items: list[InboxItem],
        inbox: Inbox,
        *,
        feedback_upto: float | None = None,
        person: str | None = None,
        screen: BudgetScreen | None = None,
        policy: Policy | None = None,
    ) -> RunOutcome:
        """One agent run. Never raises for model or tool failures: it apologises in the thread instead.
        First the decisions it resumes with, the person it runs for and their budget; then :meth:`_run`."""
        task = session.task
        policy = policy or await self.policy(task.channel)
        turn = Turn(prompt, items)
        checkpoints = Checkpoints(
            self.store,
            task.task_id,
            fence=session.journal.fence,
            prefix=0,
            consumed=turn.consumed,
            feedback_upto=feedback_upto,
        )
        session.journal.held = checkpoints  # a step's held checkpoint goes with its first entry
        pending = load_history(task.transcript)
        deferred = await self.approvals.results(task.task_id, pending) if self.approvals else None
        if deferred is WAITING:
            return RunOutcome(task.task_id, "waiting", False)
        if not prompt.strip() and deferred is None and items:
            return await self._nothing_to_ask(session, turn)
        results = deferred if isinstance(deferred, DeferredToolResults) else None
        person = await self._requester(items, person, task)
        session.requester = person  # follow-ups it schedules run for them
        # Nothing runs away: a run no person started schedules at most so many follow-ups in a row.
        session.follow_ups.unattended = unattended_chain(items, self.limits.follow_ups_unattended_max)
        # Budgets bound what people ask; a run with no message (`run`, settling effects) is never refused.
        hit = await policy.budgets.exceeded(person) if items else None
        if hit is not None:
            return await refuse(self.store, self.hooks.on_budget, session, prompt, turn.consumed, hit)
        meter = UsageMeter(
            self.store,
            task.task_id,
            person,
            task.channel,
            listener=self._listener(session),
            clock=self.clock,
            bounded=bool(items),
        )
        steps = AgentSteps(
            policy.agent,
            session,
            turn,
            meter=meter,
            inbox=inbox,
            max_requests=policy.agent_file.max_requests_per_run,
            budgets=policy.budgets,
            on_budget=self.hooks.on_budget,
            checkpoints=checkpoints,
            screen=screen,
        )
        return await self._run(steps, checkpoints, results, policy)

    async def _nothing_to_ask(self, session: ChannelSession, turn: Turn) -> RunOutcome:
        """Only decisions on calls no longer pending (withdrawn): nothing for the model to do."""
        task = session.task
        await session.journal.check()
        await self.store.save_run(
            task.task_id, transcript=task.transcript, consumed=turn.consumed, fence=session.journal.fence
        )
        return RunOutcome(task.task_id, "ok", False, "", turn.consumed)

    async def _requester(self, items: list[InboxItem], person: str | None, task: TaskRecord) -> str:
        """Who the run's model requests are charged to: ``person``, else the items' author; a run
        resumed from a checkpoint that consumed its message: whom its earlier requests were for (an
        ask or approval it makes is theirs to answer, not only APPROVERS')."""
        person = requester(items) if person is None else person
        if not person and self.approvals is not None and items:
            person = await self.approvals.requester(items)  # resumed by decisions: the asker's run
        if not person and task.run_open:
            since = time.strftime("%Y-%m-%d", time.gmtime(self.clock() - 86400))
            person = await self.store.recent_requester(task.task_id, since=since)
        return person

    async def _run(
        self,
        steps: AgentSteps,
        checkpoints: Checkpoints,
        results: DeferredToolResults | None,
        policy: Policy,
    ) -> RunOutcome:
        """The run proper, between its hooks: the answer (:meth:`_answer`), or an apology for a
        failure (:meth:`_apologise`), then the save (:meth:`_save`); a lost lease ends it unsaved, and
        so does a failed store write, raised (:class:`StoreFailed`) for the scheduler to retry."""
        session, turn = steps.session, steps.turn
        task = session.task
        exchange = _Exchange(task.summary, load_history(task.transcript))
        self.active_runs.add(task.task_id)
        status = "failed"
        if self.feedback:
            session.feedback = task.task_id
        session.on_stream_closed = partial(self._stop_if_asked, task.task_id)
        if self.stream:
            recipient = await answer_recipient(turn.items, self.approvals)
            session.stream_answers(recipient, interval=self.stream_interval)
        try:
            if self.hooks.on_start:
                await self.hooks.on_start(session, turn.items)
            try:
                run_status = await self._answer_stoppably(steps, checkpoints, exchange, results, policy)
            except asyncio.CancelledError:
                by = self._halted.pop(task.task_id, None)
                if by is None:
                    status = "cancelled"
                    raise  # shutdown: leave the inbox pending for the next owner
                status = await self._halt(session, turn, exchange, by)
                return RunOutcome(task.task_id, status, session.replied_in_run, "", turn.consumed)
            except Exception as exc:
                if store_failed(exc):  # our own bookkeeping: stop, and be taken up again
                    raise StoreFailed(f"{type(exc).__name__}: {exc}") from exc
                run_status = await self._apologise(exc, session, turn, checkpoints, exchange)
            await self._save(session, turn, checkpoints, exchange, steps.meter)
            status = run_status
        except (RunStopped, LeaseMoved):
            # Another owner has the task now: no apology, no transcript; the inbox stays theirs.
            status = "stopped"
            log.warning("run of task %s stopped before its next write: its lease was lost", task.task_id)
            return RunOutcome(task.task_id, status, session.replied_in_run, exchange.output, [])
        except (StoreFailed, StoreError) as exc:
            # Like a lost lease, but the task stays ours: the scheduler drives it again after a
            # back-off, from its last checkpoint (an answer checkpointed there is posted once).
            status = "interrupted"
            log.warning("run of task %s stopped, the store failed: %s", task.task_id, exc)
            raise
        finally:
            await self._ended(session, turn, status)
        return RunOutcome(task.task_id, status, session.replied_in_run, exchange.output, turn.consumed)

    async def _answer_stoppably(
        self,
        steps: AgentSteps,
        checkpoints: Checkpoints,
        exchange: _Exchange,
        results: DeferredToolResults | None,
        policy: Policy,
    ) -> str:
        """:meth:`_answer`, which a person's Stop may cancel (:meth:`halt`); a Stop that came just as it
        ended raises ``CancelledError`` here all the same, so the stop is settled by this run."""
        task_id = steps.session.task.task_id
        running = asyncio.current_task()
        assert running is not None
        self._answering[task_id] = running
        try:
            return await self._answer(steps, checkpoints, exchange, results, policy)
        finally:
            del self._answering[task_id]
            if task_id in self._halted:
                running.uncancel()  # our own cancel: the caller settles the stop
                raise asyncio.CancelledError("stopped by a person")

    async def _stop_if_asked(self, task_id: str) -> None:
        """A stream the provider closed may be a person's Stop (Slack ends the thread's streams
        itself, and its event may reach another instance, which records the stop a moment later):
        look for :data:`STOP_GRACE_S` before the answer goes on in a new message, and halt if so."""
        deadline = time.monotonic() + STOP_GRACE_S
        while True:
            stop = await self.store.stop_of(task_id)
            if stop is not None:
                if self.halt(task_id, stop.by_user):
                    await asyncio.sleep(0)  # the cancellation lands here
                return
            if time.monotonic() >= deadline:
                return
            await asyncio.sleep(STOP_LOOK_S)

    async def _halt(self, session: ChannelSession, turn: Turn, exchange: _Exchange, by_user: str) -> str:
        """A person stopped the run (called while handling the cancellation :meth:`halt` made): open
        streams finished as they stand, the stop settled with the turn's transcript ending in a note of
        who stopped it (``app.runs.stop``), the person told privately. Returns the run's status."""
        task = session.task
        session.stop_streaming()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(HALT_WRITE_S):
                await session.finish_streams()  # nothing more is written: the text stays as it stands
        name = ""
        if self.name_of is not None and by_user:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(HALT_WRITE_S):
                    name = (await self.name_of(by_user))[0]
        exchange.messages = [
            *repair_messages(exchange.history or [*exchange.prefix, *exchange.transcript]),
            ModelRequest(parts=[UserPromptPart(p) for p in (turn.prompt, *turn.steered)]),
            ModelResponse(parts=[TextPart(stopped_note(name))]),
        ]
        await self.store.settle_stop(
            task.task_id,
            transcript=ModelMessagesTypeAdapter.dump_json(exchange.messages[len(exchange.prefix) :]),
            consumed=turn.consumed,
            fence=session.journal.fence,
        )
        log.info("run of task %s stopped by a person", task.task_id)
        if by_user:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(HALT_WRITE_S):
                    origin = session.origin
                    await self.adapter.tell_privately(
                        origin.channel, by_user, STOPPED_NOTICE, thread_ts=origin.thread
                    )
        return "halted"

    async def _settle_left_stop(
        self, session: ChannelSession, stop: StopRecord, items: Sequence[InboxItem]
    ) -> RunOutcome:
        """A stop its run did not settle (it crashed, or lost its lease, first): settled now, before
        anything else — its open journal entries closed as they stand (nothing reconciled, nothing
        posted), its messages consumed, the transcript ending in a note of who stopped the turn. A
        stop that came as its run was ending well (nothing of it left to run) only goes."""
        task = session.task
        if not task.run_open and not any(i.item_id <= stop.upto for i in items):
            await self.store.settle_stop(task.task_id, transcript=None, fence=session.journal.fence)
            return RunOutcome(task.task_id, "ok", False)
        name = ""
        if self.name_of is not None and stop.by_user:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(HALT_WRITE_S):
                    name = (await self.name_of(stop.by_user))[0]
        history = repair_messages(load_history(task.transcript))
        history += [
            ModelRequest(parts=[UserPromptPart("(The messages of this turn are in the thread.)")]),
            ModelResponse(parts=[TextPart(stopped_note(name))]),
        ]
        await self.store.settle_stop(
            task.task_id, transcript=ModelMessagesTypeAdapter.dump_json(history), fence=session.journal.fence
        )
        log.info("task %s: a stop left by an earlier run was settled", task.task_id)
        return RunOutcome(task.task_id, "halted", False)

    async def _answer(
        self,
        steps: AgentSteps,
        checkpoints: Checkpoints,
        exchange: _Exchange,
        results: DeferredToolResults | None,
        policy: Policy,
    ) -> str:
        """The agent's steps on the (compacted) history, within the run's time, and their end posted
        (:func:`~app.runs.checkpoint.post_answer`). Returns the run's status."""
        session = steps.session
        # Compaction's model call and describe() count to the run's time (RUN_TIMEOUT) too.
        async with asyncio.timeout(self.limits.run_timeout):
            await self._compact(exchange, checkpoints, steps.meter)
            instructions = await run_instructions(session, policy.tools, policy.agent_file)
            exchange.messages, result, note = await steps.run(exchange.history, instructions, results)
        if isinstance(result, DeferredToolRequests):
            exchange.requests = result  # gated calls: their cards are posted once the run is saved
        else:
            exchange.output = result or ""
        start = len(exchange.history)
        await post_answer(session, checkpoints, exchange.messages, exchange.output, note, start=start)
        if self.usage_footer and steps.meter.total.requests:
            await session.add_footer(footer(steps.meter.total))
        return "ok"

    async def _compact(self, exchange: _Exchange, checkpoints: Checkpoints, meter: UsageMeter) -> None:
        """The history the agent runs on: a long transcript compacted into a summary first, then the
        summary's messages and the transcript's newest part."""
        if self.compactor is not None:
            compacted = await self.compactor.compact(exchange.summary, exchange.transcript, meter)
            if compacted is not None:
                exchange.new_summary, exchange.transcript = compacted
                exchange.summary = checkpoints.summary = exchange.new_summary
        exchange.prefix = Compactor.prefix(exchange.summary)
        checkpoints.prefix = len(exchange.prefix)
        exchange.history = [*exchange.prefix, *trim_history(exchange.transcript, self.limits.history_limit)]

    async def _apologise(
        self,
        exc: Exception,
        session: ChannelSession,
        turn: Turn,
        checkpoints: Checkpoints,
        exchange: _Exchange,
    ) -> str:
        """A failed run (called while handling ``exc``): logged, its messages end with an apology,
        posted once across a crash unless Slack refused the run. Returns the run's status."""
        if stopped(exc):
            raise RunStopped(str(exc)) from exc
        task = session.task
        run_status, refused, apology = "failed", slack_refusal(exc), APOLOGY
        if refused is None:
            log.error("run of task %s failed: %s", task.task_id, type(exc).__name__, exc_info=True)
        else:  # Slack said no (the thread was deleted, say): no bug, no traceback, no retry
            run_status = "refused"
            log.warning("run of task %s ended: Slack refused: %s", task.task_id, refused.message)
            if isinstance(refused, ConversationGone):
                apology = f"(Not posted, the conversation is gone: {refused.message})"
        # The steered messages are consumed with this run: they must stay part of the task.
        # Calls left pending by a failed resume are closed out (they never run).
        exchange.messages = [
            *repair_messages(exchange.history or [*exchange.prefix, *exchange.transcript]),
            ModelRequest(parts=[UserPromptPart(p) for p in (turn.prompt, *turn.steered)]),
            ModelResponse(parts=[TextPart(apology)]),
        ]
        try:
            if apology is APOLOGY:
                await session.drop_answer()
                await post_note(session, checkpoints, exchange.messages, APOLOGY)  # once, across a crash
        except RunStopped:
            raise
        except Exception as failed:
            log.warning(
                "could not post the apology for task %s", task.task_id, exc_info=not slack_refusal(failed)
            )
        return run_status

    async def _save(
        self,
        session: ChannelSession,
        turn: Turn,
        checkpoints: Checkpoints,
        exchange: _Exchange,
        meter: UsageMeter,
    ) -> None:
        """Saving the run consumes the inbox: transcript, consumed items, enabled tools and summary in
        one fenced write, with whatever checkpoint is held; then the cards of gated calls."""
        await session.journal.check()  # saving consumes the inbox: only the lease's holder may
        requests = exchange.requests
        if requests is not None and self.approvals is not None:
            # Recorded before the save: a saved transcript's pending calls always have approvals
            # (one whose run never saved is withdrawn when its card effect is settled).
            await self.approvals.open(session, requests, meter.person)
        save = self.store.save_run(
            session.task.task_id,
            # The summary is stored apart (``tasks.summary``); the transcript holds what follows it.
            transcript=ModelMessagesTypeAdapter.dump_json(exchange.messages[len(exchange.prefix) :]),
            consumed=turn.consumed,
            enabled_tools=session.enabled_in_order,
            summary=exchange.new_summary,
            fence=checkpoints.fence,
            feedback_upto=checkpoints.take_feedback(),
        )
        await checkpoints.with_held_checkpoint(save, supersedes=True)  # a step's held checkpoint is older
        if requests is not None and self.approvals is not None:
            await self.approvals.post_cards(session, exchange.messages)

    async def _ended(self, session: ChannelSession, turn: Turn, status: str) -> None:
        """However the run ended: streaming stopped (a cancelled run leaves its partial message to
        the next run's reconcile), and the end hook told."""
        session.stop_streaming()
        self.active_runs.discard(session.task.task_id)
        if self.hooks.on_end:
            # Progress indicators and metrics must close even when the save failed or we were
            # cancelled. Awaited in this task (no shield): hooks reset context variables they set.
            try:
                await self.hooks.on_end(session, turn.items, status)
            except Exception:
                log.warning("run end hook failed", exc_info=True)

    def _listener(self, session: ChannelSession) -> Callable[[UsageRecord], None] | None:
        on_usage = self.hooks.on_usage
        if on_usage is None:
            return None
        return lambda record: on_usage(session, record)
