"""``python -m app usage``: model tokens by UTC day, person and channel, from the usage table.

People and channels are shown by name, looked up once each through the Slack adapter (which caches
them); when Slack cannot be reached the report still prints, by ID, and says so. ``--json`` gives
IDs and names for scripts.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from functools import reduce
from typing import Any, TextIO

from app.agent.usage import added, counts, utc_day
from app.settings import Settings
from channel.contract import Origin
from channel.errors import ChannelError
from channel.slack import SlackAdapter
from storage.base import UsageRecord

from .reports import read_store, slack_lookups

_COLUMNS = ("input", "output", "cache read", "cache write", "requests")
#: How a usage row with no person (the `run` command) is shown.
NO_PERSON = "(run command)"


@dataclass(slots=True)
class Names:
    """Display names by ID; IDs stand for themselves when Slack is not reachable."""

    adapter: SlackAdapter | None
    people: dict[str, str] = field(default_factory=dict)
    channels: dict[str, str] = field(default_factory=dict)

    async def person(self, user_id: str) -> str:
        if not user_id:
            return NO_PERSON
        if user_id not in self.people:
            name = user_id
            if self.adapter is not None:
                found, _ = await self.adapter.user(user_id)
                name = user_id if found == "someone" else found  # "someone": the lookup failed
            self.people[user_id] = name
        return self.people[user_id]

    async def channel(self, channel_id: str) -> str:
        if channel_id not in self.channels:
            name = channel_id
            if self.adapter is not None:
                try:
                    name = (await self.adapter.describe(Origin(channel_id, ""))).name or channel_id
                except ChannelError:
                    pass
            self.channels[channel_id] = name
        return self.channels[channel_id]


async def usage_command(
    settings: Settings, *, days: int, as_json: bool, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    since = utc_day(time.time() - (days - 1) * 86_400)
    rows = await read_store(settings, lambda store: store.usage_by_day(since), err)
    if rows is None:
        return 2
    async with slack_lookups(settings, err, "people and channels are shown by ID") as adapter:
        names = Names(adapter)
        report = [(row, await names.person(row.person), await names.channel(row.channel)) for row in rows]
    if as_json:
        print(json.dumps(_json(report, since, days, names_resolved=adapter is not None), indent=2), file=out)
    else:
        print(_text(report, since, days), file=out)
    return 0


def _cells(row: UsageRecord) -> tuple[str, ...]:
    return tuple(f"{n:,}" for n in counts(row).values())


def _total(report: list[tuple[UsageRecord, str, str]]) -> UsageRecord:
    return reduce(added, (r for r, _, _ in report), UsageRecord(day="", person="", channel=""))


def _text(report: list[tuple[UsageRecord, str, str]], since: str, days: int) -> str:
    title = f"Model tokens since {since} ({days} day{'s' if days != 1 else ''}, UTC days)"
    if not report:
        return f"{title}: none recorded."
    table: list[tuple[str, ...]] = [("day", "person", "channel", *_COLUMNS)]
    table += [(r.day, person, channel, *_cells(r)) for r, person, channel in report]
    table.append(("total", "", "", *_cells(_total(report))))
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    lines = [title + ":"]
    for line in table:
        left = [cell.ljust(w) for cell, w in zip(line[:3], widths[:3], strict=True)]
        right = [cell.rjust(w) for cell, w in zip(line[3:], widths[3:], strict=True)]
        lines.append("  ".join(left + right).rstrip())
    lines.append("Budgets count input + output; input includes cache reads and writes.")
    return "\n".join(lines)


def _json(
    report: list[tuple[UsageRecord, str, str]], since: str, days: int, *, names_resolved: bool
) -> dict[str, Any]:
    return {
        "since": since,
        "days": days,
        "names_resolved": names_resolved,
        "rows": [
            {
                "day": r.day,
                "person": {"id": r.person, "name": person},
                "channel": {"id": r.channel, "name": channel},
                **counts(r),
            }
            for r, person, channel in report
        ],
        "total": counts(_total(report)),
    }
