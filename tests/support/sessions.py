"""A ChannelSession on the real Slack adapter against a FakeSlack, with a real SQLite store.

async with slack_session(slack, tmp_path, channel="C1", thread_ts=root) as env:
    result = await env.session.call("channel_reply", {"text": "hi"})
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from channel.contract import Origin
from channel.selection import ToolSelection, select_tools
from channel.session import ChannelSession
from channel.skills import SkillLibrary
from channel.slack.adapter import SlackAdapter, SlackIdentity
from storage import Store, TaskRecord, open_store
from threadbound_emulator import FakeSlack

#: Seconds a write whose answer was lost counts as maybe applied here (the emulator applies a
#: write at once, or ``late`` by the seconds a test names): short, so a write never applied is
#: reported soon.
IN_FLIGHT_S = 2.0


@dataclass
class SessionEnv:
    slack: FakeSlack
    store: Store
    adapter: SlackAdapter
    channel: str
    tools: ToolSelection
    #: Parent of every task's directory (``<data_dir>/tasks``).
    tasks_dir: Path
    #: The task and session the env was opened on.
    task: TaskRecord = field(init=False)
    session: ChannelSession = field(init=False)

    @property
    def root(self) -> str:
        """The thread of the env's task."""
        return self.task.thread_ts

    @property
    def task_dir(self) -> Path:
        return self.tasks_dir / self.task.task_id

    def new_session(self, task: TaskRecord | None = None) -> ChannelSession:
        """Another session on ``task`` (the env's own by default), as a later run would build it."""
        task = task or self.task
        task_dir = self.tasks_dir / task.task_id
        task_dir.mkdir(parents=True, exist_ok=True)
        return ChannelSession(
            adapter=self.adapter,
            store=self.store,
            task=task,
            origin=Origin(task.channel, task.thread_ts),
            tools=self.tools,
            task_dir=task_dir,
        )

    async def open_session(self, thread_ts: str, *, enabled: Sequence[str] | None = None) -> ChannelSession:
        """A session on the task of ``thread_ts`` in the env's channel (created when new), read
        afresh from the store; ``enabled`` replaces its deferred tools when given."""
        task_id = (
            await self.store.create_task(channel=self.channel, thread_ts=thread_ts, now=time.time())
        ).task_id
        if enabled is not None:
            await self.store.set_enabled_tools(task_id, list(enabled))
        task = await self.store.get_task(task_id)
        assert task is not None
        return self.new_session(task)


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
    skills: SkillLibrary | None = None,
    database_url: str | None = None,
) -> AsyncIterator[SessionEnv]:
    """A session on the task of ``(channel, thread_ts)`` (created when new), with ``enabled``
    deferred tools on and ``skills`` (none by default) offered."""
    store = open_store(database_url or f"sqlite:///{data_dir}/session.db")
    await store.migrate()
    adapter = SlackAdapter(
        token=slack.token,
        api_url=slack.api_url,
        identity=identity_of(slack),
        file_origins=[slack.files_origin],
        in_flight=IN_FLIGHT_S,
    )
    try:
        tools = select_tools(adapter.features.enabled(), None, skills or SkillLibrary([]))
        env = SessionEnv(slack, store, adapter, channel, tools, data_dir / "tasks")
        env.session = await env.open_session(thread_ts, enabled=enabled or None)
        env.task = env.session.task
        yield env
    finally:
        await adapter.close()
        await store.close()
