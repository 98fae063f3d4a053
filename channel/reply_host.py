"""What an answer being streamed needs of the session it answers for.

:class:`ReplyHost` is the part of ``ChannelSession`` that :mod:`channel.streaming` uses,
so the stream does not import the session (the session imports the stream).
"""

from __future__ import annotations

from typing import Protocol

from .contract import ChannelAdapter, Origin, Posted
from .journal import EffectJournal


class ReplyHost(Protocol):
    """The session's side of a streamed answer: where it goes, its journal, its handles."""

    adapter: ChannelAdapter
    journal: EffectJournal
    origin: Origin

    async def post_once(self, markdown: str, effect_id: str, *, feedback: str = "") -> Posted:
        """Post, never retrying; after an ambiguous failure, look for the post instead."""
        ...

    async def record_post(self, posted: Posted) -> str:
        """Mint the handle of a message the bot just posted."""
        ...

    def forget_post(self, handle: str) -> None:
        """A message posted in this run was removed again."""
        ...

    async def stream_closed(self) -> None:
        """The provider closed a message of the answer early: before the answer goes on in a new one,
        the host may end the run here (a person stopped it, and the provider ended its streams)."""
        ...
