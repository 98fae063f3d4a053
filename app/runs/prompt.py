"""What the model is shown of a task's inbound messages: the prompt, and whom a streamed answer is for."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from app.agent.approvals import Approvals, is_decision
from channel.errors import ChannelError
from channel.session import ChannelSession
from storage.base import InboxItem

log = logging.getLogger(__name__)

#: Told to the model when some calls wait for approval (``approval`` in agent.toml).
APPROVAL_NOTE = (
    "\n\nSome actions wait for a person's approval: calling one posts an approval card in this "
    "conversation and your turn ends there. You continue with its result once someone decides; a "
    'refusal comes back as an error with code "denied", no decision in time as "expired".'
)


async def render_prompt(
    session: ChannelSession, items: Sequence[InboxItem], notes: Sequence[str] = ()
) -> str:
    """The inbound messages as the model's user prompt: author, handle, rendered text, files."""
    lines: list[str] = []
    for item in items:
        if is_decision(item):
            continue  # a decision on an approval resumes the task; it is no message
        try:
            row = await session.inbound_row(json.loads(item.payload))
        except ChannelError as exc:
            log.warning("could not render inbound message %s: %s", item.ts, exc.message)
            lines.append(f"(a message that could not be shown: {exc.message})")
            continue
        text = str(row["text"])
        # Markdown that needs to start a line (a quoted forward, a list, a code block) gets one.
        sep = "\n" if "\n" in text or text.startswith((">", "-", "```")) else " "
        lines.append(f"{row['author']['display_name']} ({row['message']}):{sep}{text}")
        for f in row["files"]:
            if "file" not in f:
                lines.append(f"  attached, but you cannot open it ({f['unavailable']}): {f['name']}")
                continue
            lines.append(f"  attached {f['file']}: {f['name']} ({f['media_type']}, {f['size']} bytes)")
    if notes:
        lines += ["", "Your previous run was interrupted before it finished:", *notes]
    return "\n".join(lines)


def recipient(items: Sequence[InboxItem]) -> dict[str, Any] | None:
    """The newest inbound message (as the ingress stored it): whom a streamed answer is for."""
    for item in reversed(items):
        try:
            raw = json.loads(item.payload)
        except ValueError:
            continue
        if isinstance(raw, dict) and not is_decision(item):
            return raw
    return None


async def answer_recipient(items: Sequence[InboxItem], approvals: Approvals | None) -> dict[str, Any] | None:
    """Whom a streamed answer is for: the newest message's author, or (a run resumed by decisions
    alone) the person who asked for the approved calls."""
    found = recipient(items)
    if found is None and approvals is not None and items:
        asker = await approvals.requester(items)
        found = {"user": asker} if asker else None
    return found
