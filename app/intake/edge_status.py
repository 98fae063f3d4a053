"""A new conversation's "is thinking…", set by the HTTP edge's own process right after its 200.

The edge is the first to know that a delivery started a conversation (its claim created the task),
and at one conversation at a time it has a core to itself while the service builds the run: the
status call's work (building the request, the round trip, reading the answer) is done here, not
on the process that runs the turn. The service's :class:`~app.runs.progress.Progress` hears
``status`` ``setting`` before the task's wake-up and ``ok``/``failed`` once Slack answered, and
takes the status as its run's own (refreshed, cleared at the end) instead of setting it again.

Only where a run would set it itself: ``PROGRESS`` ``auto`` or ``status``, Slack's ``status``
feature granted, and a thread to show it in (a top-level direct message has none). And only while
the edge is otherwise idle — no other delivery in flight, at most :data:`MAX_CALLS` status calls
of its own under way: acknowledgements come first, so under a burst the runs set their statuses
themselves, as they do without the edge. Each Slack call made here is reported to the service's
metrics (``slack_call``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from app.runs.progress import THINKING
from app.settings import Settings
from channel.contract import Origin
from channel.errors import ChannelError
from channel.slack.adapter import SlackAdapter
from channel.slack.identity import SlackIdentity
from channel.slack.scopes import features_from_scopes

from .edge_wire import ToService
from .router import Decision

log = logging.getLogger(__name__)

#: Seconds a stopping edge lets status calls in flight finish (their outcomes still cross).
CLOSE_WAIT = 1.0
#: Status calls the edge makes at once at most; beyond them (or with another delivery in flight)
#: the run sets the status itself.
MAX_CALLS = 2


class EdgeStatus:
    """Shows the thinking status of conversations this edge's claims created."""

    def __init__(self, adapter: SlackAdapter, loading_messages: Sequence[str], wire: ToService) -> None:
        self._adapter = adapter
        self._loading = tuple(loading_messages)
        self._wire = wire
        self._calls: set[asyncio.Task[None]] = set()

    @classmethod
    def of(
        cls, settings: Settings, bot: SlackIdentity, said: dict[str, Any] | None, wire: ToService
    ) -> EdgeStatus | None:
        """From the service's hello: None when its runs show no status (``said`` is None)."""
        if said is None or not features_from_scopes(bot.scopes).status:
            return None
        adapter = SlackAdapter(
            token=settings.slack_bot_token.get_secret_value(),
            api_url=settings.slack_api_url,
            identity=bot,
            file_origins=settings.slack_file_origins,
            write_deadline=settings.write_deadline,
            on_call=wire.slack_call,
        )
        return cls(adapter, said.get("loading", ()), wire)

    def created(self, task_id: str, decision: Decision) -> None:
        """The claim of ``decision`` created task ``task_id``: say so before its wake-up, and set the
        status once this loop lap (and with it the 200) is done."""
        if not decision.thread_ts:
            return  # a top-level direct message: no thread to show a status in
        if self._wire.in_flight > 1 or len(self._calls) >= MAX_CALLS:
            return  # acks come first: under a burst the run sets its own status, as without the edge
        self._wire.send(t="status", task=task_id, state="setting")
        call = asyncio.create_task(self._show(task_id, Origin(decision.channel, decision.thread_ts)))
        self._calls.add(call)
        call.add_done_callback(self._calls.discard)

    async def _show(self, task_id: str, origin: Origin) -> None:
        ok = False
        try:
            await self._adapter.set_status(origin, THINKING, self._loading)
            ok = True
        except ChannelError as exc:
            log.debug("edge: status not shown (%s)", exc.provider_code or exc.code)
        except Exception:  # the run then tries its own indicator; nothing here may fail the edge
            log.warning("edge: status failed unexpectedly", exc_info=True)
        finally:
            self._wire.send(t="status", task=task_id, state="ok" if ok else "failed")

    async def close(self) -> None:
        """Let calls in flight finish (briefly), then close the adapter's connections."""
        if self._calls:
            _, late = await asyncio.wait(set(self._calls), timeout=CLOSE_WAIT)
            for call in late:
                call.cancel()  # its outcome still crosses ("failed"): the run sets its own
            if late:
                await asyncio.wait(late)
        await self._adapter.close()
