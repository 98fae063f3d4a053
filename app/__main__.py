"""``python -m app``: serve, playground, run, check, manifest, usage, follow-ups, mcp-disconnect."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from .logs import HeldLogLines, held_until_started
from .settings import Settings, explain, settings_without_invalid

if TYPE_CHECKING:
    from app.intake.edge_process import EdgeProcess

_DESCRIPTION = """threadbound: an LLM agent that lives in your Slack threads and acts only in the thread
it was called from. Settings come from the environment or ./.env (see the README's Configure
table); every command checks them first and exits 2 with one line per problem."""

_EXAMPLES = """examples:
  threadbound check                  test the configuration against Slack, the database and the model
  threadbound serve                  run the server on $PORT
  threadbound playground --demo      try it in a browser without Slack (or without a model key)
  threadbound run --channel '#general' "Say hello"
  threadbound manifest --url https://bot.example.com/slack/events
  threadbound usage --days 30        model tokens by day, person and channel
  threadbound follow-ups             pending follow-ups across the install
  threadbound mcp-disconnect tickets U0123ABCD   forget one person's tokens for a per-person MCP server

`threadbound COMMAND --help` describes each command. `python -m app` is the same program:
`python -m app COMMAND` works wherever `threadbound COMMAND` does."""


def _command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    summary: str,
    description: str,
    examples: Sequence[str],
) -> argparse.ArgumentParser:
    """A subcommand whose --help has a paragraph of description and examples, and --version."""
    command = sub.add_parser(
        name,
        help=summary,
        description=description,
        epilog="examples:\n" + "\n".join(f"  {line}" for line in examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_version(command)
    return command


def version() -> str:
    """The installed package's version (the source tree's when it is not installed)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("threadbound")
    except PackageNotFoundError:
        return "0.0.0+source"


