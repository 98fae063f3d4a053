"""The composition root: builds the store, Slack adapter, agent, scheduler, intake and the HTTP edge, and
is the one place that knows every part; ``app.serving.serve`` runs it until a signal.

The HTTP edge itself (Bolt, ``/slack/events``, the probes, ``/metrics``) is ``app.intake.http``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from pydantic_ai import Agent
from pydantic_ai.models import Model
from pydantic_ai.toolsets import AbstractToolset
from slack_bolt.async_app import AsyncApp

from app.agent.admission import Admission
from app.agent.agent_file import AgentFile
from app.agent.approval_cards import APPROVE, DENY
from app.agent.approval_gate import warn_unmatched_approval
from app.agent.approval_policy import ApprovalPolicy
from app.agent.approvals import ApprovalGate, Approvals
from app.agent.ask_cards import ASK_APPROVE, ASK_DENY
from app.agent.asks import Asks
from app.agent.mcp import personal_wiring
from app.agent.mcp.elicitation import Elicitor
from app.agent.mcp.personal import PersonalServer
from app.agent.mcp.servers import McpServers, McpTool
from app.agent.mcp.toolset import McpToolset
from app.agent.profiles import DEFAULT, Profile
from app.agent.runtime import RunDeps, build_agent, build_model
from app.agent.usage import Budgets
from app.intake.agent_view import AgentView
from app.intake.edge_thread import MainLoop
from app.intake.external import ExternalNotice
from app.intake.home import AppHome
from app.intake.http import HttpEdge, build_bolt, event_acker, event_handler
from app.intake.ingress import Ingress
from app.intake.interactions import Interactions, admit_by
from app.intake.mcp_disconnect import SUMMARY as DISCONNECT_SUMMARY
from app.intake.mcp_disconnect import disconnect_subcommand
from app.intake.personal import Personal
from app.intake.personal_blocks import CANCEL_FOLLOW_UP
from app.intake.shortcuts import Shortcuts
from app.intake.slash_command import SlashCommand
from app.intake.socket_mode import SocketModeError, SocketModeIntake, first_socket_url
from app.intake.stop_command import SUMMARY as STOP_SUMMARY
from app.intake.stop_command import StopCommand
from app.ops.check import auth_failure
from app.ops.observe import ModelTiming, Observer, combine
from app.ops.paas import ephemeral_disk_warning
from app.ops.shutdown import CANCEL_WAIT, bounded
from app.runs.ack_gate import AckGate
from app.runs.agent_session import SessionStatuses
from app.runs.compaction import Compactor
from app.runs.feedback import Feedback
from app.runs.file_expiry import FileExpiry, sweep_steps
from app.runs.follow_ups import Access, FollowUpSweep, Recheck
from app.runs.limits import RunLimits
from app.runs.policies import Policies, Policy, profile_host_tools, profile_tools
from app.runs.progress import Progress
from app.runs.run import RunExecutor, RunHooks
from app.runs.scheduler import Scheduler
from app.runs.streaming import check_mode as check_stream_mode
from channel.contract import missing_implementations
from channel.errors import ChannelError
from channel.selection import ToolSelection
from channel.skills import SkillLibrary
from channel.slack import SlackAdapter
from channel.slack.surfaces import Surfaces
from storage import Store, StoreError, open_store

from .settings import (
    Settings,
    credential_shape_problems,
    describe_database,
    missing_report,
    missing_settings,
)

log = logging.getLogger(__name__)


class StartupError(Exception):
    """Configuration that cannot work; the message says what to fix."""


#: Seconds start-up waits for the store to open and migrate before giving up with a reason.
STORE_OPEN_TIMEOUT = 20.0


async def open_ready_store(settings: Settings) -> Store:
    """The store, connected and migrated, or StartupError naming DATABASE_URL/DATA_DIR and the reason."""
    try:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StartupError(
            f"DATA_DIR {settings.data_dir} cannot be created ({exc.strerror}): "
            "point DATA_DIR at a writable directory"
        ) from exc
    try:
        store = open_store(settings.resolved_database_url, pool_size=settings.resolved_database_pool_size)
    except ValueError as exc:
        raise StartupError(str(exc)) from exc
    what = describe_database(settings.resolved_database_url)
    try:
        async with asyncio.timeout(STORE_OPEN_TIMEOUT):
            await store.migrate()
    except (StoreError, OSError, TimeoutError) as exc:
        await store.close()
        why = f"no answer within {STORE_OPEN_TIMEOUT:g}s" if isinstance(exc, TimeoutError) else str(exc)
        raise StartupError(f"cannot open the store ({what}): {why}; check DATABASE_URL and DATA_DIR") from exc
    return store


@dataclass
class Service:
    settings: Settings
    store: Store
    adapter: SlackAdapter
    runner: Scheduler
    ingress: Ingress
    bolt: AsyncApp
    observer: Observer = field(default_factory=Observer)
    #: Click handlers by action id (``app.intake.interactions``); features register theirs in ``create``.
    interactions: Interactions = field(default_factory=Interactions)
    #: The agent file's MCP servers (started by ``create``, stopped by ``close`` and ``serve``).
    mcp: McpServers = field(default_factory=lambda: McpServers([]))
    approvals: Approvals | None = None  # cards, clicks, expiry (app.agent.approvals; asks share it)
    #: Fires due follow-ups into their tasks' inboxes (``app.runs.follow_ups``).
    follow_ups: FollowUpSweep | None = None
    #: Suggested prompts and thread titles for Slack's agent view (``app.intake.agent_view``).
    agent_view: AgentView | None = None
    #: Deliveries over Socket Mode (``SLACK_APP_TOKEN``; ``app.intake.socket_mode``), with the web app.
    socket: SocketModeIntake | None = None
    #: The runs' visible progress (``app.runs.progress``); the edge's process sets new conversations' status.
    progress: Progress | None = None
    #: The first Socket Mode URL, got by ``create`` (which thereby checked the app token).
    socket_url: str | None = None
    #: The ways in beside messages (``app.intake.shortcuts``, ``app.intake.slash_command``,
    #: ``app.intake.home``): the message shortcut, the slash command and its subcommands, App Home.
    shortcuts: Shortcuts | None = None
    slash_command: SlashCommand | None = None
    home: AppHome | None = None
    #: The HTTP edge (``app.intake.http``) and its aiohttp app.
    http: HttpEdge = field(init=False)
    web_app: web.Application = field(init=False)
    #: The loop the service was made on; ``serve`` runs the HTTP edge on a thread of its own.
    main: MainLoop = field(init=False, default_factory=MainLoop)
    _background: list[asyncio.Task[None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.web_app = self._web_app()

    @classmethod
    async def create(
        cls,
        settings: Settings,
        *,
        model: Model | None = None,
        hooks: RunHooks | None = None,
        owner: str | None = None,
        webhook: bool = True,
    ) -> Service:
        """Build everything and fail early, with a message naming the fix, on bad configuration.

        ``webhook=False`` (``python -m app run``) serves no requests, so needs no signing secret,
        and takes no Socket Mode deliveries either. The steps, in order: the configuration checked
        (:meth:`_Config.checked`), the store, the Slack adapter (:func:`_connect_adapter`), the tools
        (:func:`_select_tools`), the runs (:meth:`_Runs.build`), the instance registered, the intake
        (:meth:`_Intake.build`)."""
        config = await _Config.checked(settings, model, webhook)
        store = await open_ready_store(settings)
        observer = Observer()
        adapter = await _connect_adapter(settings, store, observer)
        parts = _Parts(settings, config, store, adapter, observer)
        selections = await _select_tools(parts)
        runs = _Runs.build(parts, selections, hooks, owner)
        await _register(parts, runs.runner)
        intake = _Intake.build(parts, runs)
        return cls(
            settings,
            store,
            adapter,
            runs.runner,
            intake.ingress,
            intake.bolt,
            observer=observer,
            interactions=intake.interactions,
            mcp=config.mcp,
            approvals=runs.approvals,
            follow_ups=runs.follow_ups,
            agent_view=runs.agent_view,
            socket=intake.socket,
            progress=config.progress,
            socket_url=config.socket_url,
            shortcuts=intake.ways.shortcuts,
            slash_command=intake.ways.command,
            home=intake.ways.home,
        )

    def _web_app(self) -> web.Application:
        socket = self.socket
        self.http = HttpEdge(
            bolt=self.bolt,
            signing_secret=self.settings.slack_signing_secret.get_secret_value(),
            max_body_bytes=self.settings.max_body_bytes,
            metrics_token=self.settings.metrics_token.get_secret_value(),
            ping=self.store.ping,
            metrics=self.observer.metrics.render,
            ack_gate=self.runner.ack_gate,
            on_startup=self._on_startup,
            on_shutdown=self._on_shutdown,
            slack_events=self.settings.http_events,
            socket_connected=(lambda: socket.connected) if socket is not None else None,
            events=event_acker(self.ingress, self.agent_view),
            main=self.main,
            oauth_callback=personal_wiring.callback_route(self.mcp.access) if self.mcp.access else None,
        )
        return self.http.app

    async def _on_startup(self) -> None:
        await self.runner.first_look()  # before serving: dead instances' and leftover work (then loops)
        sweeper = asyncio.create_task(self.runner.sweep_forever(self.settings.sweep_interval), name="sweeper")
        self._background.append(sweeper)
        if self.follow_ups is not None:  # due ones (late after downtime) fire at once, then each second
            self._background.append(asyncio.create_task(self.follow_ups.run_forever(), name="follow-ups"))
        # Conversations of instances that died (a crash before this restart included), at once.
        takeover = asyncio.create_task(self.runner.take_over_forever(), name="takeover")
        self._background.append(takeover)
        if self.socket is not None:
            self.socket.start(self.socket_url)
            log.info("taking Slack deliveries over Socket Mode")

    async def _on_shutdown(self) -> None:
        await self.drain(self.settings.shutdown_grace)

    async def drain(self, grace: float) -> None:
        """Stop taking work, let running turns finish for ``grace``; everything after it is bounded
        (``app.ops.shutdown``): a stalled Slack, model or store cannot hold the process."""
        if self.socket is not None:  # stop taking deliveries first; those being claimed are acked
            await bounded(self.socket.stop(), CANCEL_WAIT, "closing Socket Mode")
        for task in self._background:
            task.cancel()
        await bounded(asyncio.gather(*self._background, return_exceptions=True), CANCEL_WAIT, "background")
        self._background.clear()
        await self.runner.shutdown(grace, cancel_wait=CANCEL_WAIT)
        await bounded(self.interactions.idle(), CANCEL_WAIT, "clicks waiting for an access check")
        if self.approvals is not None:
            await bounded(self.approvals.idle(), CANCEL_WAIT, "approval card updates")
        if self.mcp.elicitor is not None:
            await bounded(self.mcp.elicitor.cards.idle(), CANCEL_WAIT, "MCP form card updates")
        if self.agent_view is not None:
            await bounded(self.agent_view.close(), 1.0, "agent view titles")  # of runs that just ended
        if self.home is not None:
            await bounded(self.home.close(), 1.0, "Home tabs being drawn")

    async def close(self) -> None:
        await self.drain(0)
        await self.mcp.stop()
        await self.adapter.close()
        await self.store.close()


# Service.create's builder steps, in the order it takes them.


@dataclass(frozen=True)
class _Config:
    """The configuration, checked before the store opens or Slack is asked anything but the first
    Socket Mode URL."""

    agent_file: AgentFile
    #: The agent file's MCP servers (not started yet).
    mcp: McpServers
    model: Model
    progress: Progress
    stream_mode: str
    socket_url: str | None
    #: The models of profiles that name their own (``[profiles.NAME] model``), by profile name.
    profile_models: dict[str, Model] = field(default_factory=dict)

    @classmethod
    async def checked(cls, settings: Settings, model: Model | None, webhook: bool) -> _Config:
        """Each check names its fix (StartupError); credentials' shapes before any network call."""
        try:
            agent_file = AgentFile.load(settings.resolved_agent_file, settings.mcp_config)
            # ${VAR} in MCP env and headers is expanded here: a missing variable stops the start, named.
            mcp = McpServers(agent_file.mcp, per_person=PersonalServer)
        except ValueError as exc:
            raise StartupError(str(exc)) from exc
        personal = personal_wiring.startup_problem(mcp, settings)  # MCP_TOKEN_KEY, PUBLIC_URL
        if personal:
            raise StartupError(personal)
        ephemeral = ephemeral_disk_warning(settings)
        if ephemeral:
            log.warning(ephemeral)
        model_name = settings.model or agent_file.model
        shape = credential_shape_problems(settings)  # before any network call: name what was pasted
        if shape:
            raise StartupError("\n".join(shape))
        try:
            socket_url = await first_socket_url(settings, serving=webhook)
        except SocketModeError as exc:
            raise StartupError(str(exc)) from exc
        needs_secret = webhook and settings.http_events  # in Socket Mode only, nothing to verify
        missing = missing_settings(settings, None if model is not None else model_name, webhook=needs_secret)
        if missing:
            raise StartupError(missing_report(missing))
        if settings.skills_dir is not None and not settings.skills_dir.is_dir():
            raise StartupError(
                f"SKILLS_DIR {settings.skills_dir} is not a directory: create it or unset SKILLS_DIR"
            )
        try:
            progress = Progress(settings.progress, settings.progress_emoji, agent_file.loading_messages)
            stream_mode = check_stream_mode(settings.stream)
            model = model if model is not None else build_model(model_name, settings)
            profile_models = {
                p.name: build_model(p.model, settings) for p in agent_file.profiles.named if p.model
            }
        except ValueError as exc:
            raise StartupError(str(exc)) from exc
        return cls(agent_file, mcp, model, progress, stream_mode, socket_url, profile_models)


