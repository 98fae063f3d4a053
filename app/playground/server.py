"""``Playground``: the Slack emulator, the real app pointed at it, and the page that drives both.

Three servers in one process, all over real HTTP:

- the emulator (``emulator.FakeSlack``) on a loopback port: the app's Web API and file host;
- the app itself (``app.service.Service``, exactly as ``serve`` builds it, with the agent file,
  skills and MCP servers) on another loopback port, receiving signed Events API deliveries and
  signed ``block_actions`` clicks on ``/slack/events``;
- the page on ``HOST:PORT`` (``page.Page``): a person's post is stored in the workspace and
  delivered to the app as Slack would deliver it; a click on a button becomes the interaction
  Slack would post. The page follows the workspace live over server-sent events
  (``/api/events``): after every Web API call the app makes, each open page gets a fresh
  snapshot (``view.snapshot``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import mimetypes
import re
import secrets
import signal
import time
from typing import Any

import aiohttp
from aiohttp import web
from pydantic_ai.models import Model

from app.intake.http import listen_error
from app.runs.run import RunHooks
from app.service import Service, StartupError
from threadbound_emulator import DEFAULT_SCOPES, Call, FakeSlack
from threadbound_emulator import events as slack_events
from threadbound_emulator.browser import links_for, open_link

from ..settings import Settings
from .demo import EXAMPLES
from .follow_ups import FollowUpBoard, cancel_earlier
from .guard import Guard
from .page import Page
from .view import Retraction, ViewState, message_view, snapshot
from .ways_in import WaysIn
from .workspace import (
    GENERAL,
    PEOPLE,
    Delivery,
    free_local_port,
    ignored_settings,
    personal_settings,
    playground_settings,
    seed,
    slack_text,
)

log = logging.getLogger(__name__)
#: The empty conversation's example prompts, as the page gets them (``demo.EXAMPLES``; "a file" is
#: sent with a small text file the page makes).
EXAMPLE_PROMPTS = [
    {
        "shows": shows,
        "text": text,
        "file": {"name": "notes.txt", "text": "Notes from the playground.\nLaunch: March 3rd.\n"}
        if shows == "a file"
        else None,
    }
    for shows, text in EXAMPLES
]
#: Web API methods by which the bot posts in a thread (Slack then clears the thread's status).
_POSTS = frozenset({"chat.postMessage", "chat.startStream", "files.completeUploadExternal"})


class Playground:
    """See the module docstring. ``async with Playground(settings) as pg:`` then open ``pg.url``."""

    def __init__(
        self,
        settings: Settings,
        *,
        model: Model | None = None,
        hooks: RunHooks | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.settings = settings
        self.model = model
        self.hooks = hooks
        self.host = host
        self.port = port
        # Random per start, like the signing secret: a web page cannot call the emulator's Web API.
        # Declared an agent (assistant:write): threads show their agent session, with a Stop button.
        scopes = [*DEFAULT_SCOPES, "assistant:write"]
        self.slack = FakeSlack(token=f"xoxb-playground-{secrets.token_hex(12)}", scopes=scopes)
        self.secret = secrets.token_hex(16)
        #: What the page carries on every API call (``guard.TOKEN_HEADER``); embedded in its HTML.
        self.page_token = secrets.token_urlsafe(24)
        self.service: Service | None = None
        self.app_url = ""
        self.view = ViewState(people=[uid for uid, *_ in PEOPLE])
        self._version = 0
        self._changed = asyncio.Event()
        self._closing = False
        #: Scheduled follow-ups under their threads, and the demo clock's fast-forward.
        self.board = FollowUpBoard()
        self._deleting: dict[int, Retraction] = {}
        self._runners: list[web.AppRunner] = []
        self._http: aiohttp.ClientSession | None = None
        self._watch: asyncio.Task[None] | None = None
        #: The shortcut, the slash command and the Home tab (``ways_in``).
        self.ways = WaysIn(self.slack, self._post_to_app, self.secret, settings.slash_command, self._notify)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> Playground:
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def _start(self) -> None:
        slack = self.slack
        slack.start_clock_at(time.time())  # ts never repeat across restarts: the store keeps its claims
        await slack.start()
        seed(slack)
        slack.observe(self._before_call)
        slack.on_handled(self._after_call)
        settings = playground_settings(self.settings, slack, self.secret)
        # Per-person MCP servers send people back to the app's own port: known before it starts.
        app_port = free_local_port()
        settings = settings.model_copy(update=personal_settings(settings, app_port))
        self.service = await Service.create(settings, model=self.model, hooks=self.hooks)
        # Before the sweep starts (it starts with the page's app): the workspace is new, the store is not.
        if forgotten := await cancel_earlier(self.service.store, time.time()):
            log.info(
                "playground: cancelled %d follow-ups of an earlier session (their threads are gone)",
                forgotten,
            )
        if self.service.follow_ups is not None:
            # Fast-forward moves the demo clock: the sweep fires by it and follow-ups are scheduled by
            # it, so one asked for in 20 minutes after a fast-forward still waits 20 (demo) minutes.
            self.service.follow_ups.clock = self.board.clock.now
            self.service.runner.executor.follow_up_clock = self.board.clock.now
        await self._profiles()
        self._watch = asyncio.create_task(self._watch_follow_ups(), name="playground-follow-ups")
        self.app_url = f"http://127.0.0.1:{await self._serve(self.service.web_app, '127.0.0.1', app_port)}"
        self._http = aiohttp.ClientSession()
        page = Page(self, Guard(self.page_token, self.host)).app()
        try:
            self.port = await self._serve(page, self.host, self.port)
        except OSError as exc:
            raise StartupError(listen_error(self.host, self.port, exc)) from exc

    async def _profiles(self) -> None:
        """Which profile of the agent file each conversation runs under (its header shows it)."""
        assert self.service is not None
        for channel in list(self.slack.channels):
            policy = await self.service.runner.executor.policy(channel)
            self.view.profiles[channel] = policy.profile.name

    async def _serve(self, app: web.Application, host: str, port: int) -> int:
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        self._runners.append(runner)
        await web.TCPSite(runner, host, port).start()
        return int(runner.addresses[0][1])

    async def stop(self) -> None:
        self._closing = True
        self._notify()
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        for runner in reversed(self._runners):
            await runner.cleanup()  # the app's on_shutdown drains its running turns
        self._runners.clear()
        if self._http is not None:
            await self._http.close()
            self._http = None
        if self.service is not None:
            await self.service.close()
            self.service = None
        await self.slack.stop()

    async def __aenter__(self) -> Playground:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}/"

    # ------------------------------------------------------------------ workspace changes

    def _notify(self) -> None:
        self._version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    def _before_call(self, call: Call) -> None:
        # A deletion removes the message: remember what it said, to show a trace once it succeeds.
        if call.method != "chat.delete":
            return
        channel, ts = str(call.params.get("channel") or ""), str(call.params.get("ts") or "")
        message = self.slack.find(channel, ts)
        if message is not None and self.slack.is_bots(message):
            thread = str(message.get("thread_ts") or "")
            self._deleting[id(call)] = Retraction(channel, ts, thread, str(message.get("text") or ""))

    def _after_call(self, call: Call) -> None:
        if call.method == "response_url" and call.response is not None:
            self.ways.responded(str(call.params.get("url") or ""), call.response)
        gone = self._deleting.pop(id(call), None)
        ok = call.response is not None and call.response.get("ok")
        if gone is not None and ok and self.slack.find(gone.channel, gone.ts) is None:
            self.view.retractions.append(gone)
        thread = str(call.params.get("thread_ts") or "")
        if ok and thread and call.method in _POSTS:
            channel = str(call.params.get("channel") or call.params.get("channel_id") or "")
            self.view.posts[(channel, thread)] = len(self.slack.statuses)
        self._notify()

    @property
    def closing(self) -> bool:
        return self._closing

    def snapshot(self) -> dict[str, Any]:
        state = self.board.attach(snapshot(self.slack, self.view, self._version))
        state["examples"] = EXAMPLE_PROMPTS
        state["home"] = {person: self.ways.home(person) for person in self.view.people}
        state["slash_command"] = self.ways.command_name
        return state

    async def _watch_follow_ups(self) -> None:
        while self.service is not None:
            try:
                if await self.board.refresh(self.service.store):
                    self._notify()
            except Exception:
                log.warning("could not read the follow-ups", exc_info=True)
            await asyncio.sleep(0.5)

    async def fast_forward(self) -> dict[str, Any]:
        """Move the demo clock past the next follow-up, which then fires (see ``follow_ups``)."""
        assert self.service is not None and self.service.follow_ups is not None
        answer = await self.board.fast_forward(self.service.store, self.service.follow_ups)
        # Messages after the newest one now are shown at the demo clock's time (ViewState.shown_at); the
        # emulator's ts only grow, and may run a little ahead of the wall clock.
        newest = max((float(m["ts"]) for c in self.slack.channels for m in self.slack.stored(c)), default=0.0)
        self.view.shifts.append((newest + 1e-6, self.board.clock.offset))
        self._notify()
        return answer

    async def changed(self, after: int) -> int:
        """Wait until the workspace changed after version ``after``; the new version."""
        while self._version <= after and not self._closing:
            await self._changed.wait()
        return self._version

    # ------------------------------------------------------------------ deliveries to the app

    async def _post_to_app(self, body: bytes, headers: dict[str, str]) -> Delivery:
        assert self._http is not None
        async with self._http.post(f"{self.app_url}/slack/events", data=body, headers=headers) as response:
            return Delivery(response.status, await response.text())

    async def post(
        self, person: str, channel: str, text: str, thread_ts: str = "", file: tuple[str, bytes] | None = None
    ) -> tuple[str, list[Delivery]]:
        """Store ``person``'s message and deliver it to the app as Slack would; its ts and the answers.

        ``@name`` mentions (the bot's name, or a person's) become Slack mentions; ``file`` is
        ``(name, bytes)`` attached to the message. Raises ``ValueError`` for a bad request."""
        slack = self.slack
        if person not in self.view.people:
            raise ValueError(f"unknown person {person!r}")
        chan = slack.channels.get(channel)
        if chan is None:
            raise ValueError(f"unknown conversation {channel!r}")
        if chan.is_im and chan.user != person:
            raise ValueError("a DM can only be written to by its person")
        if not text.strip() and file is None:
            raise ValueError("write something or attach a file")
        if thread_ts:
            root = slack.find(channel, thread_ts)
            if root is None or slack.is_reply(root):
                raise ValueError(f"no thread {thread_ts} in this conversation")
        files = None
        if file is not None:
            name, data = file
            fid = slack.new_id("F")
            mimetype = mimetypes.guess_type(name)[0] or "application/octet-stream"
            slack.add_file(fid, name, mimetype, data, user=person)
            files = [slack.file_object(fid)]
        # A browser's form sends line breaks as \r\n; Slack stores \n.
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        ts = slack.add_message(channel, slack_text(slack, text), person, thread_ts or None, files)
        self._notify()
        deliveries = []
        for envelope in slack_events.message_events(slack, channel, ts):
            deliveries.append(await self._post_to_app(*slack_events.event_body(envelope, self.secret)))
        return ts, deliveries

    async def click(
        self, person: str, channel: str, ts: str, action: dict[str, str], values: dict[str, str] | None = None
    ) -> Delivery:
        """``person`` clicks a button of message ``ts``: the signed ``block_actions`` Slack would post.

        ``action`` names the element (``action_id``, ``block_id``, ``type``, ``value``); it must be
        one of the message's buttons; ``values`` are what the message's inputs hold, by block id.
        Raises ``ValueError`` otherwise (an element, or a value a select does not offer)."""
        if person not in self.view.people:
            raise ValueError(f"unknown person {person!r}")
        message = self.slack.find(channel, ts)
        if message is None:
            raise ValueError(f"no message {ts} in {channel!r}")
        names = {uid: u.name for uid, u in self.slack.users.items()}
        buttons = message_view(self.slack, channel, message, names)["buttons"]
        keys = ("action_id", "block_id", "type", "value")
        wanted = {k: str(action.get(k) or "") for k in keys}
        if not any({k: b[k] for k in keys} == wanted for b in buttons):
            raise ValueError("that message has no such button")
        payload = slack_events.block_actions(self.slack, channel, ts, person, wanted, values)
        return await self._post_to_app(*slack_events.interaction_body(payload, self.secret))

    async def open_link(self, person: str, url: str) -> tuple[int, str]:
        """``person`` opens ``url``, a link of a private note they were shown, in the emulator's browser
        (signed in as them at every site: ``threadbound_emulator.browser``); the last page, as text.
        Raises ``ValueError`` for a link they were not shown."""
        if person not in self.view.people:
            raise ValueError(f"unknown person {person!r}")
        if url not in links_for(self.slack, person):
            raise ValueError("that link was not shown to this person")
        status, page = await open_link(url, self.slack.users[person].name)
        return status, re.sub(r"<[^>]+>", " ", page).strip()


    async def stop_session(self, person: str, channel: str, thread_ts: str) -> Delivery:
        """``person`` presses Stop on the thread's agent session: Slack ends the thread's streams and
        sends ``agent_session_stopped``. Raises ``ValueError`` for an unknown person or thread."""
        if person not in self.view.people:
            raise ValueError(f"unknown person {person!r}")
        if (channel, thread_ts) not in self.slack.sessions:
            raise ValueError("that thread has no agent session")
        envelope = slack_events.session_stopped(self.slack, channel, thread_ts, person)
        self._notify()
        return await self._post_to_app(*slack_events.event_body(envelope, self.secret))

async def run_playground(settings: Settings, *, model: Model | None = None) -> None:
    """``python -m app playground``: serve until SIGTERM/SIGINT (StartupError for what cannot work)."""
    # The page drives the agent with your model key and has no sign-in: loopback unless HOST is set.
    host = settings.host if "host" in settings.model_fields_set else "127.0.0.1"
    playground = Playground(settings, model=model, host=host, port=settings.port)
    await playground.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    print(f"threadbound playground: open {playground.url}  (Ctrl-C stops it)", flush=True)
    try:
        await stop.wait()
    finally:
        await playground.stop()


__all__ = [
    "GENERAL",
    "PEOPLE",
    "Delivery",
    "Playground",
    "ignored_settings",
    "playground_settings",
    "run_playground",
]
