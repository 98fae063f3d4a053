"""Setting a streamed answer's messages right as it ends (:mod:`channel.streaming`): parts that
later text changed are corrected, messages that are no part of the answer removed, and the messages
of starts whose answer was lost looked for and removed."""

from __future__ import annotations

import logging

from .errors import ChannelError
from .inbound import InboundMessage
from .reply_host import ReplyHost
from .stream_parts import StreamedMessage

log = logging.getLogger(__name__)


class StreamCleanup:
    """The end-of-answer repairs of :class:`channel.streaming.AnswerStream` (its state, declared here)."""

    _session: ReplyHost
    _recipient: InboundMessage | None
    _feedback: str
    _messages: list[StreamedMessage]
    _closed_parts: list[str]
    _unknown: list[str]

    async def _remove_unknown(self) -> None:
        """Look for messages of starts whose answer was lost (none of this answer's own) and remove
        them; what cannot be looked at now stays journalled for the next run."""
        if not self._unknown:
            return
        session = self._session
        mine = {m.posted.ref for m in self._messages if m.posted is not None}
        after = (self._recipient.id if self._recipient else "") or session.origin.thread
        try:
            for orphan in await session.adapter.find_unfinished(session.origin, after):
                if orphan.ref not in mine:
                    await session.adapter.retract(orphan.ref)
        except ChannelError as exc:
            log.warning("could not remove a stream whose start had no answer: %s", exc.message)
            return
        for effect in self._unknown:
            await session.journal.close(effect, {"removed": "its start had no answer"})
        self._unknown.clear()

    async def _edit(self, message: StreamedMessage, text: str, feedback: str = "") -> None:
        if message.posted is None:
            return
        try:
            await self._session.adapter.edit(message.posted.ref, text, feedback=feedback)
            message.shown = text
        except ChannelError as exc:
            log.warning("correcting a streamed message failed: %s", exc.provider_code or exc.code)

    async def _repair(self, parts: list[str]) -> None:
        """Parts closed while the text was still growing must equal the final split (rarely not:
        later text can change how earlier Markdown parses); correct, and remove messages of parts
        the final split does not have."""
        for k, closed in enumerate(self._closed_parts[: len(parts)]):
            if closed == parts[k]:
                continue
            mine = [m for m in self._messages if m.part == k]
            if mine:
                await self._edit(mine[0], parts[k], self._feedback if k == len(parts) - 1 else "")
                for extra in mine[1:]:
                    await self._remove(extra, "replaced by a corrected part")
        for message in [m for m in self._messages if m.part >= len(parts)]:
            await self._remove(message, "not part of the final answer")
            self._messages.remove(message)

    async def _remove(self, message: StreamedMessage, why: str) -> None:
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
