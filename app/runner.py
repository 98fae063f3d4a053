"""The task runner: at most one agent run per conversation, fed from the durable inbox.

Ordering rules that keep messages from being lost or run twice:

- Ingress appends to the inbox *before* it asks the runner to drive a task.
- A driver takes the task's lease in the store (so this holds across instances),
  runs until the inbox is empty, releases the lease and then looks at the inbox
  once more: a message appended while another owner held the lease is picked up
  by that owner's post-release check, by the next delivery, or by the sweep.
- During a run the inbox is polled at every step of the agent graph; new
  messages are enqueued into the running agent (pydantic-ai steering), so the
  model sees them before its next request, and they are consumed with the run.
- Inbox items are marked consumed in the same transaction that saves the
  transcript: a crash before that re-runs them, and the effect journal keeps
  the re-run from posting twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
)

from channel.contract import ChannelAdapter, Origin
from channel.errors import ChannelError
from channel.session import ChannelSession, ToolSelection
from storage.base import EffectRecord, InboxItem, Store, StoreError, TaskRecord

from .agent import AgentFile, RunDeps, instructions_for

log = logging.getLogger(__name__)

#: Seconds between prunes of old claim keys by the sweep.
PRUNE_INTERVAL = 3600.0

APOLOGY = "Sorry, I ran into a problem and couldn't finish that. Please try again in a moment."


@dataclass(slots=True)
class RunHooks:
    """Runtime effects around a run (progress indicators, metrics); failures are the hook's own business."""

    on_start: Callable[[ChannelSession, Sequence[InboxItem]], Awaitable[None]] | None = None
    on_tool: Callable[[ChannelSession, str], Awaitable[None]] | None = None
    on_end: Callable[[ChannelSession, Sequence[InboxItem], str], Awaitable[None]] | None = None


@dataclass(slots=True)
class RunOutcome:
    task_id: str
    status: str  # "ok" | "failed"
    replied: bool
    output: str = ""
    consumed: list[int] = field(default_factory=list)


