"""The process: store, Slack adapter, agent, scheduler and the aiohttp web app, wired together.

Bolt's ``AsyncApp`` stays at the edge: it verifies signatures (401), answers
``url_verification`` and ``ssl_check``, then our middleware turns every
``event_callback`` into a durable inbox item and answers 200 itself — Bolt's
listener machinery (which acks before work and would 404 unmatched events) is
not used.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hmac
import logging
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from pydantic_ai.models import Model
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp
from slack_bolt.middleware.async_middleware import AsyncMiddleware
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

from app.agent.agent_file import AgentFile
from app.agent.approvals import ApprovalGate, Approvals, gated
from app.agent.mcp.servers import McpServers
from app.agent.mcp.toolset import McpToolset
from app.agent.runtime import build_agent, build_model
from app.agent.usage import Budgets
from app.intake.agent_view import AGENT_EVENTS, AgentView
from app.intake.ingress import Ingress
from app.intake.interactions import Interactions
from app.intake.router import BotIdentity
from app.intake.socket_mode import SocketModeError, SocketModeIntake, open_connection_url
from app.ops.check import auth_failure
from app.ops.metrics import CONTENT_TYPE_LATEST
from app.ops.observe import Observer, TimedModel, combine
from app.ops.paas import ephemeral_disk_warning
from app.runs.ack_gate import AckGate
from app.runs.compaction import Compactor
from app.runs.feedback import Feedback
from app.runs.progress import Progress
from app.runs.run import RunExecutor, RunHooks
from app.runs.scheduler import Scheduler
from app.runs.streaming import check_mode as check_stream_mode
from channel.contract import missing_implementations
from channel.errors import ChannelError
from channel.selection import select_tools
from channel.skills import SkillLibrary
from channel.slack import SlackAdapter
from storage import Store, StoreError, open_store

from .settings import WHERE_TO_GET, Settings, app_token_problem, describe_database, missing_settings

log = logging.getLogger(__name__)


class StartupError(Exception):
    """Configuration that cannot work; the message says what to fix."""


#: The answer of POST /slack/events when deliveries come over Socket Mode only.
HTTP_EVENTS_OFF = (
    "this app takes Slack deliveries over Socket Mode (SLACK_APP_TOKEN is set); "
    "set SLACK_HTTP_EVENTS=true to take them over HTTP as well"
)
#: Seconds start-up waits for the store to open and migrate before giving up with a reason.
STORE_OPEN_TIMEOUT = 20.0


def missing_report(missing: list[str]) -> str:
    """Every missing required setting, each with where to get it, and what to do next."""
    width = max(len(name) for name in missing)
    count = f"{len(missing)} required setting{'s are' if len(missing) > 1 else ' is'} not set:"
    rows = [f"  {name:<{width}}  {WHERE_TO_GET[name]}" for name in missing]
    them = "them" if len(missing) > 1 else "it"
    advice = f"Set {them} in the environment or in ./.env (NAME=value lines), then run `python -m app check`."
    return "\n".join([count, *rows, advice])


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
        store = open_store(settings.resolved_database_url)
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


class _Ingest(AsyncMiddleware):
    """Every event_callback becomes an inbox item and every click goes to ``app.interactions``;
    nothing reaches Bolt's listeners."""

    def __init__(
        self,
        handle: Callable[[dict[str, Any]], Awaitable[tuple[int, str]]],
        interactions: Interactions | None = None,
    ) -> None:
        self._handle = handle
        self._interactions = interactions

    async def async_process(
        self, *, req: AsyncBoltRequest, resp: BoltResponse, next: Callable[[], Awaitable[BoltResponse]]
    ) -> BoltResponse:
        body = req.body
        if not isinstance(body, dict) or not body:
            return BoltResponse(status=400, body="malformed request body")
        if body.get("type") == "event_callback":
            status, text = await self._handle(body)
            return BoltResponse(status=status, body=text)
        if body.get("type") in ("url_verification", "ssl_check") or "ssl_check" in body:
            return await next()
        if body.get("type") == "block_actions" and self._interactions is not None:
            status, text = await self._interactions.handle(body)
            return BoltResponse(status=status, body=text)
        # Other interactivity, slash commands, unknown envelope types: acknowledge, do nothing.
        return BoltResponse(status=200, body="")


