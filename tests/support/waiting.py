"""``eventually``: poll a condition that another process or task will make true.

Prefer awaiting an event (the harness's idle state, ``FakeSlack.wait_for_calls``);
poll only what has no event to await, such as a child process's effect on the fake.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable


async def eventually(check: Callable[[], bool], within: float = 20.0, *, interval: float = 0.02) -> None:
    """Return once ``check()`` is true; ``AssertionError`` if it is still false after ``within`` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"condition not reached within {within} s")
        await asyncio.sleep(interval)


async def polls(within: float = 20.0, *, interval: float = 0.05) -> AsyncIterator[None]:
    """Attempts at something awaited, for ``within`` seconds of the loop's clock (not a number of
    tries, which a loaded machine runs out of sooner): ``async for _ in polls(): ... if done: break``,
    then assert on what the last attempt saw."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        yield
        if loop.time() > deadline:
            return
        await asyncio.sleep(interval)