async def _connect_adapter(settings: Settings, store: Store, observer: Observer) -> SlackAdapter:
    """The Slack adapter, its token checked (``auth.test``); the store is closed if it fails."""
    try:
        return await SlackAdapter.connect(
            token=settings.slack_bot_token.get_secret_value(),
            api_url=settings.slack_api_url,
            file_origins=settings.slack_file_origins,
            write_deadline=settings.write_deadline,
            on_call=observer.slack_call,
            in_flight=settings.write_in_flight,
        )
    except ChannelError as exc:
        await store.close()
        raise StartupError(auth_failure(exc, settings.slack_api_url)) from exc
    except BaseException:
        await store.close()
        raise


@dataclass(frozen=True)
class _Parts:
    """What every later step of ``Service.create`` builds on."""

    settings: Settings
    config: _Config
    store: Store
    adapter: SlackAdapter
    observer: Observer


async def _select_tools(parts: _Parts) -> dict[str, ToolSelection]:
    """The tools the agent may call, by profile (``DEFAULT`` first): the adapter's, the skills', the
    MCP servers' (started here) narrowed to the agent file's and each profile's ``tools`` and
    ``mcp``; on a StartupError what was opened is closed."""
    mcp, adapter = parts.config.mcp, parts.adapter
    try:
        missing = missing_implementations(adapter)
        if missing:
            raise StartupError(f"adapter claims features it does not implement: {missing}")
        skills = SkillLibrary.load(parts.settings.resolved_skills_dir)
        settings = parts.settings
        budgets = Budgets(parts.store, settings.user_daily_token_budget, settings.daily_token_budget)
        elicitor = Elicitor(parts.store, adapter, settings.mcp_elicitation_timeout_s)
        mcp.attach(parts.config.model, budgets, elicitor)
        mcp.elicitor = elicitor
        mcp.access = personal_wiring.attach(mcp, parts.settings, parts.store, adapter.tell_privately)
        # A server that does not start only makes its own tools absent (logged); the app serves.
        await mcp.start()
        selections: dict[str, ToolSelection] = {}
        profiles = parts.config.agent_file.profiles.all()
        for profile in profiles:
            try:
                selections[profile.name] = profile_tools(
                    profile, adapter.features.enabled(), skills, mcp.tools, mcp.unavailable()
                )
            except ValueError as exc:
                where = "" if profile.name == DEFAULT else f"profile {profile.name}: "
                raise StartupError(where + str(exc)) from exc

        def tools_changed() -> None:
            # Each profile's sessions offer from its selection: tool_search finds the new list next step.
            for profile in profiles:
                selections[profile.name].host_tools = profile_host_tools(profile, mcp.tools)

        mcp.on_change = tools_changed
        return selections
    except StartupError:
        await mcp.stop()
        await adapter.close()
        await parts.store.close()
        raise


