"""The gate: a call that needs approval (``app.agent.approval_policy``: a tool matching ``approval``
in agent.toml, or an MCP tool not marked read-only) does not run until decided.

:class:`ApprovalGate` wraps the agent's toolsets (pydantic-ai's ``approval_required`` pattern): such
a call raises ``ApprovalRequired`` instead of running, unless its arguments cannot all be
shown on a card (then it is denied at once: never gated half-visible, invariant "Approvals show
everything", docs/architecture.md). An approved
call is marked started in the store before it runs, so it runs at most once even after a crash.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from pydantic_ai import RunContext, ToolDenied
from pydantic_ai.exceptions import ApprovalRequired
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolCallPart
from pydantic_ai.toolsets import WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from app.agent.approval_policy import ApprovalPolicy, McpToolLike, gated
from app.agent.runtime import RunDeps
from channel.card_fields import ArgumentsUnshowable, argument_fields
from channel.tools import CATALOG
from storage.base import ApprovalRecord, Store

log = logging.getLogger(__name__)


def error_json(code: str, message: str) -> str:
    return json.dumps({"error": {"code": code, "message": message}})


def decision_result(approval: ApprovalRecord | None) -> bool | ToolDenied:
    """What a decided (or withdrawn) gated call resumes with: True runs it; a denial is what the
    model reads instead of its result."""
    if approval is None or approval.decision == "void":
        message = "This call was interrupted before anyone could approve it; ask again if needed."
        return ToolDenied(error_json("tool_failed", message))
    if approval.decision == "approved":
        return True
    if approval.decision == "denied":
        message = f"{approval.tool} was denied by a person in this conversation; it did not run."
        return ToolDenied(error_json("denied", message))
    if approval.decision == "failed":
        message = (
            f"{approval.tool} needs a person's approval, but the approval card could not be posted in "
            "this conversation (the bot is not a member, or it is archived), so nobody could approve "
            "it; it did not run."
        )
        return ToolDenied(error_json("tool_failed", message))
    return ToolDenied(error_json("expired", f"Nobody approved {approval.tool} in time; it did not run."))


@dataclass
class ApprovalGate(WrapperToolset[RunDeps]):
    """Calls ``policy`` says need approval wait for it; an approved call starts at most once.
    ``mcp_tool`` finds the MCP tool of a name (None for other tools): the policy reads whether it is
    read-only. (A dataclass like every pydantic-ai wrapper: ``for_run`` copies it with ``replace``.)"""

    policy: ApprovalPolicy = field(default_factory=ApprovalPolicy)
    store: Store | None = None
    clock: Callable[[], float] = time.time
    mcp_tool: Callable[[str], McpToolLike | None] = lambda name: None

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[RunDeps], tool: ToolsetTool[RunDeps]
    ) -> Any:
        if not self.policy.needs_approval(name, self.mcp_tool(name)) or _invalid_channel_call(
            name, tool_args
        ):
            # A channel call that fails validation gets its error result; no card for it.
            return await super().call_tool(name, tool_args, ctx, tool)
        if not ctx.tool_call_approved:
            try:
                argument_fields(json.dumps(tool_args, ensure_ascii=False))
            except ArgumentsUnshowable as exc:
                # Approvals show everything: never gated half-visible (one could approve the unseen).
                log.warning("a gated call was denied: its arguments cannot be shown on a card (%s)", name)
                return json.loads(
                    error_json(
                        "denied",
                        f"{name} needs approval, but {exc}. It did not run; call it again with "
                        "smaller arguments (or split the work into several calls).",
                    )
                )
            raise ApprovalRequired
        assert self.store is not None
        task_id = ctx.deps.session.task.task_id
        approval = newest_approval(await self.store.task_approvals(task_id), ctx.tool_call_id or "")
        if approval is None or not await self.store.start_execution(approval.approval_id, now=self.clock()):
            # Started before (a run that crashed after it began): never run it twice.
            return json.loads(
                error_json(
                    "tool_failed",
                    "This approved call was already started before an interruption; its outcome is "
                    "unknown. Check before asking to do it again.",
                )
            )
        return await super().call_tool(name, tool_args, ctx, tool)


def _invalid_channel_call(name: str, args: dict[str, Any]) -> bool:
    spec = CATALOG.get(name)
    if spec is None:
        return False
    try:
        spec.args.model_validate(args)
    except ValidationError:
        return True
    return False


def newest_approval(approvals: Sequence[ApprovalRecord], tool_call_id: str) -> ApprovalRecord | None:
    found = [a for a in approvals if a.tool_call_id == tool_call_id]
    return found[-1] if found else None


def open_calls(history: Sequence[ModelMessage]) -> list[ToolCallPart]:
    """Tool calls of the transcript's last response that have no result yet (the pending ones)."""
    for index in range(len(history) - 1, -1, -1):
        message = history[index]
        if isinstance(message, ModelResponse):
            # Every request part with a tool call id is a result of that call (return, retry, search).
            answered = {
                getattr(part, "tool_call_id", None)
                for later in history[index + 1 :]
                if isinstance(later, ModelRequest)
                for part in later.parts
            }
            return [c for c in message.tool_calls if c.tool_call_id not in answered]
    return []


def warn_unmatched_approval(
    globs: Sequence[str], tools: Any, unavailable: Mapping[str, str] | None = None
) -> None:
    """A glob in ``approval`` that matches no tool is likely a typo, unless it is for an MCP server in
    ``unavailable`` (server → why), which is down, not misspelt: that is said instead."""
    names = [s.name for s in tools.channel_tools] + [t.name for t in tools.host_tools]
    for glob in globs:
        if any(gated((glob,), name) for name in names):
            continue
        down = next((server for server in unavailable or {} if glob.startswith(f"{server}_")), None)
        if down is not None:
            log.warning("approval entry %r is for MCP server %s, which is unavailable (above)", glob, down)
        else:
            log.warning("approval entry %r matches no tool offered now; check its spelling", glob)