def event_handler(
    ingress: Ingress, agent_view: AgentView | None
) -> Callable[[dict[str, Any]], Awaitable[tuple[int, str]]]:
    """What an ``event_callback`` body becomes, over HTTP and over Socket Mode alike: ``(status, reason)``."""

    async def handle(body: dict[str, Any]) -> tuple[int, str]:
        event = body.get("event")
        if agent_view is not None and isinstance(event, dict) and event.get("type") in AGENT_EVENTS:
            await agent_view.event(event)  # then logged (and ignored) by the ingress like any event
        result = await ingress.handle(body)
        return result.status, "" if result.status == 200 else result.reason

    return handle


def build_bolt(
    settings: Settings,
    ingress: Ingress,
    interactions: Interactions | None = None,
    agent_view: AgentView | None = None,
) -> AsyncApp:
    handle = event_handler(ingress, agent_view)
    # The token is passed as is, not through an `authorize` function: Bolt then warns that "`token`
    # (or SLACK_BOT_TOKEN env variable) will be ignored", which reads as if the user's token were.
    # Bolt's authorization never runs anyway: _Ingest answers every event and interaction before
    # it, and url_verification and ssl_check need none.
    return AsyncApp(
        token=settings.slack_bot_token.get_secret_value(),
        signing_secret=settings.slack_signing_secret.get_secret_value(),
        before_authorize=_Ingest(handle, interactions),
        process_before_response=True,
        ignoring_self_events_enabled=False,
        raise_error_for_unhandled_request=False,
    )


