"""Which tools the model is offered now, and the tools that change it: tool_search (mcp_search) and skills."""

from __future__ import annotations

from .. import tool_search
from ..errors import bounded
from ..selection import HostTool, ToolSelection
from ..tools import MCP_SEARCH, SKILLS, TOOL_SEARCH, SkillsArgs, ToolSearchArgs, ToolSpec
from .state import Result, SessionState

# Deferred tools named when tool_search finds nothing; MCP servers can bring hundreds.
_LISTED = 30


class Offer:
    """The tools offered to the model now: the selection's starting ones, then those enabled."""

    def __init__(self, state: SessionState, tools: ToolSelection) -> None:
        self._state = state
        self.tools = tools
        selectable = {s.name for s in tools.deferred} | {t.name for t in tools.host_deferred}
        # In the order they were enabled (as stored): offered after the starting tools in that order,
        # so enabling one appends to the tool definitions and the cached prefix before it stays.
        self._enabled_order: list[str] = [t for t in state.task.enabled_tools if t in selectable]
        self.enabled: set[str] = set(self._enabled_order)

    @property
    def enabled_in_order(self) -> list[str]:
        """The tools ``tool_search`` enabled, oldest first (how they are stored and offered); any
        added to ``enabled`` directly come after them, by name."""
        ordered = [t for t in self._enabled_order if t in self.enabled]
        return ordered + sorted(self.enabled - set(ordered))

    def active_specs(self) -> list[ToolSpec]:
        """The channel tools (and tool_search, mcp_search, skills) to offer the model now: the
        starting ones in catalog order, then those tool_search enabled, in the order it did."""
        specs = [s for s in self.tools.channel_tools if s.starts == "active"]
        if self.searchable():
            specs.append(TOOL_SEARCH)
        if any(t.name not in self.enabled for t in self.tools.host_deferred):
            specs.append(MCP_SEARCH)  # the seed's name for tool_search, while MCP tools wait to be found
        if self.tools.skills:
            specs.append(SKILLS)
        deferred = {s.name: s for s in self.tools.channel_tools if s.starts != "active"}
        return specs + [deferred[n] for n in self.enabled_in_order if n in deferred]

    def active_host_tools(self) -> list[HostTool]:
        """The host's (MCP) tools to offer now: the eager ones, then those tool_search enabled in the
        order it did."""
        deferred = {t.name: t for t in self.tools.host_tools if t.starts != "active"}
        eager = [t for t in self.tools.host_tools if t.starts == "active"]
        return eager + [deferred[n] for n in self.enabled_in_order if n in deferred]

    def offered_names(self) -> list[str]:
        return [s.name for s in self.active_specs()] + [t.name for t in self.active_host_tools()]

    def offered(self, name: str) -> bool:
        return name in self.offered_names()

    def searchable(self) -> list[ToolSpec | HostTool]:
        """Deferred tools tool_search can still enable, channel and host together."""
        deferred: list[ToolSpec | HostTool] = [*self.tools.deferred, *self.tools.host_deferred]
        return [t for t in deferred if t.name not in self.enabled]

    async def tool_search(self, args: ToolSearchArgs) -> Result:
        candidates = self.searchable()
        hits = tool_search.rank(candidates, args.query, args.limit)
        if not hits:
            listed = ", ".join(f"{s.name} ({s.label})" for s in candidates[:_LISTED]) or "none"
            if len(candidates) > _LISTED:
                listed += f", and {len(candidates) - _LISTED} more"
            return {"enabled": [], "message": "No tool matched. Tools you can still enable: " + listed}
        for hit in hits:
            if hit.name not in self.enabled:
                self.enabled.add(hit.name)
                self._enabled_order.append(hit.name)
        await self._state.store.set_enabled_tools(self._state.task.task_id, self.enabled_in_order)
        return {
            # Host tools' descriptions are the server's own words, of any length.
            "enabled": [{"name": s.name, "description": bounded(s.description, 400)} for s in hits],
            "message": "Enabled from your next step on: " + ", ".join(s.name for s in hits),
        }

    async def skills(self, args: SkillsArgs) -> Result:
        library = self.tools.skills
        if args.name:
            skill = library.get(args.name)
            if skill is not None:
                return {"name": skill.name, "markdown": skill.body}
            return {"message": f"No skill named {args.name!r}.", **library.index()}
        return library.index()
