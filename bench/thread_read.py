"""thread_read_calls and author_lookups: paging a 2,000-message thread to its end with ``channel_read``.

Setup. FakeSlack (in this process: only calls are counted here, not time) holds one thread of
2,000 messages (the root and 1,999 replies) written round-robin by 25 people. Ours is a
``ChannelSession`` over a ``SlackAdapter`` and a SQLite store, calling ``channel_read`` (pages of
15) and then ``channel_read(cursor=next_cursor)`` until ``next_cursor`` is null. The baseline is
the reader a bot would write without a cache: ``conversations.replies`` with ``limit=15`` per page
(following ``next_cursor``), and ``users.info`` for the author of every row.

Measurement. Web API calls counted on FakeSlack while reading (the adapter's ``auth.test``
identity is given up front, as the server has it from start-up).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from channel.contract import Origin
from channel.selection import select_tools
from channel.session import ChannelSession
from channel.skills import SkillLibrary
from channel.slack.adapter import SlackAdapter, SlackIdentity
from storage import open_store
from threadbound_emulator import FakeSlack

from . import Row, Scale

ROWS = ("thread_read_calls", "author_lookups")
CHANNEL = "C0THREAD"


def _thread(slack: FakeSlack, messages: int, authors: int) -> str:
    for a in range(authors):
        slack.add_user(f"U{a:03d}", f"user{a}", display_name=f"User {a}")
    slack.add_channel(CHANNEL, "long-thread")
    root = slack.add_message(CHANNEL, "<@UBOT> the start of a long thread", user="U000")
    for n in range(1, messages):
        slack.add_message(CHANNEL, f"reply {n}", user=f"U{n % authors:03d}", thread_ts=root)
    return root


async def _ours(slack: FakeSlack, root: str, tmp: Path, page: int) -> tuple[int, int, int]:
    """(pages read, non-users.info calls, users.info calls) for our full read."""
    store = open_store(f"sqlite:///{tmp}/store.db")
    await store.migrate()
    identity = SlackIdentity(
        user_id=slack.bot_user_id,
        bot_id=slack.bot_id,
        team_id=slack.team_id,
        team_url="https://fake.slack.com/",
        scopes=tuple(slack.scopes),
        bot_name=slack.bot_name,
    )
    adapter = SlackAdapter(
        token=slack.token, api_url=slack.api_url, identity=identity, file_origins=[slack.files_origin]
    )
    try:
        task = await store.create_task(channel=CHANNEL, thread_ts=root, now=time.time())
        session = ChannelSession(
            adapter=adapter,
            store=store,
            task=task,
            origin=Origin(CHANNEL, root),
            tools=select_tools(adapter.features.enabled(), None, SkillLibrary([])),
            task_dir=tmp / "task",
        )
        before = len(slack.calls)
        pages, cursor = 0, None
        while True:
            args: dict[str, object] = {"limit": page}
            if cursor is not None:
                args["cursor"] = cursor
            result = await session.call("channel_read", args)
            if "error" in result:
                raise RuntimeError(f"channel_read failed: {result}")
            pages += 1
            cursor = result["next_cursor"]
            if cursor is None:
                break
        calls = slack.calls[before:]
        lookups = sum(1 for c in calls if c.method == "users.info")
        return pages, len(calls) - lookups, lookups
    finally:
        await adapter.close()
        await store.close()


async def _page_per_call(slack: FakeSlack, root: str, page: int) -> tuple[int, int]:
    """(conversations.replies calls, users.info calls) of the uncached page-per-call reader."""
    client = slack.web_client()
    try:
        before = len(slack.calls)
        cursor: str | None = None
        while True:
            response = await client.conversations_replies(channel=CHANNEL, ts=root, limit=page, cursor=cursor)
            for message in response["messages"]:
                await client.users_info(user=message["user"])
            cursor = (response.get("response_metadata") or {}).get("next_cursor") or None
            if not cursor:
                break
        calls = slack.calls[before:]
        lookups = sum(1 for c in calls if c.method == "users.info")
        return len(calls) - lookups, lookups
    finally:
        if client.session is not None:
            await client.session.close()


async def run(scale: Scale) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="bench-thread-") as tmp:
        async with FakeSlack() as slack:
            root = _thread(slack, scale.thread_messages, scale.thread_authors)
            pages, ours_calls, ours_lookups = await _ours(slack, root, Path(tmp), scale.page)
            base_calls, base_lookups = await _page_per_call(slack, root, scale.page)
    note = (
        f"{scale.thread_messages} messages, {scale.thread_authors} authors, pages of {scale.page}: "
        f"{pages} channel_read calls"
    )
    return [
        Row("thread_read_calls", ours_calls, base_calls, "calls", "<= 2 calls", absolute=True, note=note),
        Row(
            "author_lookups",
            ours_lookups,
            base_lookups,
            "users.info calls",
            f"<= {scale.thread_authors} calls",
            absolute=True,
            note=note,
        ),
    ]