@dataclass
class Service:
    settings: Settings
    store: Store
    adapter: SlackAdapter
    #: The scheduler (named for what it does for the process: it runs tasks).
    runner: Scheduler
    ingress: Ingress
    bolt: AsyncApp
    observer: Observer = field(default_factory=Observer)
    #: Click handlers by action id (``app.interactions``); features register theirs in ``create``.
    interactions: Interactions = field(default_factory=Interactions)
    #: The agent file's MCP servers (started by ``create``, stopped by ``close`` and ``serve``).
    mcp: McpServers = field(default_factory=lambda: McpServers([]))
    #: Approval cards, clicks and expiry (``app.approvals``).
    approvals: Approvals | None = None
    #: Suggested prompts and thread titles for Slack's agent view (``app.agent_view``).
    agent_view: AgentView | None = None
    #: Deliveries over Socket Mode (``SLACK_APP_TOKEN``), started and stopped with the web app.
    socket: SocketModeIntake | None = None
    #: The first Socket Mode URL, fetched by ``create`` (which thereby checked the app token).
    socket_url: str | None = None
    web_app: web.Application = field(init=False)
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
        and takes no Socket Mode deliveries either."""
        try:
            agent_file = AgentFile.load(settings.resolved_agent_file)
            # ${VAR} in MCP env and headers is expanded here: a missing variable stops the start, named.
            mcp = McpServers(agent_file.mcp)
        except ValueError as exc:
            raise StartupError(str(exc)) from exc
        ephemeral = ephemeral_disk_warning(settings)
        if ephemeral:
            log.warning(ephemeral)
        model_name = settings.model or agent_file.model
        socket_mode = webhook and settings.socket_mode
        problem = app_token_problem(settings.slack_app_token.get_secret_value()) if socket_mode else None
        if webhook and not settings.socket_mode and not settings.http_events:
            problem = "SLACK_HTTP_EVENTS=false without SLACK_APP_TOKEN leaves Slack no way to deliver events"
        if problem:
            raise StartupError(problem)
        needs_secret = webhook and settings.http_events
        missing = missing_settings(settings, None if model is not None else model_name, webhook=needs_secret)
        if missing:
            raise StartupError(missing_report(missing))
        if settings.skills_dir is not None and not settings.skills_dir.is_dir():
            raise StartupError(
                f"SKILLS_DIR {settings.skills_dir} is not a directory: create it or unset SKILLS_DIR"
            )
        try:
            progress = Progress(settings.progress, settings.progress_emoji)
            stream_mode = check_stream_mode(settings.stream)
        except ValueError as exc:
            raise StartupError(str(exc)) from exc
        if model is None:
            try:
                model = build_model(model_name, settings)
            except ValueError as exc:
                raise StartupError(str(exc)) from exc
        socket_url = None
        if socket_mode:  # checks the app token before anything is opened
            try:
                token = settings.slack_app_token.get_secret_value()
                socket_url = await open_connection_url(token, settings.slack_api_url)
            except SocketModeError as exc:
                raise StartupError(str(exc)) from exc
        store = await open_ready_store(settings)
        observer = Observer()
        try:
            adapter = await SlackAdapter.connect(
                token=settings.slack_bot_token.get_secret_value(),
                api_url=settings.slack_api_url,
                file_origins=settings.slack_file_origins,
                write_deadline=settings.write_deadline,
                on_call=observer.slack_call,
            )
        except ChannelError as exc:
            await store.close()
            raise StartupError(auth_failure(exc, settings.slack_api_url)) from exc
        except BaseException:
            await store.close()
            raise
        try:
            missing = missing_implementations(adapter)
            if missing:
                raise StartupError(f"adapter claims features it does not implement: {missing}")
            skills = SkillLibrary.load(settings.resolved_skills_dir)
            # A server that does not start only makes its own tools absent (logged); the app serves.
            await mcp.start()
            try:
                tools = select_tools(
                    adapter.features.enabled(), agent_file.tools, skills, mcp.tools, mcp.unavailable()
                )
            except ValueError as exc:
                raise StartupError(str(exc)) from exc
        except StartupError:
            await mcp.stop()
            await adapter.close()
            await store.close()
            raise
        # Observer first: its log scope (task, run) then wraps progress and the caller's hooks.
        agent_view = AgentView(adapter, agent_file.prompts)
        run_hooks = combine(observer.hooks(), progress.hooks(), agent_view.hooks(), hooks)
        approvals = Approvals(
            store=store, adapter=adapter, approvers=settings.approvers, ttl=settings.approval_ttl
        )
        _warn_unmatched_approval(agent_file.approval, tools)
        timed = TimedModel(model, observer)
        agent = build_agent(
            timed,
            on_tool=run_hooks.on_tool,
            on_tool_end=observer.tool_end,
            toolsets=[McpToolset(mcp, run_hooks.on_tool, observer.tool_end)] if mcp else [],
            gate=(lambda every: ApprovalGate(every, agent_file.approval, store))
            if agent_file.approval
            else None,
        )
        executor = RunExecutor(
            store=store,
            adapter=adapter,
            agent=agent,
            tools=tools,
            agent_file=agent_file,
            data_dir=settings.data_dir,
            run_timeout=settings.run_timeout,
            history_limit=settings.history_limit,
            hooks=run_hooks,
            approvals=approvals,
            budgets=Budgets(store, settings.user_daily_token_budget, settings.daily_token_budget),
            compactor=Compactor(timed, settings.compact_after_tokens),
            usage_footer=settings.usage_footer,
            stream=stream_mode == "auto",
            feedback=True,
        )
        runner = Scheduler(
            store=store,
            executor=executor,
            lease_ttl=settings.lease_ttl,
            max_concurrent_runs=settings.max_concurrent_runs,
            owner=owner,
            claim_retention=settings.claim_retention_days * 86_400,
            on_sweep=approvals.sweep,  # approvals open longer than APPROVAL_TTL expire
            ack_gate=AckGate(),
        )
        approvals.wake = runner.notify
        try:
            # From here until close, other instances can tell at once whether this one is alive.
            await store.register_instance(runner.owner, now=time.time())
        except StoreError as exc:
            await adapter.close()
            await store.close()
            raise StartupError(f"cannot register this instance with the store: {exc}") from exc
        ingress = Ingress(
            store=store,
            scheduler=runner,
            bot=BotIdentity(adapter.identity.user_id, adapter.identity.bot_id),
            settings=settings,
            on_result=observer.delivery,
        )
        interactions = Interactions()
        approvals.register(interactions.on)
        feedback = Feedback(store, name_of=_display_name(adapter), on_feedback=observer.feedback)
        interactions.on(feedback.action_id, feedback.click)
        bolt = build_bolt(settings, ingress, interactions, agent_view)
        socket = None
        if socket_url is not None:
            socket = SocketModeIntake(
                app_token=settings.slack_app_token.get_secret_value(),
                api_url=settings.slack_api_url,
                on_event=event_handler(ingress, agent_view),
                on_interaction=interactions.handle,
                ack_gate=runner.ack_gate,
            )
        return cls(
            settings,
            store,
            adapter,
            runner,
            ingress,
            bolt,
            observer=observer,
            interactions=interactions,
            mcp=mcp,
            approvals=approvals,
            agent_view=agent_view,
            socket=socket,
            socket_url=socket_url,
        )

    def _web_app(self) -> web.Application:
        app = web.Application(client_max_size=self.settings.max_body_bytes)
        app.router.add_post("/slack/events", self._events)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        app.on_startup.append(self._on_startup)
        app.on_shutdown.append(self._on_shutdown)
        return app

    async def _events(self, request: web.Request) -> web.StreamResponse:
        if not self.settings.http_events:
            return web.Response(status=404, text=HTTP_EVENTS_OFF)
        # Counted until answered: run start-ups wait for a moment without acks in flight.
        gate = self.runner.ack_gate
        with gate.acking() if gate is not None else contextlib.nullcontext():
            try:
                bolt_request = await to_bolt_request(request)
            except ValueError:  # Bolt parses the body eagerly; malformed JSON or form data lands here
                return web.Response(status=400, text="malformed request body")
            return await to_aiohttp_response(await self.bolt.async_dispatch(bolt_request))

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def _readyz(self, _: web.Request) -> web.Response:
        try:
            await self.store.ping()
        except StoreError as exc:
            return web.json_response({"ok": False, "store": str(exc)}, status=503)
        if self.socket is not None:
            return web.json_response({"ok": True, "socket_mode": self.socket.connected})
        return web.json_response({"ok": True})

    async def _metrics(self, request: web.Request) -> web.Response:
        token = self.settings.metrics_token.get_secret_value()
        if token and not hmac.compare_digest(request.headers.get("Authorization", ""), f"Bearer {token}"):
            return web.Response(status=401, text="metrics need Authorization: Bearer $METRICS_TOKEN")
        return web.Response(
            body=self.observer.metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def _on_startup(self, _: web.Application) -> None:
        # Resume whatever a previous process left: pending inboxes, open effects, expired leases.
        sweeper = asyncio.create_task(self.runner.sweep_forever(self.settings.sweep_interval), name="sweeper")
        self._background.append(sweeper)
        # Conversations of instances that died (a crash before this restart included), at once.
        takeover = asyncio.create_task(self.runner.take_over_forever(), name="takeover")
        self._background.append(takeover)
        if self.socket is not None:
            self.socket.start(self.socket_url)
            log.info("taking Slack deliveries over Socket Mode")

    async def _on_shutdown(self, _: web.Application) -> None:
        await self.drain(self.settings.shutdown_grace)

    async def drain(self, grace: float) -> None:
        if self.socket is not None:  # stop taking deliveries first; those being claimed are acked
            await self.socket.stop()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._background.clear()
        await self.runner.shutdown(grace)
        if self.approvals is not None:
            await self.approvals.idle()
        if self.agent_view is not None:
            await self.agent_view.close()  # titles of runs that just ended

    async def close(self) -> None:
        await self.drain(0)
        await self.mcp.stop()
        await self.adapter.close()
        await self.store.close()


def _warn_unmatched_approval(globs: tuple[str, ...], tools: Any) -> None:
    """A glob in ``approval`` that matches no tool is likely a typo (or its MCP server is down)."""
    names = [s.name for s in tools.channel_tools] + [t.name for t in tools.host_tools]
    for glob in globs:
        if not any(gated((glob,), name) for name in names):
            log.warning("approval entry %r matches no tool offered now; check its spelling", glob)


def _display_name(adapter: SlackAdapter) -> Callable[[str], Awaitable[str]]:
    async def name_of(user_id: str) -> str:
        name, _ = await adapter.user(user_id)
        return name if name != "someone" else ""

    return name_of


async def serve(
    settings: Settings, *, model: Model | None = None, ready: asyncio.Event | None = None
) -> None:
    """Run the HTTP server until SIGTERM/SIGINT, then drain within ``SHUTDOWN_GRACE`` and exit."""
    service = await Service.create(settings, model=model)
    runner = web.AppRunner(service.web_app, handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host=settings.host, port=settings.port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        await service.adapter.close()
        await service.store.close()
        raise StartupError(_listen_error(settings, exc)) from exc
    log.info("listening on %s port %s", settings.host, settings.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready.set()
    await stop.wait()
    started = time.monotonic()
    log.info("shutting down: draining running turns for up to %.0fs", settings.shutdown_grace)
    await site.stop()  # stop accepting first
    await runner.cleanup()  # runs on_shutdown → drain
    await service.mcp.stop()
    await service.adapter.close()
    await service.store.close()
    log.info("stopped after %.1fs", time.monotonic() - started)


def _listen_error(settings: Settings, exc: OSError) -> str:
    return listen_error(settings.host, settings.port, exc)


def listen_error(host: str, port: int, exc: OSError) -> str:
    """Why listening on ``host:port`` failed, in one line naming the setting to change."""
    where = f"{host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return f"port {port} is already in use ({where}): stop the other server or set another PORT"
    if exc.errno == errno.EACCES:
        return f"no permission to listen on {where}: use a PORT above 1023"
    if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
        return f"cannot listen on {where}: HOST is not an address of this machine (try 0.0.0.0 or 127.0.0.1)"
    return f"cannot listen on {where}: {exc.strerror or exc}; check HOST and PORT"
