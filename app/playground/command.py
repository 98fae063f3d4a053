"""``python -m app playground``: the checks before it starts, then :func:`run_playground`."""

from __future__ import annotations

import sys

from app.settings import Settings

from .demo import demo_model
from .server import ignored_settings, run_playground


async def playground_command(settings: Settings, *, demo: bool) -> int:
    """``python -m app playground``: its exit code."""
    from app.agent.agent_file import AgentFile
    from app.service import StartupError

    ignored = ignored_settings(settings)
    if ignored:
        print(
            f"threadbound: the playground ignores {', '.join(ignored)}: it is its own Slack workspace, "
            f"with its store in {settings.data_dir / 'playground'}",
            file=sys.stderr,
        )
    if not demo and not settings.model:
        try:
            named = AgentFile.load(settings.resolved_agent_file, settings.mcp_config).model
        except ValueError:
            named = "x"  # a broken agent file is reported, named, by the start-up below
        if not named:
            print(
                "threadbound: MODEL is not set: set MODEL and its key (e.g. "
                "MODEL=anthropic:claude-sonnet-4-5 and ANTHROPIC_API_KEY) in the environment or ./.env, "
                "or run `python -m app playground --demo` for an echo model that needs no key",
                file=sys.stderr,
            )
            return 2
    try:
        await run_playground(settings, model=demo_model() if demo else None)
    except StartupError as exc:
        print(f"threadbound: cannot start: {exc}", file=sys.stderr)
        return 2
    return 0
