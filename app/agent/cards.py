"""What follows a decision on a card, shared by the operator's approvals (``approval_cards``) and the
agent's own asks (``ask_cards``): both are cards decided once — the store lets the first answer win,
across instances and restarts — after which the card is redrawn without its choices, and a clicker
whose click changed nothing is told why, privately.

Both adapter calls run in the background (:class:`CardDesk`): a click is answered (200) before any
of them, well inside Slack's 3 seconds. ``idle()`` waits for those in flight (tests, shutdown). A
failure in one is logged: the decision is already stored; only the card keeps its choices. A process
killed before its redraw leaves the card showing them: the run the decision resumes redraws it
again unless this process redrew it (:meth:`CardDesk.redraw_once`; redrawing shows the same blocks).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar

from app.clicks import Action
from channel.cards import Card
from channel.contract import ChannelAdapter, guarding
from channel.errors import ChannelError
from storage.base import StoreError

log = logging.getLogger(__name__)
#: Cards this process remembers redrawing (or redrawing now), the newest kept.
_REDRAWN_KEPT = 4096


class DecidedRecord(Protocol):
    """A decided record whose card can be redrawn: where the card is (``card_ts``: the key the
    adapter gave for it, ``adapter.click_key``; "" before it is posted)."""

    @property
    def channel(self) -> str: ...

    @property
    def card_ts(self) -> str: ...


R = TypeVar("R", bound=DecidedRecord)


class CardDesk:
    """The background adapter calls after clicks on decided-once cards (module doc)."""

    def __init__(self, adapter: ChannelAdapter) -> None:
        self.adapter = adapter
        self._tasks: set[asyncio.Task[None]] = set()
        #: Cards redrawn, or being redrawn, by this process since it started (an in-process memory
        #: for speed: after a restart each is redrawn once more).
        self._redrawn: OrderedDict[str, None] = OrderedDict()

    def tell(self, action: Action, text: str) -> None:
        """Tell the clicker ``text`` privately, in the thread of the card they clicked."""
        self._spawn(self._tell(action, text), f"card-note:{action.user_id}")

    def redraw(
        self, card_id: str, load: Callable[[str], Awaitable[R | None]], draw: Callable[[R], Card]
    ) -> None:
        """Redraw the card of ``card_id`` as ``draw`` shows its record, read back by ``load`` (decided)."""
        self._redrawn[card_id] = None
        self._redrawn.move_to_end(card_id)
        while len(self._redrawn) > _REDRAWN_KEPT:
            self._redrawn.popitem(last=False)
        self._spawn(self._redraw(card_id, load, draw), f"card:{card_id}")

    def redraw_once(
        self, card_id: str, load: Callable[[str], Awaitable[R | None]], draw: Callable[[R], Card]
    ) -> None:
        """:meth:`redraw`, unless this process redrew the card (or is redrawing it) already: for the
        run a decision resumes, whose click may have been handled by a process killed before its redraw."""
        if card_id not in self._redrawn:
            self.redraw(card_id, load, draw)

    async def idle(self) -> None:
        """Wait for the calls in flight, and for those they start."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        # A card is redrawn for whoever decided it, whatever run spawned this: not under that run's
        # write guard, or a run losing its lease would leave a decided card showing its choices.
        with guarding(None):
            task = asyncio.create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _tell(self, action: Action, text: str) -> None:
        try:
            where = action.thread_ts
            await self.adapter.tell_privately(action.channel, action.user_id, text, thread_ts=where)
        except ChannelError as exc:
            log.warning("could not tell %s privately: %s", action.user_id, exc.message)

    async def _redraw(
        self, card_id: str, load: Callable[[str], Awaitable[R | None]], draw: Callable[[R], Card]
    ) -> None:
        try:
            record = await load(card_id)
        except StoreError as exc:
            log.warning("could not read %s to update its card: %s", card_id, exc)
            return
        if record is None or not record.card_ts:
            return
        try:
            await self.adapter.update_card(
                self.adapter.clicked_ref(record.channel, record.card_ts), draw(record)
            )
        except ChannelError as exc:
            log.warning("could not update the card of %s: %s", card_id, exc.message)
            self._redrawn.pop(card_id, None)  # the next run it resumes tries again
