"""Tool selection: which tools a deployment offers, decided once at start-up.

The channel catalog (``channel.tools``) plus the host's tools (an MCP server's,
see :class:`HostTool`), narrowed by the agent file's ``tools`` list (names or
globs such as ``tickets_*``) and filtered by the adapter's features. The host
calls :func:`select_tools` when it starts; every session of the deployment
offers from the resulting :class:`ToolSelection` (deferred tools only after
``tool_search`` enabled them).
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .skills import SkillLibrary
from .tool_search import Searchable
from .tools import AUTOMATIC, CATALOG, MCP_SEARCH, SKILLS, TOOL_SEARCH, ToolSpec

log = logging.getLogger(__name__)


class HostTool(Searchable, Protocol):
    """A tool the host adds beside the channel's (an MCP server's): the session only decides
    whether it is offered; the host's own toolset runs it. tool_search reads it as any
    :class:`~channel.tool_search.Searchable`."""

    #: "active" (offered from the start) or "deferred" (after tool_search enabled it).
    @property
    def starts(self) -> str: ...


@dataclass(slots=True)
class ToolSelection:
    """The tools a deployment offers, after the agent file narrowed the catalog and the
    adapter's features filtered it (see :func:`select_tools`)."""

    channel_tools: tuple[ToolSpec, ...]
    skills: SkillLibrary = field(default_factory=lambda: SkillLibrary([]))
    host_tools: tuple[HostTool, ...] = ()

    @property
    def deferred(self) -> tuple[ToolSpec, ...]:
        return tuple(s for s in self.channel_tools if s.starts == "deferred")

    @property
    def host_deferred(self) -> tuple[HostTool, ...]:
        return tuple(t for t in self.host_tools if t.starts == "deferred")

    def names(self) -> list[str]:
        names = [s.name for s in self.channel_tools] + [t.name for t in self.host_tools]
        if self.deferred or self.host_deferred:
            names.append(TOOL_SEARCH.name)
        if self.host_deferred:
            names.append(MCP_SEARCH.name)
        if self.skills:
            names.append(SKILLS.name)
        return names


def host_tools_of(requested: Sequence[str] | None, host_tools: Sequence[HostTool]) -> tuple[HostTool, ...]:
    """``host_tools`` narrowed to ``requested`` as :func:`select_tools` narrows them, in their order;
    for a server whose tool list changed after start-up (nothing is refused: the file was checked)."""
    if requested is None:
        return tuple(host_tools)
    return tuple(t for t in host_tools if any(fnmatch.fnmatchcase(t.name, entry) for entry in requested))


def select_tools(
    features: frozenset[str],
    requested: Sequence[str] | None,
    skills: SkillLibrary,
    host_tools: Sequence[HostTool] = (),
    unavailable: Mapping[str, str] | None = None,
) -> ToolSelection:
    """The catalog and ``host_tools`` narrowed to ``requested`` (None: every tool the adapter supports).

    ``requested`` holds names or globs. Raises ``ValueError`` naming the entry when one selects
    no tool at all, or names a channel tool the adapter does not support, so a misconfigured
    deployment fails at start-up. An entry for a server in ``unavailable`` (server name → why;
    its tools are absent while it is down) selects nothing and is only logged.
    """
    channel = [s for s in CATALOG.values() if s.name not in AUTOMATIC]
    supported = [s for s in channel if s.feature is None or s.feature in features]
    if requested is None:
        return ToolSelection(tuple(supported), skills, tuple(host_tools))
    chosen: list[ToolSpec] = []
    hosted: list[HostTool] = []
    for entry in requested:
        if entry in AUTOMATIC:
            continue  # offered automatically when there is something to search or read
        spec = CATALOG.get(entry)
        if spec is not None and spec.feature is not None and spec.feature not in features:
            raise ValueError(
                f"agent file selects tool {entry!r}, but this install does not support it "
                f"(feature {spec.feature!r} is missing; see `python -m app check`)"
            )
        channel_hits = [s for s in supported if fnmatch.fnmatchcase(s.name, entry)]
        host_hits = [t for t in host_tools if fnmatch.fnmatchcase(t.name, entry)]
        chosen += [s for s in channel_hits if s not in chosen]
        hosted += [t for t in host_hits if t not in hosted]
        if channel_hits or host_hits or any(fnmatch.fnmatchcase(s.name, entry) for s in channel):
            continue
        down = [n for n in (unavailable or {}) if entry.startswith(f"{n}_")]
        if down:
            log.warning(
                "agent file selects %r, but MCP server %s is unavailable: %s",
                entry,
                down[0],
                (unavailable or {})[down[0]],
            )
            continue
        known = [*CATALOG, *(t.name for t in host_tools)]
        raise ValueError(f"agent file selects unknown tool {entry!r}; known tools: {', '.join(known)}")
    if not any(s.name == "channel_reply" for s in chosen):
        chosen.insert(0, CATALOG["channel_reply"])  # the only way an answer reaches a person
    # The catalog's order, whatever order the globs matched in.
    ordered = tuple(s for s in channel if s in chosen)
    return ToolSelection(ordered, skills, tuple(t for t in host_tools if t in hosted))
