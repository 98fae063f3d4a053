"""``/threadbound stop``: a person's Stop by slash command, for the thread it names.

The same Stop as Slack's agent-session button (``app.runs.stop.request_stop``): the run in progress
in the thread ends at once, for good, on whichever instance runs it; with nothing running it does
nothing. The thread is the one the command was typed in when Slack says so (``thread_ts``), else the
one a link in the argument names — a message link from Slack's "Copy link" in this conversation.
Anyone who can use the command in the conversation may stop its runs, as anyone who sees Slack's
Stop button may press it. The answer is private, like every subcommand's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from app.runs.stop import Stopper, request_stop
from storage.base import Store

from .slash_command import Answer, CommandCall, private

#: A Slack message link: ``…/archives/CHANNEL/pDIGITS`` and, for a reply, ``?thread_ts=TS``.
_LINK = re.compile(r"/archives/(?P<channel>[A-Z0-9]+)/p(?P<digits>\d{16})(?:\?(?P<query>\S*))?")
_THREAD_TS = re.compile(r"(?:^|&)thread_ts=(?P<ts>\d+\.\d+)")
SUMMARY = "stop the app's run in this thread (or in the thread a message link names)"
HOW = "Type `stop` in the thread whose run should stop, or give the link of one of its messages."


def thread_of(payload: Mapping[str, Any], argument: str, channel: str) -> str | None:
    """The thread's root ts the command names in ``channel``; None when it names none (or another
    conversation's)."""
    typed_in = payload.get("thread_ts")
    if isinstance(typed_in, str) and typed_in:
        return typed_in
    link = _LINK.search(argument)
    if link is None or link["channel"] != channel:
        return None
    in_thread = _THREAD_TS.search(link["query"] or "")
    digits = link["digits"]
    return in_thread["ts"] if in_thread else f"{digits[:10]}.{digits[10:]}"


class StopCommand:
    """The ``stop`` subcommand (``SlashCommand.add``)."""

    def __init__(self, store: Store, scheduler: Stopper | None = None) -> None:
        self.store = store
        self.scheduler = scheduler

    async def __call__(self, call: CommandCall) -> Answer:
        thread = thread_of(call.payload, call.argument, call.channel)
        if thread is None:
            return private(HOW)
        if await request_stop(self.store, call.channel, thread, call.user, scheduler=self.scheduler):
            return private("Stopping the app's run in that thread. What it already posted stays.")
        return private("Nothing of the app's is running in that thread: nothing to stop.")