@dataclass(frozen=True)
class _Runs:
    """The runs' side: the agent, the executor and the scheduler, approvals and asks, follow-ups."""

    agent_view: AgentView
    approvals: Approvals
    asks: Asks
    runner: Scheduler
    follow_ups: FollowUpSweep
    #: Who is served where (clicks ask it too).
    admission: Admission

    @classmethod
    def build(
        cls, parts: _Parts, selections: dict[str, ToolSelection], hooks: RunHooks | None, owner: str | None
    ) -> _Runs:
        settings, config, store, observer = parts.settings, parts.config, parts.store, parts.observer
        # Observer first: its log scope (task, run) then wraps progress and the caller's hooks.
        agent_view = AgentView(parts.adapter, config.agent_file.prompts)
        sessions = SessionStatuses(store, settings.agent_sessions)  # Slack's agent sessions, where offered
        run_hooks = combine(
            observer.hooks(), config.progress.hooks(), agent_view.hooks(), sessions.hooks(), hooks
        )
        approvals = Approvals.from_settings(store, parts.adapter, settings)
        tools = selections[DEFAULT]
        mcp_sweep = [config.mcp.access.sweep] if config.mcp.access is not None else []  # expired links
        warn_unmatched_approval(config.agent_file.approval, tools, config.mcp.unavailable())
        ack_gate = AckGate()  # the ack path's right of way over run starts and model requests
        timing = ModelTiming(observer, ack_gate)
        agent = _build_agent(parts, run_hooks, timing)
        admission = _admission(parts)
        approvals.deciders = admission.deciders  # the profile's approvers
        budgets = Budgets(store, settings.user_daily_token_budget, settings.daily_token_budget)
        policies = Policies(
            admission,
            {
                p.name: Policy.of(
                    p,
                    agent if p.name == DEFAULT else _build_agent(parts, run_hooks, timing, p),
                    selections[p.name],
                    budgets,
                    config.agent_file,
                )
                for p in config.agent_file.profiles.all()
            },
        )
        executor = RunExecutor(
            store=store,
            adapter=parts.adapter,
            agent=agent,
            tools=tools,
            agent_file=config.agent_file,
            data_dir=settings.data_dir,
            limits=RunLimits.of(settings),
            hooks=run_hooks,
            approvals=approvals,
            asks=(asks := Asks(approvals, name_of=parts.adapter.user)),  # channel_ask & co.: approvals' rules
            budgets=budgets,
            compactor=Compactor(config.model, settings.compact_after_tokens, timing.request),
            usage_footer=settings.usage_footer,
            stream=config.stream_mode == "auto",
            feedback=True,
            policies=policies,
            name_of=parts.adapter.user,  # who stopped a turn, as the model is told
        )
        runner = Scheduler(
            store=store,
            executor=executor,
            lease_ttl=settings.lease_ttl,
            max_concurrent_runs=settings.max_concurrent_runs,
            user_max_runs=settings.user_max_runs,
            owner=owner,
            claim_retention=settings.claim_retention_days * 86_400,
            on_sweep=sweep_steps(approvals.sweep, asks.sweep, FileExpiry.of(settings).sweep, *mcp_sweep),
            ack_gate=ack_gate,
        )
        approvals.wake = runner.notify
        executor.recheck = Recheck.of(settings)  # a fired follow-up's person, checked again
        if config.mcp.access is not None:
            config.mcp.access.wake = runner.notify  # an authorization decided resumes its task
        store.inline_when(runner.nothing_else_to_do)  # SQLite: a job on the loop's thread while one run works
        follow_ups = FollowUpSweep(
            store, wake=runner.notify, access=Access.of(settings), on_fired=observer.follow_ups_fired
        )
        follow_ups.on_pending = observer.metrics.follow_ups_pending.set  # the /metrics gauge
        return cls(agent_view, approvals, asks, runner, follow_ups, admission)


