"""A RunExecutor for in-process run tests: a scripted model on a channel adapter.

The run and fencing tests drive one run at a time against a store and a fake adapter; this builds
the executor they share (the adapter's enabled tools, no skills, an empty agent file).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.agent.agent_file import AgentFile
from app.agent.runtime import build_agent
from app.runs.run import RunExecutor
from channel.contract import ChannelAdapter
from channel.selection import select_tools
from channel.skills import SkillLibrary
from storage.base import Store

from .models import Script, scripted


def scripted_executor(
    store: Store, adapter: ChannelAdapter, script: Script, data_dir: Path, **options: Any
) -> RunExecutor:
    """A RunExecutor whose model answers with ``script`` (see :func:`scripted`); ``options`` are
    RunExecutor's other keywords (limits, budgets, …)."""
    return RunExecutor(
        store=store,
        adapter=adapter,
        agent=build_agent(scripted(script)),
        tools=select_tools(adapter.features.enabled(), None, SkillLibrary([])),
        agent_file=AgentFile(),
        data_dir=data_dir,
        **options,
    )