class TaskRunner:
    def __init__(
        self,
        *,
        store: Store,
        adapter: ChannelAdapter,
        agent: Agent[RunDeps, str | None],
        tools: ToolSelection,
        agent_file: AgentFile,
        data_dir: Path,
        run_timeout: float = 300.0,
        lease_ttl: float = 60.0,
        history_limit: int = 400,
        max_concurrent_runs: int = 64,
        owner: str | None = None,
        hooks: RunHooks | None = None,
        clock: Callable[[], float] = time.time,
        claim_retention: float = 604_800.0,
    ) -> None:
        self.store = store
        self.adapter = adapter
        self.agent = agent
        self.tools = tools
        self.agent_file = agent_file
        self.data_dir = data_dir
        self.run_timeout = run_timeout
        self.lease_ttl = lease_ttl
        self.history_limit = history_limit
        # Bursts queue in the durable inbox instead of starting hundreds of runs that starve the acks.
        self._slots = asyncio.Semaphore(max_concurrent_runs)
        self.owner = owner or f"instance-{uuid.uuid4().hex[:12]}"
        self.hooks = hooks or RunHooks()
        self.clock = clock
        #: Seconds claim keys (ingress dedupe) are kept; the sweep prunes older ones.
        self.claim_retention = claim_retention
        self._last_prune: float | None = None
        self._drivers: dict[str, asyncio.Task[None]] = {}
        self._accepting = True
        #: Runs in progress right now, by task id (for tests and shutdown).
        self.active_runs: set[str] = set()

    # -- scheduling ----------------------------------------------------------------------
    def notify(self, task_id: str) -> None:
        """Make sure a driver for ``task_id`` is running in this process (it may find the lease taken)."""
        if not self._accepting:
            return
        driver = self._drivers.get(task_id)
        if driver is not None and not driver.done():
            return  # it polls the inbox at every step and again before it lets go
        driver = asyncio.create_task(self._drive(task_id), name=f"drive:{task_id}")
        self._drivers[task_id] = driver
        driver.add_done_callback(self._driver_done)

    def _driver_done(self, driver: asyncio.Task[None]) -> None:
        task_id = driver.get_name().removeprefix("drive:")
        if self._drivers.get(task_id) is driver:
            del self._drivers[task_id]
        if not driver.cancelled() and driver.exception() is not None:
            log.error("driver for task %s failed", task_id, exc_info=driver.exception())

    async def sweep(self) -> int:
        """Drive every task whose inbox or effects are pending and whose lease is free or expired."""
        task_ids = await self.store.tasks_needing_a_run(now=self.clock())
        for task_id in task_ids:
            self.notify(task_id)
        return len(task_ids)

    async def sweep_forever(self, interval: float) -> None:
        while self._accepting:
            try:
                await self.sweep()
            except Exception:
                log.exception("sweep failed")
            try:
                await self.prune_claims()
            except Exception:
                log.exception("pruning claim keys failed")
            await asyncio.sleep(interval)

    async def prune_claims(self) -> int | None:
        """Drop claim keys older than ``claim_retention``, at most once per ``PRUNE_INTERVAL``
        (the first sweep prunes); None when it was not time yet. Slack retries a delivery for
        minutes only, so older keys dedupe nothing (see ``Store.prune_claims``)."""
        now = self.clock()
        if self._last_prune is not None and now - self._last_prune < PRUNE_INTERVAL:
            return None
        self._last_prune = now  # a failed prune waits for the next interval too
        deleted = await self.store.prune_claims(older_than=now - self.claim_retention)
        if deleted > 0:
            log.info("pruned %d claim keys older than %.0f s", deleted, self.claim_retention)
        return deleted

    async def idle(self) -> None:
        """Wait until no driver is running (tests, the `run` command)."""
        while self._drivers:
            await asyncio.gather(*list(self._drivers.values()), return_exceptions=True)

    async def shutdown(self, grace: float) -> None:
        """Stop taking work, let running turns finish for ``grace`` seconds, then cancel the rest.
        Cancelled runs leave their inbox pending and release their leases, so the next start resumes them."""
        self._accepting = False
        drivers = list(self._drivers.values())
        if drivers:
            _done, pending = await asyncio.wait(drivers, timeout=grace)
            for driver in pending:
                driver.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    # -- driving one task ------------------------------------------------------------------
    async def _drive(self, task_id: str) -> None:
        async with self._slots:
            await self._drive_leased(task_id)

    async def _drive_leased(self, task_id: str) -> None:
        while self._accepting:
            if not await self.store.acquire_lease(
                task_id, owner=self.owner, ttl=self.lease_ttl, now=self.clock()
            ):
                return  # another instance runs it; it will see our inbox item
            heartbeat = asyncio.create_task(self._heartbeat(task_id), name=f"lease:{task_id}")
            try:
                while self._accepting:
                    items = await self.store.pending_inbox(task_id)
                    effects = await self.store.open_effects(task_id)
                    if not items and not effects:
                        break
                    await self.run_inbox(task_id, items, effects)
            finally:
                heartbeat.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await heartbeat
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.store.release_lease(task_id, owner=self.owner))
            if not self._accepting or not await self.store.pending_inbox(task_id):
                return

    async def _heartbeat(self, task_id: str) -> None:
        while True:
            await asyncio.sleep(self.lease_ttl / 3)
            try:
                if not await self.store.renew_lease(
                    task_id, owner=self.owner, ttl=self.lease_ttl, now=self.clock()
                ):
                    log.warning("lost the lease of task %s", task_id)
            except StoreError:
                log.exception("lease heartbeat failed for task %s", task_id)

    async def run_inbox(
        self, task_id: str, items: Sequence[InboxItem], effects: Sequence[EffectRecord]
    ) -> RunOutcome:
        task = await self.store.get_task(task_id)
        if task is None:
            raise StoreError(f"task {task_id} has inbox items but no record")
        thread_ts = items[-1].thread_ts if items else task.thread_ts
        session = self.session(task, Origin(task.channel, thread_ts))
        notes = await session.reconcile(effects) if effects else []
        prompt = await self.prompt(session, items, notes)
        return await self.execute(session, prompt, list(items))

    def session(self, task: TaskRecord, origin: Origin, *, adopt_first_root: bool = False) -> ChannelSession:
        return ChannelSession(
            adapter=self.adapter,
            store=self.store,
            task=task,
            origin=origin,
            tools=self.tools,
            task_dir=self.data_dir / "tasks" / task.task_id,
            adopt_first_root=adopt_first_root,
            clock=self.clock,
        )

    async def prompt(
        self, session: ChannelSession, items: Sequence[InboxItem], notes: Sequence[str] = ()
    ) -> str:
        """The inbound messages as the model's user prompt: author, handle, rendered text, files."""
        lines: list[str] = []
        for item in items:
            raw = json.loads(item.payload)
            try:
                row = await session.row(await self.adapter.view(raw))
            except ChannelError as exc:
                log.warning("could not render inbound message %s: %s", item.ts, exc.message)
                lines.append(f"(a message that could not be shown: {exc.message})")
                continue
            lines.append(f"{row['author']['display_name']} ({row['message']}): {row['text']}")
            for f in row["files"]:
                lines.append(f"  attached {f['file']}: {f['name']} ({f['media_type']}, {f['size']} bytes)")
        if notes:
            lines += ["", "Your previous run was interrupted before it finished:", *notes]
        return "\n".join(lines)

    async def execute(self, session: ChannelSession, prompt: str, items: list[InboxItem]) -> RunOutcome:
        """One agent run. Never raises for model or tool failures: it apologises in the thread instead."""
        task = session.task
        consumed = [i.item_id for i in items]
        history = trim_history(_load_history(task.transcript), self.history_limit)
        self.active_runs.add(task.task_id)
        status = "failed"
        output = ""
        try:
            if self.hooks.on_start:
                await self.hooks.on_start(session, items)
            try:
                info = await self.adapter.describe(session.origin)
                instructions = instructions_for(info, session.active_specs(), self.agent_file.instructions)
                async with asyncio.timeout(self.run_timeout):
                    messages, output = await self._agent_run(session, prompt, history, instructions, consumed)
                if not session.replied and output.strip():
                    await session.post_markdown(output)
                run_status = "ok"
            except asyncio.CancelledError:
                status = "cancelled"
                raise  # shutdown: leave the inbox pending for the next owner
            except Exception as exc:
                run_status = "failed"
                log.error("run of task %s failed: %s", task.task_id, type(exc).__name__, exc_info=True)
                with contextlib.suppress(Exception):
                    await session.post_markdown(APOLOGY)
                messages = [
                    *history,
                    ModelRequest(parts=[UserPromptPart(prompt)]),
                    ModelResponse(parts=[TextPart(APOLOGY)]),
                ]
            await self.store.save_run(
                task.task_id,
                transcript=ModelMessagesTypeAdapter.dump_json(messages),
                consumed=consumed,
                enabled_tools=sorted(session.enabled),
            )
            status = run_status
        finally:
            self.active_runs.discard(task.task_id)
            if self.hooks.on_end:
                # Progress indicators and metrics must close even when the save failed or we were
                # cancelled. Awaited in this task (no shield): hooks reset context variables they set.
                try:
                    await self.hooks.on_end(session, items, status)
                except Exception:
                    log.warning("run end hook failed", exc_info=True)
        return RunOutcome(task.task_id, status, session.replied, output, consumed)

    async def _agent_run(
        self,
        session: ChannelSession,
        prompt: str,
        history: list[ModelMessage],
        instructions: str,
        consumed: list[int],
    ) -> tuple[list[ModelMessage], str]:
        seen = set(consumed)
        task_id = session.task.task_id
        async with self.agent.iter(
            prompt, message_history=history, deps=RunDeps(session), instructions=instructions
        ) as run:
            async for node in run:
                if run.result is not None:
                    break  # the run ended; anything newer starts the next run
                # Steering: before each model request (and before a final answer is accepted),
                # show messages that arrived mid-run. Other nodes need no look at the inbox.
                if not (Agent.is_model_request_node(node) or Agent.is_call_tools_node(node)):
                    continue
                fresh = [i for i in await self.store.pending_inbox(task_id) if i.item_id not in seen]
                if fresh:
                    run.enqueue(await self.prompt(session, fresh), priority="asap")
                    for item in fresh:
                        seen.add(item.item_id)
                        consumed.append(item.item_id)
            result = run.result
            if result is None:  # pragma: no cover - iter always ends with a result
                raise RuntimeError("agent run ended without a result")
            return list(result.all_messages()), result.output or ""

    # -- direct use (the `run` command) ----------------------------------------------------
    async def run_prompt(self, task: TaskRecord, prompt: str, *, adopt_first_root: bool) -> RunOutcome:
        if not await self.store.acquire_lease(
            task.task_id, owner=self.owner, ttl=self.lease_ttl, now=self.clock()
        ):
            raise RuntimeError("that conversation is busy with another run; try again when it finishes")
        try:
            session = self.session(
                task, Origin(task.channel, task.thread_ts), adopt_first_root=adopt_first_root
            )
            return await self.execute(session, prompt, [])
        finally:
            await self.store.release_lease(task.task_id, owner=self.owner)


def trim_history(messages: list[ModelMessage], limit: int) -> list[ModelMessage]:
    """The newest part of a transcript of at most ``limit`` messages, starting at a person's prompt.

    A conversation that goes on for months (a DM's top level) must not outgrow the model's context
    and end every run in an error; cutting only before a user prompt keeps tool calls with their results.
    """
    if len(messages) <= limit:
        return messages
    for start in range(len(messages) - limit, len(messages)):
        message = messages[start]
        if isinstance(message, ModelRequest) and any(isinstance(p, UserPromptPart) for p in message.parts):
            return messages[start:]
    return []


def _load_history(transcript: bytes) -> list[ModelMessage]:
    if not transcript:
        return []
    try:
        return list(ModelMessagesTypeAdapter.validate_json(transcript))
    except ValueError:
        # A transcript from an incompatible pydantic-ai version must not brick the task.
        log.warning("discarding an unreadable transcript")
        return []