def _admission(parts: _Parts) -> Admission:
    """Who is served where: access lists, organisation, guests and the profiles' ``users``."""
    adapter = parts.adapter
    return Admission.of(
        parts.settings, parts.config.agent_file.profiles, adapter.directory, adapter.identity.team_id
    )


def _build_agent(
    parts: _Parts, run_hooks: RunHooks, timing: ModelTiming, profile: Profile | None = None
) -> Agent[RunDeps, Any]:
    """The agent: the model, the channel's tools and the MCP servers', gated by the agent file's
    approval rules (``profile``'s model and approvals when given), each request timed."""
    config, observer = parts.config, parts.observer
    approval = config.agent_file.approval if profile is None else profile.approval
    model = config.model if profile is None else config.profile_models.get(profile.name, config.model)
    # The file's approval_default holds in every profile; a profile's approval globs replace the file's.
    policy = ApprovalPolicy(approval, config.agent_file.approval_default)

    def mcp_tool(name: str) -> McpTool | None:
        found = config.mcp.lookup(name)
        return found[1] if found is not None else None

    def gate(every: AbstractToolset[RunDeps]) -> ApprovalGate:
        return ApprovalGate(every, policy, parts.store, mcp_tool=mcp_tool)

    return build_agent(
        model,
        on_tool=run_hooks.on_tool,
        on_tool_end=observer.tool_end,
        toolsets=(
            [McpToolset(config.mcp, run_hooks.on_tool, observer.tool_end, config.progress.tool_progress)]
            if config.mcp
            else []
        ),
        gate=gate if policy.gates_anything(bool(config.mcp)) else None,
        capabilities=[timing],
    )


