"""A message written into a thread while the model works on the thread's first message."""

from __future__ import annotations

import asyncio

from threadbound_emulator import FakeSlack

from . import events
from .harness import AppHarness


async def reply_while_held(
    app: AppHarness, slack: FakeSlack, held: asyncio.Event, proceed: asyncio.Event, asked: str, reply: str
) -> tuple[str, list[str]]:
    """U1 mentions the bot with ``asked``; once the model script sets ``held`` (it is inside its
    step), U2 writes ``reply`` in the thread and the script may ``proceed``. The thread's root and,
    once the app is idle, the bot's texts in that thread."""
    root = slack.add_message("C1", asked, user="U1")
    await app.deliver(events.app_mention("C1", "U1", asked, root))
    await held.wait()
    ts = slack.add_message("C1", reply, user="U2", thread_ts=root)
    await app.deliver(events.message("C1", "U2", reply, ts, thread_ts=root))
    proceed.set()
    await app.idle()
    return root, [m["text"] for m in slack.messages("C1", root) if m.get("bot_id")]
