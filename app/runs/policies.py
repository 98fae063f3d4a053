"""What a run works with under its conversation's profile: agent, tools, budgets, instructions.

Built once at start-up (``app.service``), one :class:`Policy` per profile of the agent file
(``app.agent.profiles``); a run asks :meth:`Policies.of` for its conversation's. The tools a profile
does not allow are not in its :class:`~channel.selection.ToolSelection`, so its sessions never
offer them, ``tool_search`` never finds them, and a call naming one is refused by the session (a
channel tool) or the MCP toolset (a server's) — invariant "Scoped by profile", docs/architecture.md.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from pydantic_ai import Agent

from app.agent.admission import Admission
from app.agent.agent_file import AgentFile
from app.agent.profiles import Profile
from app.agent.runtime import RunDeps
from app.agent.usage import Budgets
from channel.selection import HostTool, ToolSelection, host_tools_of, select_tools
from channel.skills import SkillLibrary

__all__ = ["Policies", "Policy", "ServerTool", "profile_host_tools", "profile_tools"]


class ServerTool(HostTool, Protocol):
    """An MCP tool, as a profile selects it: by its server's name (``app.agent.mcp.servers.McpTool``)."""

    @property
    def server(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Policy:
    """One profile's run-time parts."""

    profile: Profile
    agent: Agent[RunDeps, Any]
    tools: ToolSelection
    budgets: Budgets
    #: The agent file as this profile reads it (its instructions and approval globs).
    agent_file: AgentFile

    @classmethod
    def plain(
        cls, agent: Agent[RunDeps, Any], tools: ToolSelection, budgets: Budgets, agent_file: AgentFile
    ) -> Policy:
        """The default profile's policy from the executor's own parts (an install without profiles)."""
        return cls(agent_file.profiles.default, agent, tools, budgets, agent_file)

    @classmethod
    def of(
        cls,
        profile: Profile,
        agent: Agent[RunDeps, Any],
        tools: ToolSelection,
        budgets: Budgets,
        agent_file: AgentFile,
    ) -> Policy:
        """``profile``'s policy: its budgets where it sets them, its instructions and approvals."""
        if profile.user_daily_token_budget is not None or profile.daily_token_budget is not None:
            budgets = replace(
                budgets,
                per_user=_either(profile.user_daily_token_budget, budgets.per_user),
                install=_either(profile.daily_token_budget, budgets.install),
            )
        reads = replace(agent_file, instructions=profile.instructions, approval=profile.approval)
        return cls(profile, agent, tools, budgets, reads)


def _either(value: int | None, default: int) -> int:
    return default if value is None else value


class Policies:
    """Every profile's :class:`Policy`, chosen per conversation by ``admission``'s precedence."""

    def __init__(self, admission: Admission, by_name: Mapping[str, Policy]) -> None:
        self.admission = admission
        self.by_name = dict(by_name)

    async def of(self, channel: str) -> Policy:
        profile = await self.admission.profile(channel)
        return self.by_name[profile.name]

    def refusal(self, channel: str, profile: Profile) -> Any:
        """The run screen's question for ``channel`` (``app.runs.budget_screen.Refusal``)."""

        async def refused(person: str, team: str | None) -> str | None:
            return await self.admission.refusal(channel, person, team=team, profile=profile)

        return refused


def profile_tools(
    profile: Profile,
    features: frozenset[str],
    skills: SkillLibrary,
    host_tools: Sequence[ServerTool],
    unavailable: Mapping[str, str],
) -> ToolSelection:
    """The tools that exist in ``profile``'s conversations: its ``tools`` over the adapter's
    ``features``, the skills and the MCP tools of the servers its ``mcp`` names. An entry of its
    ``tools`` for a server its ``mcp`` leaves out selects nothing there (logged, as for a server
    that is down); ValueError as :func:`channel.selection.select_tools` raises it."""
    servers = {t.server for t in host_tools} | set(unavailable)
    kept = {s for s in servers if _keeps(profile, s)}
    absent = dict(unavailable)
    absent.update({s: f"profile {profile.name} leaves it out (mcp)" for s in servers - kept})
    offered = [t for t in host_tools if t.server in kept]
    return select_tools(features, profile.tools, skills, offered, absent)


def profile_host_tools(profile: Profile, host_tools: Sequence[ServerTool]) -> tuple[HostTool, ...]:
    """The MCP tools ``profile`` offers out of ``host_tools`` (a server's list that changed after
    start-up): its servers' only, narrowed by its ``tools``."""
    return host_tools_of(profile.tools, [t for t in host_tools if _keeps(profile, t.server)])


def _keeps(profile: Profile, server: str) -> bool:
    return profile.mcp is None or any(fnmatch.fnmatchcase(server, g) for g in profile.mcp)