async def _register(parts: _Parts, runner: Scheduler) -> None:
    """From here until close, other instances can tell at once whether this one is alive."""
    try:
        await parts.store.register_instance(runner.owner, now=time.time())
    except StoreError as exc:
        await parts.adapter.close()
        await parts.store.close()
        raise StartupError(f"cannot register this instance with the store: {exc}") from exc


@dataclass(frozen=True)
class _Intake:
    """What takes Slack's deliveries and clicks: the ingress, the click routes, Bolt, Socket Mode."""

    ingress: Ingress
    interactions: Interactions
    bolt: AsyncApp
    socket: SocketModeIntake | None
    ways: _WaysIn

    @classmethod
    def build(cls, parts: _Parts, runs: _Runs) -> _Intake:
        settings, adapter, observer = parts.settings, parts.adapter, parts.observer
        ingress = Ingress(
            store=parts.store,
            scheduler=runs.runner,
            bot=adapter.identity,
            settings=settings,
            on_result=observer.delivery,
            on_external=ExternalNotice(adapter),
        )
        approving = frozenset({APPROVE, DENY, ASK_APPROVE, ASK_DENY})
        interactions = Interactions(tell=runs.approvals.tell, admit=admit_by(runs.admission, approving))
        runs.approvals.register(interactions.on)
        runs.asks.register(interactions.on)
        if parts.config.mcp.elicitor is not None:
            parts.config.mcp.elicitor.register(interactions.on)
        feedback = Feedback(
            parts.store, ref_of=adapter.clicked_ref, name_of=adapter.known_user, on_feedback=observer.feedback
        )
        interactions.on(feedback.action_id, feedback.click)
        ways = _WaysIn.build(parts, runs, ingress, interactions)
        bolt = build_bolt(settings, ingress, interactions, runs.agent_view, ways.command.handle)
        socket = None
        if parts.config.socket_url is not None:
            handle = event_handler(ingress, runs.agent_view)
            socket = SocketModeIntake(
                settings,
                handle,
                interactions.handle,
                ack_gate=runs.runner.ack_gate,
                on_command=ways.command.handle,
            )
        return cls(ingress, interactions, bolt, socket, ways)


