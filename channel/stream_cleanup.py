"""Setting a streamed answer's messages right as it ends (:mod:`channel.streaming`): parts that
later text changed are corrected, messages that are no part of the answer removed, and the messages
of starts whose answer was lost looked for and removed."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from .errors import ChannelError
from .inbound import InboundMessage
from .reply_host import ReplyHost
from .stream_parts import StreamedMessage

log = logging.getLogger(__name__)


class StreamCleanup:
    """The end-of-answer repairs of one :class:`channel.streaming.AnswerStream`, which owns it and
    hands it its messages: corrections, removals, and the look for messages of lost starts."""

    def __init__(self, session: ReplyHost, *, recipient: InboundMessage | None, feedback: str) -> None:
        self._session = session
        self._recipient = recipient
        self._feedback = feedback
        #: ``channel_stream`` effects of starts whose answer was lost (the message may exist).
        self._lost_starts: list[str] = []

    def lost_start(self, effect_id: str) -> None:
        """A start had no clear answer: its message may exist, and is looked for at the end."""
        self._lost_starts.append(effect_id)

    async def remove_lost(self, messages: Sequence[StreamedMessage]) -> None:
        """Look for messages of starts whose answer was lost (none of ``messages``, the answer's own)
        and remove them; what cannot be looked at now stays journalled for the next run."""
        if not self._lost_starts:
            return
        session = self._session
        mine = {m.posted.ref for m in messages if m.posted is not None}
        after = (self._recipient.id if self._recipient else "") or session.origin.thread
        try:
            for orphan in await session.adapter.find_unfinished(session.origin, after):
                if orphan.ref not in mine:
                    await session.adapter.retract(orphan.ref)
        except ChannelError as exc:
            log.warning("could not remove a stream whose start had no answer: %s", exc.message)
            return
        for effect in self._lost_starts:
            await session.journal.close(effect, {"removed": "its start had no answer"})
        self._lost_starts.clear()

    async def edit(self, message: StreamedMessage, text: str, feedback: str = "") -> None:
        """Correct a streamed message to ``text`` (a failure is logged: the message stays as shown)."""
        if message.posted is None:
            return
        try:
            await self._session.adapter.edit(message.posted.ref, text, feedback=feedback)
            message.shown = text
        except ChannelError as exc:
            log.warning("correcting a streamed message failed: %s", exc.provider_code or exc.code)

    async def repair(
        self, messages: Sequence[StreamedMessage], closed_parts: Sequence[str], parts: Sequence[str]
    ) -> None:
        """Parts closed while the text was still growing must equal the final split ``parts``
        (rarely not: later text can change how earlier Markdown parses): correct them, and remove
        the extra messages of a corrected part. Messages of parts the final split does not have
        are the stream's to drop (:meth:`remove`)."""
        for k, closed in enumerate(closed_parts[: len(parts)]):
            if closed == parts[k]:
                continue
            mine = [m for m in messages if m.part == k]
            if mine:
                await self.edit(mine[0], parts[k], self._feedback if k == len(parts) - 1 else "")
                for extra in mine[1:]:
                    await self.remove(extra, "replaced by a corrected part")

    async def remove(self, message: StreamedMessage, why: str) -> None:
        """Remove ``message`` from the conversation and close its journal entries with ``why``."""
        journal = self._session.journal
        # Deleted as it is, never stopped first: a stopped message carries the effect id, and if the
        # deletion then failed (or the process died) it would pass for a posted answer.
        message.open = False
        removed = True
        if message.posted is not None:
            try:
                await self._session.adapter.retract(message.posted.ref)
            except ChannelError as exc:
                log.warning("removing a streamed message failed: %s", exc.provider_code or exc.code)
                removed = False
        if not message.handle:
            await journal.close(message.effect_id, {"removed": why})
            if message.stream_effect and removed:
                await journal.close(message.stream_effect, {"removed": why})
            # else left open: the next run finds the unfinished message by its ref and removes it
        else:
            self._session.forget_post(message.handle)
