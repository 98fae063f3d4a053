"""A ChannelSession on the real Slack adapter against a FakeSlack, with a real SQLite store.

async with slack_session(slack, tmp_path, channel="C1", thread_ts=root) as env:
    result = await env.session.call("channel_reply", {"text": "hi"})
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from channel.contract import Origin
from channel.session import ChannelSession, select_tools
from channel.skills import SkillLibrary
from channel.slack.adapter import SlackAdapter, SlackIdentity
from storage import Store, TaskRecord, open_store

from .fake_slack import FakeSlack


@dataclass
class SessionEnv:
    slack: FakeSlack
    store: Store
    adapter: SlackAdapter
    task: TaskRecord
    session: ChannelSession
    task_dir: Path

    def new_session(self, task: TaskRecord | None = None) -> ChannelSession:
        """Another session on the same task (as a later run would build it)."""
        task = task or self.task
        return ChannelSession(
            adapter=self.adapter,
            store=self.store,
            task=task,
            origin=Origin(task.channel, task.thread_ts),
            tools=self.session.tools,
            task_dir=self.task_dir,
        )


def identity_of(slack: FakeSlack, scopes: Sequence[str] | None = None) -> SlackIdentity:
    return SlackIdentity(
        user_id=slack.bot_user_id,
        bot_id=slack.bot_id,
        team_id=slack.team_id,
        team_url="https://fake.slack.com/",
        scopes=tuple(slack.scopes if scopes is None else scopes),
        bot_name=slack.bot_name,
    )


@asynccontextmanager
async def slack_session(
    slack: FakeSlack,
    data_dir: Path,
    *,
    channel: str,
    thread_ts: str,
    enabled: Sequence[str] = (),
    database_url: str | None = None,
) -> AsyncIterator[SessionEnv]:
    store = open_store(database_url or f"sqlite:///{data_dir}/session.db")
    await store.migrate()
    adapter = SlackAdapter(
        token=slack.token,
        api_url=slack.api_url,
        identity=identity_of(slack),
        file_origins=[slack.files_origin],
    )
    try:
        created = await store.create_task(channel=channel, thread_ts=thread_ts, now=time.time())
        if enabled:
            await store.set_enabled_tools(created.task_id, list(enabled))
        task = await store.get_task(created.task_id)
        assert task is not None
        task_dir = data_dir / "tasks" / task.task_id
        task_dir.mkdir(parents=True, exist_ok=True)
        session = ChannelSession(
            adapter=adapter,
            store=store,
            task=task,
            origin=Origin(channel, thread_ts),
            tools=select_tools(adapter.features.enabled(), None, SkillLibrary([])),
            task_dir=task_dir,
        )
        yield SessionEnv(slack, store, adapter, task, session, task_dir)
    finally:
        await adapter.close()
        await store.close()
