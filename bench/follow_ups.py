"""follow_up_fire_lag: how soon follow-ups due at the same moment start their runs.

Setup. The whole app in this process (``tests.support.harness.AppHarness``, SQLite in a temp
``DATA_DIR``, default ``MAX_CONCURRENT_RUNS`` and ``USER_MAX_RUNS``) next to FakeSlack, with a
scripted model that ends each turn silently. ``follow_ups`` tasks (1,000; quick 300) each get one
follow-up, scheduled by one of 50 people, all due at the same instant a few seconds ahead; the
follow-up sweep runs as in production (it looks about once a second).

Measurement. For each follow-up, when its run started (the run hooks' ``on_start``) minus when it
was due; and, for the same run, when it started minus when it was appended to the inbox (its
``fired_at``): the run queue's own wait, which a burst of 1,000 runs needs whatever woke them.
``ours`` is the p99 of due → run start less the p99 of the queue's wait; the target is the issue's
"p99 ≤ 2 s plus the run queue's own wait". Every follow-up must fire once (none lost, none twice).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from app.runs.run import RunHooks
from channel import follow_ups as fu
from channel.session import ChannelSession
from storage.base import FollowUpRecord, InboxItem
from tests.support.harness import AppHarness
from tests.support.models import scripted
from threadbound_emulator import FakeSlack

from . import Row, Scale
from .common import percentile

ROWS = ("follow_up_fire_lag",)
PEOPLE = 50
#: Seconds from the end of scheduling until every follow-up is due.
LEAD = 3.0


async def run(scale: Scale) -> list[Row]:
    count = scale.follow_ups
    started: dict[str, float] = {}
    fired: dict[str, float] = {}
    shown: dict[str, int] = {}
    all_started = asyncio.Event()

    async def on_start(session: ChannelSession, items: Sequence[InboxItem]) -> None:
        for item in items:
            if fu.parse(item.payload) is not None:
                shown[item.ts] = shown.get(item.ts, 0) + 1
                started.setdefault(item.ts, time.time())
                fired.setdefault(item.ts, item.created_at)
        if len(started) >= count:
            all_started.set()

    with tempfile.TemporaryDirectory(prefix="bench-follow-ups-") as tmp:
        async with FakeSlack() as slack:
            slack.add_channel("C1", "general")
            for n in range(PEOPLE):
                slack.add_user(f"U{n:03d}", f"person{n}", display_name=f"Person {n}")
            hooks = RunHooks(on_start=on_start)
            app = AppHarness(slack, model=scripted(lambda turn: [""]), data_dir=Path(tmp), hooks=hooks)
            async with app:
                assert app.service is not None
                store = app.service.store
                due = time.time() + LEAD + count / 500  # scheduling itself takes a moment
                for n in range(count):
                    root = slack.add_message("C1", f"<@UBOT> follow up {n}", user=f"U{n % PEOPLE:03d}")
                    task = await store.create_task(channel="C1", thread_ts=root, now=time.time())
                    record = FollowUpRecord(
                        fu.new_follow_up_handle(), task.task_id, f"U{n % PEOPLE:03d}", "C1", root,
                        f"follow-up {n}", due, time.time(),
                    )  # fmt: skip
                    await store.schedule_follow_up(
                        record, payload=fu.payload(record), per_task=fu.PER_TASK, install_max=count
                    )
                try:
                    await asyncio.wait_for(all_started.wait(), due - time.time() + scale.time_cap + 60)
                except TimeoutError:
                    pass  # counted as lost below
                await app.idle()
                counts = await store.follow_up_counts()
    twice = sum(1 for n in shown.values() if n > 1)
    lags = [started[h] - due for h in started]
    waits = [started[h] - fired[h] for h in started]
    lost = count - len(started)
    if not lags:
        return [Row("follow_up_fire_lag", None, None, "s", "<= 2", note="no follow-up fired")]
    p99_lag, p99_wait = percentile(lags, 99), percentile(waits, 99)
    return [
        Row(
            "follow_up_fire_lag",
            round(max(0.0, p99_lag - p99_wait), 2),
            round(p99_wait, 2),
            "s p99 due → run start, over the queue's own wait",
            "<= 2 s over the run queue's own wait (the baseline)",
            absolute=True,
            also={"0 lost": lost == 0 and counts["pending"] == 0, "0 fired twice": twice == 0},
            note=(
                f"{count} follow-ups of {PEOPLE} people due at one instant; p99 due → run start "
                f"{p99_lag:.2f} s, p99 inbox → run start (queue) {p99_wait:.2f} s; "
                f"lost {lost}, fired twice {twice}"
            ),
        )
    ]