def _add_version(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", action="version", version=f"threadbound {version()}")


def _prog() -> str:
    """``threadbound`` when run as the console script, else ``python -m app``."""
    return "threadbound" if Path(sys.argv[0]).name == "threadbound" else "python -m app"


#: Each command's --help: the line in the COMMAND list, a paragraph, and examples.
_HELP: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "serve": (
        "run the HTTP server on $PORT (POST /slack/events, GET /healthz)",
        "Serve Slack's Events API on HOST:PORT (default 0.0.0.0:3000): POST /slack/events takes\n"
        "events and interactivity signed with SLACK_SIGNING_SECRET; GET /healthz, /readyz and\n"
        "/metrics are for the platform. Start-up checks every setting, the store and the token first\n"
        "and exits 2 with a one-line reason (a port in use, a store that cannot open, a missing key).\n"
        "SIGTERM or Ctrl-C stops accepting and lets running turns finish for SHUTDOWN_GRACE seconds.",
        (
            "threadbound serve",
            "PORT=8080 LOG_LEVEL=DEBUG threadbound serve",
        ),
    ),
    "playground": (
        "try the app in a browser, without Slack: http://127.0.0.1:$PORT/",
        "Start a local stand-in for a Slack workspace and the real app pointed at it, and serve a\n"
        "page at http://127.0.0.1:$PORT/ (default 3000): a channel and a DM where you type as one of\n"
        "a few people, mention the bot, reply in threads and attach files, and watch its replies,\n"
        "reactions, edits, files, canvases, progress and buttons live. The app runs exactly as under\n"
        "`serve` (agent.toml, skills, MCP servers, the same ingress and tools); only MODEL and its key\n"
        "are needed. SLACK_* settings and DATABASE_URL are ignored: the store is SQLite in\n"
        "$DATA_DIR/playground. --demo uses a built-in echo model instead of MODEL (no key at all).",
        (
            "threadbound playground --demo",
            "MODEL=anthropic:claude-sonnet-4-5 ANTHROPIC_API_KEY=... threadbound playground",
            "PORT=8000 threadbound playground",
        ),
    ),
    "run": (
        "run one task against a real conversation, without the webhook",
        "Run one task in a real conversation without the webhook: the agent reads the channel or\n"
        "thread, acts with the same tools as under `serve` and posts its reply there; the command\n"
        "prints the task's outcome. --channel takes an ID (C…, G…, D…) or a #name the bot can see.\n"
        "Without --thread the reply is a new root, recorded like any other, so replies to it continue\n"
        "the task under `serve`. Exit 0 when the run ended ok, 1 when it did not, 2 for configuration\n"
        "problems or a channel the bot cannot use (not found, or not a member: invite it).",
        (
            'threadbound run --channel C0123456789 "Say hello"',
            "threadbound run --channel '#releases' --thread 1732900000.123456 \"Summarise this thread\"",
        ),
    ),
    "check": (
        "check configuration against the real services",
        "Check the configuration against the real services and print one line per finding (PASS,\n"
        "WARN, FAIL or SKIP): the bot token (auth.test) and its scopes, the app token in Socket Mode\n"
        "(apps.connections.open), the signing secret, the file origins, the database, the agent\n"
        "file, the skills folder and one tiny model request.\n"
        "Configured secrets and anything shaped like a token are masked. Exit 1 when anything FAILs.",
        (
            "threadbound check",
            "threadbound check --no-model      # no model request, no tokens spent",
        ),
    ),
    "manifest": (
        "print the Slack app manifest for an Events API install",
        "Print the Slack app manifest (JSON) for an Events API install whose request URL is --url,\n"
        "with interactivity on the same URL and every scope the tools use. Paste it at\n"
        "https://api.slack.com/apps → Create New App → From a manifest, install the app, then copy\n"
        "the Bot User OAuth Token and the Signing Secret into .env. The manifest installs on any\n"
        "Slack plan; --agent-view adds Slack's agent messaging experience (paid plans).\n"
        "--socket-mode instead of --url: Socket Mode on, no request URL; then also generate an\n"
        "app-level token (connections:write) and set it as SLACK_APP_TOKEN.",
        (
            "threadbound manifest --url https://bot.example.com/slack/events",
            "threadbound manifest --socket-mode",
            'threadbound manifest --url https://bot.example.com/slack/events --name "Release bot"',
            "threadbound manifest --url https://bot.example.com/slack/events --agent-view",
        ),
    ),
    "usage": (
        "print model tokens by day, person and channel",
        "Print the model tokens this install spent, from its database: one line per UTC day, person\n"
        "(who asked) and channel, with input, output, cache-read and cache-write tokens and requests,\n"
        "then the total. Budgets (USER_DAILY_TOKEN_BUDGET, DAILY_TOKEN_BUDGET) count input + output.\n"
        "People and channels are shown by name, looked up in Slack; when Slack cannot be reached they\n"
        "are shown by ID and the command says so. --json gives IDs and names, for scripts.",
        (
            "threadbound usage                 # today and the 6 days before",
            "threadbound usage --days 1        # today (UTC) only",
            "threadbound usage --days 30 --json | jq '.rows[] | select(.person.name == \"Alice\")'",
        ),
    ),
    "follow-ups": (
        "list pending follow-ups across the install",
        "List the follow-ups tasks scheduled (channel_follow_up) that have not fired yet, soonest\n"
        "first: when (UTC), the task, the thread's permalink and the note's first words.",
        (
            "threadbound follow-ups",
            "threadbound follow-ups --json | jq '.follow_ups[].permalink'",
        ),
    ),
    "mcp-disconnect": (
        "forget one person's tokens for a per-person MCP server",
        'Delete the tokens a person connected for an MCP server with auth = "per_person" (see\n'
        "docs/mcp.md). The app can no longer act as them there; their next call asks them to connect\n"
        "again. USER is their Slack user ID (U…).",
        ("threadbound mcp-disconnect tickets U0123ABCD",),
    ),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_prog(),
        description=_DESCRIPTION,
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_version(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands = {name: _command(sub, name, *text) for name, text in _HELP.items()}
    commands["playground"].add_argument(
        "--demo", action="store_true", help="use a built-in echo model (not an LLM) that needs no key"
    )
    run = commands["run"]
    run.add_argument("--channel", required=True, help="channel to act in: an ID (C…, D…, G…) or #name")
    run.add_argument("--thread", default="", help="thread root ts; without it the reply is a new root")
    run.add_argument("prompt", help="what to ask the agent")
    commands["check"].add_argument("--no-model", action="store_true", help="skip the model request")
    manifest = commands["manifest"]
    manifest.add_argument("--url", help="public URL of /slack/events, e.g. https://HOST/slack/events")
    manifest.add_argument(
        "--socket-mode",
        action="store_true",
        help="Socket Mode: no request URL; deliveries over the WebSocket SLACK_APP_TOKEN opens",
    )
    manifest.add_argument("--name", default="threadbound", help="the app's display name")
    manifest.add_argument(
        "--slash-command",
        default=os.environ.get("SLASH_COMMAND") or "/threadbound",
        help="the slash command's name (default: $SLASH_COMMAND, else /threadbound)",
    )
    manifest.add_argument(
        "--agent-view",
        action="store_true",
        help="add features.agent_view (Slack's agent messaging experience, documented for paid plans)",
    )
    usage = commands["usage"]
    usage.add_argument("--days", type=_positive, default=7, help="UTC days to show, today included (7)")
    usage.add_argument("--json", action="store_true", help="print JSON with IDs and names")
    commands["follow-ups"].add_argument("--json", action="store_true", help="print JSON with every field")
    commands["mcp-disconnect"].add_argument("server", help="the server's name, as in [mcp.NAME]")
    commands["mcp-disconnect"].add_argument("user", help="the person's Slack user ID (U…)")
    return parser


def _export_dotenv() -> None:
    """Put ./.env's lines into the environment where it has no value of its own: Settings reads .env
    itself, but the model providers pydantic-ai builds (GOOGLE_API_KEY, GROQ_API_KEY, AWS_*) read
    only the environment."""
    import os

    from dotenv import dotenv_values

    if Path(".env").is_file():
        ours = {name.upper() for name in Settings.model_fields}  # read from .env by Settings already
        for name, value in dotenv_values(".env").items():
            if value is not None and name.upper() not in ours:
                os.environ.setdefault(name, value)


def _positive(value: str) -> int:
    try:
        days = int(value)
    except ValueError:
        days = 0
    if days < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of days, 1 or more, not {value!r}")
    return days


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI, as ``python -m app`` and as the ``threadbound`` console script: the exit code."""
    logging.captureWarnings(True)
    args = _parser().parse_args(argv)
    if args.command == "manifest":
        import json

        from app.ops.manifest import build_manifest

        try:
            manifest = build_manifest(
                args.url,
                name=args.name,
                agent_view=args.agent_view,
                socket_mode=args.socket_mode,
                slash_command=args.slash_command,
            )
        except ValueError as exc:
            print(f"threadbound: {exc}", file=sys.stderr)
            return 2
        print(json.dumps(manifest, indent=2))
        return 0
    try:
        settings = Settings()
    except ValidationError as exc:
        for line in explain(exc):
            print(f"threadbound: {line}", file=sys.stderr)
        _name_the_rest(exc, args.command)
        return 2
    _export_dotenv()
    from .logs import configure_logging
    from .traces import TracingUnavailable, setup_tracing

    configure_logging(settings)
    try:
        provider = setup_tracing(settings)
    except TracingUnavailable as exc:
        print(f"threadbound: cannot start: {exc}", file=sys.stderr)
        return 2
    try:
        return _dispatch(args, settings)
    finally:
        if provider is not None:
            provider.shutdown()  # flushes the spans still queued


def _name_the_rest(exc: ValidationError, command: str) -> None:
    """After the invalid settings, what else ``serve`` or ``run`` would refuse (missing settings,
    credentials of the wrong shape): one start names every setting to fix."""
    if command not in ("serve", "run"):
        return
    from app.ops.preflight import missing_before_start

    rest = settings_without_invalid(exc)
    missing = missing_before_start(rest, webhook=command == "serve") if rest is not None else None
    if missing is not None:
        print(f"threadbound: cannot start: {missing}", file=sys.stderr)


def _dispatch(args: argparse.Namespace, settings: Settings) -> int:
    if args.command in ("serve", "run"):
        from app.ops.preflight import missing_before_start

        missing = missing_before_start(settings, webhook=args.command == "serve")
        if missing is not None:  # named before the service's heavy imports
            print(f"threadbound: cannot start: {missing}", file=sys.stderr)
            return 2
    if args.command == "serve":
        from app.intake.edge_process import EdgeFailed, fork_edge
        from app.service import StartupError

        try:
            forked = fork_edge(settings)  # before any thread starts, with the heavy imports done
        except EdgeFailed as exc:
            print(f"threadbound: cannot start: {exc}", file=sys.stderr)
            return 2
        # Lines logged while starting are held back: a failed start prints only its `cannot start:`.
        with held_until_started() as held:
            try:
                asyncio.run(_serve(settings, held, forked))
            except StartupError as exc:
                held.discard()
                print(f"threadbound: cannot start: {exc}", file=sys.stderr)
                return 2
        return 0
    if args.command == "playground":
        from .playground.command import playground_command

        return asyncio.run(playground_command(settings, demo=args.demo))
    if args.command == "run":
        with held_until_started() as held:
            return asyncio.run(_run(settings, args.channel, args.thread, args.prompt, held))
    if args.command == "check":
        from app.ops.check import run_checks

        return asyncio.run(run_checks(settings, model=not args.no_model))
    if args.command == "usage":
        from app.ops.usage_report import usage_command

        return asyncio.run(usage_command(settings, days=args.days, as_json=args.json))
    if args.command == "follow-ups":
        from app.ops.follow_ups_report import follow_ups_command

        return asyncio.run(follow_ups_command(settings, as_json=args.json))
    if args.command == "mcp-disconnect":
        from app.ops.mcp_disconnect import mcp_disconnect_command

        return asyncio.run(mcp_disconnect_command(settings, args.server, args.user))
    return 2  # pragma: no cover - argparse rejects unknown commands


async def _serve(settings: Settings, held: HeldLogLines, forked: EdgeProcess | None = None) -> None:
    """``serve``, writing the held start-up lines once it listens."""
    from app.serving import serve

    ready = asyncio.Event()

    async def release() -> None:
        await ready.wait()
        held.release()

    releasing = asyncio.create_task(release())
    try:
        await serve(settings, ready=ready, forked=forked)
    finally:
        releasing.cancel()


async def _run(settings: Settings, channel: str, thread: str, prompt: str, held: HeldLogLines) -> int:
    from app.ops.target import TargetError, resolve_target, resolve_thread
    from app.service import Service, StartupError

    try:
        service = await Service.create(settings, webhook=False)
    except StartupError as exc:
        held.discard()
        print(f"threadbound: cannot start: {exc}", file=sys.stderr)
        return 2
    held.release()
    try:
        try:
            channel = await resolve_target(service.adapter, channel)
            if thread:
                thread = await resolve_thread(service.adapter, channel, thread)
        except TargetError as exc:
            print(f"threadbound: {exc}", file=sys.stderr)
            return 2
        task = await service.store.create_task(channel=channel, thread_ts=thread, now=time.time())
        outcome = await service.runner.run_prompt(task, prompt, adopt_first_root=not thread)
        print(f"task {outcome.task_id}: {outcome.status}, replied={outcome.replied}")
        return 0 if outcome.status == "ok" else 1
    finally:
        await service.close()


if __name__ == "__main__":
    sys.exit(main())
