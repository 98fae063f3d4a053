"""Which calls wait for a person's approval, and whether anyone but the asker can give it.

A call waits (:meth:`ApprovalPolicy.needs_approval`) when its tool matches a glob of ``approval``,
or — unless the agent file sets ``approval_default = "listed_only"`` — when it is an MCP tool that
is not read-only. An MCP tool is read-only when its server marks it so (the ``readOnlyHint``
annotation of ``tools/list``) or when its server's ``read_only`` globs in the agent file name it.
Annotations are the server's own claim: a server you do not trust that far is gated by name
(``approval = ["server_*"]``), which always wins. Channel tools are gated only by name.

The globs and the approvers are inputs, not read from settings here, so that a conversation's
profile can bring its own (docs/approvals.md).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

__all__ = [
    "APPROVAL_DEFAULTS",
    "ApprovalDefault",
    "ApprovalPolicy",
    "approver_warnings",
    "gated",
    "read_only_hint",
]

#: ``not_read_only``: MCP tools not marked read-only wait for approval too; ``listed_only``: only the
#: calls ``approval`` names.
ApprovalDefault = Literal["not_read_only", "listed_only"]
APPROVAL_DEFAULTS: tuple[ApprovalDefault, ...] = ("not_read_only", "listed_only")
#: Gated tools named in a warning before "and N more".
_NAMED = 5


class McpToolLike(Protocol):
    """What the policy reads of an MCP tool (``app.agent.mcp.servers.McpTool``)."""

    @property
    def read_only(self) -> bool: ...


def gated(globs: Sequence[str], name: str) -> bool:
    """Whether ``name`` matches one of ``globs``."""
    return any(fnmatch.fnmatchcase(name, glob) for glob in globs)


def read_only_hint(listed: Any) -> bool:
    """Whether an MCP ``tools/list`` entry says it is read-only (``annotations.readOnlyHint``)."""
    annotations = getattr(listed, "annotations", None)
    if annotations is None:
        return False
    # MCP SDK v2 spells it read_only_hint (readOnlyHint on the wire, and in SDK v1).
    field = "read_only_hint" if hasattr(annotations, "read_only_hint") else "readOnlyHint"
    return getattr(annotations, field, None) is True


def destructive_hint(listed: Any) -> bool:
    """Whether an MCP ``tools/list`` entry says it may destroy something (``annotations.destructiveHint``
    set true; the protocol's default for a tool that is not read-only, left unset, is not counted)."""
    annotations = getattr(listed, "annotations", None)
    field = "destructive_hint" if hasattr(annotations, "destructive_hint") else "destructiveHint"
    return annotations is not None and getattr(annotations, field, None) is True


@dataclass(frozen=True, slots=True)
class ApprovalPolicy:
    """``approval`` globs and the ``approval_default`` rule of one agent file (or profile)."""

    globs: tuple[str, ...] = ()
    default: ApprovalDefault = "not_read_only"

    def needs_approval(self, name: str, mcp_tool: McpToolLike | None = None) -> bool:
        """Whether a call of tool ``name`` waits for a person; ``mcp_tool`` when it is an MCP tool."""
        if gated(self.globs, name):
            return True
        return self.default == "not_read_only" and mcp_tool is not None and not mcp_tool.read_only

    def gates_anything(self, has_mcp: bool) -> bool:
        """Whether any call can wait at all (an agent without MCP servers gates only by name)."""
        return bool(self.globs) or (has_mcp and self.default == "not_read_only")


def approver_warnings(
    gated_tools: Sequence[str], approvers: Collection[str], approval_by: str = "requester"
) -> list[str]:
    """What ``check`` says about who can approve ``gated_tools``: nothing when a second person can."""
    if not gated_tools:
        return []
    names = ", ".join(gated_tools[:_NAMED])
    if len(gated_tools) > _NAMED:
        names += f" and {len(gated_tools) - _NAMED} more"
    count = f"{len(gated_tools)} tool{'s' if len(gated_tools) != 1 else ''} wait for approval ({names})"
    if approval_by == "approvers" and not approvers:
        return [f"{count}, but APPROVAL_BY=approvers and APPROVERS is empty: nobody can approve them"]
    if not approvers:
        return [
            f"{count}, but APPROVERS is empty: the person who asked approves their own call, so no "
            "second person ever looks; set APPROVERS (and APPROVAL_BY=approvers to keep the asker out)"
        ]
    return []
