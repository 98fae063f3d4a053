"""``python -m app``: serve, run, check, manifest."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from collections.abc import Sequence

from pydantic import ValidationError

from .settings import Settings, explain


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m app", description="threadbound: an agent in your Slack threads"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="run the HTTP server on $PORT (POST /slack/events, GET /healthz)")
    run = sub.add_parser("run", help="run one task against a real conversation, without the webhook")
    run.add_argument("--channel", required=True, help="channel ID to act in (C…, D…, G…)")
    run.add_argument("--thread", default="", help="thread root ts; without it the reply is a new root")
    run.add_argument("prompt", help="what to ask the agent")
    check = sub.add_parser("check", help="check configuration against the real services")
    check.add_argument("--no-model", action="store_true", help="skip the model request")
    manifest = sub.add_parser("manifest", help="print the Slack app manifest for an Events API install")
    manifest.add_argument(
        "--url", required=True, help="public URL of /slack/events, e.g. https://HOST/slack/events"
    )
    manifest.add_argument("--name", default="threadbound", help="the app's display name")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "manifest":
        import json

        from .manifest import build_manifest

        try:
            manifest = build_manifest(args.url, name=args.name)
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
        return 2
    from .logs import configure_logging

    configure_logging(settings)
    if args.command == "serve":
        from .server import StartupError, serve

        try:
            asyncio.run(serve(settings))
        except StartupError as exc:
            print(f"threadbound: cannot start: {exc}", file=sys.stderr)
            return 2
        return 0
    if args.command == "run":
        return asyncio.run(_run(settings, args.channel, args.thread, args.prompt))
    if args.command == "check":
        from .check import run_checks

        return asyncio.run(run_checks(settings, model=not args.no_model))
    return 2  # pragma: no cover - argparse rejects unknown commands


async def _run(settings: Settings, channel: str, thread: str, prompt: str) -> int:
    from .server import Service, StartupError

    try:
        service = await Service.create(settings)
    except StartupError as exc:
        print(f"threadbound: cannot start: {exc}", file=sys.stderr)
        return 2
    try:
        task = await service.store.create_task(channel=channel, thread_ts=thread, now=time.time())
        outcome = await service.runner.run_prompt(task, prompt, adopt_first_root=not thread)
        print(f"task {outcome.task_id}: {outcome.status}, replied={outcome.replied}")
        return 0 if outcome.status == "ok" else 1
    finally:
        await service.close()


if __name__ == "__main__":
    logging.captureWarnings(True)
    sys.exit(main())
