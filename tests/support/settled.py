"""``settled``: wait, through the store, until a conversation's run is over.

For the crash tests, whose servers run in other processes: the test opens the same database.
"""

from __future__ import annotations

import asyncio

from storage import open_store


async def settled(url: str, channel: str, root: str, within: float) -> None:
    """Return once the conversation at ``channel``/``root`` on the store at ``url`` is saved (its run
    not open), its inbox and journal empty; ``AssertionError`` if not within ``within`` s."""
    store = open_store(url)
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            task_id = await store.find_task(channel, root)
            task = await store.get_task(task_id) if task_id else None
            if task_id and task and not task.run_open:
                if not await store.pending_inbox(task_id) and not await store.open_effects(task_id):
                    return
            assert loop.time() < deadline, "the conversation's run never ended"
            await asyncio.sleep(0.05)
    finally:
        await store.close()