@dataclass(frozen=True)
class _WaysIn:
    """The message shortcut, the slash command and the App Home tab, wired to the intake."""

    shortcuts: Shortcuts
    command: SlashCommand
    home: AppHome

    @classmethod
    def build(cls, parts: _Parts, runs: _Runs, ingress: Ingress, interactions: Interactions) -> _WaysIn:
        settings, adapter = parts.settings, parts.adapter
        surfaces = Surfaces(adapter.link)
        personal = Personal(parts.store, budget=settings.user_daily_token_budget)
        links = surfaces.thread_link
        home = AppHome(
            settings,
            personal,
            links,
            publish=surfaces.publish_home,
            respond=surfaces.respond,
            tell=interactions.tell,
        )
        interactions.on(CANCEL_FOLLOW_UP, home.cancel_click)
        runs.agent_view.home = home.opened

        async def name_of(user: str) -> str:
            return (await adapter.lookups.user(user))[0]

        shortcuts = Shortcuts(ingress, surfaces.respond, name_of)
        interactions.on_shortcut = shortcuts.handle
        command = SlashCommand(settings, personal, links, team_id=adapter.identity.team_id)
        command.add("stop", StopCommand(parts.store, runs.runner), STOP_SUMMARY)  # a person's Stop
        if parts.config.mcp.personal:  # per-person MCP servers: a person can forget their own tokens
            names = [s.name for s in parts.config.mcp.personal]
            command.add("disconnect", disconnect_subcommand(parts.store, names), DISCONNECT_SUMMARY)
        return cls(shortcuts, command, home)
