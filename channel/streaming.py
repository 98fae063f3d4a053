"""An answer streamed into the conversation as it is written: text grows, steps show, nothing is lost.

The host feeds an :class:`AnswerStream` the text written so far (per source: a model
response's text, a ``channel_reply`` call's ``text`` argument) and the steps of
tools at work; the stream shows them through the adapter's ``open_stream``
(:class:`channel.contract.LiveMessage`), and :meth:`AnswerStream.finish` makes the
messages exactly the reply a non-streamed ``post_markdown`` would have posted:

- **Batching.** The first text is shown at once (one provider call after the first
  word); later text at most every ``interval`` seconds, so a long answer costs a
  handful of calls, not one per token. Only text up to the last whitespace is sent
  while the model writes: an unfinished word (``@ever…``) could still change when
  mass mentions are neutralised.
- **Same Markdown.** The text is neutralised and split with the same functions as a
  post (``strip_mass_mentions``, ``split_markdown``). A part is closed once a later
  part exists; the last one at the end. Text shown that is not in the answer (the
  model wrote before calling a tool) is replaced by the answer when it ends (an edit).
- **Nothing lost, nothing twice.** When the provider closes a message early (time,
  size: :class:`channel.errors.StreamClosed`), the part continues in a new message
  from exactly where the old one stopped. Any other streaming failure stops
  streaming for this answer; what was not shown yet is then posted as ordinary
  messages. Every message is an effect (``channel_reply`` with ``stream: true``)
  opened before it starts; its ref is journalled (``channel_stream``) as soon as the
  provider answers, before any append, so a crashed run's partial message is found
  and removed (:func:`channel.journal.reconcile`) instead of being answered twice.
  A message started while no tool call is handled (the text streams while the model
  writes it, before its call exists) is journalled under the answer's own :attr:`key`:
  a checkpoint names the key, not the entries, so a message started at any moment,
  even after the checkpoint was taken, is found by a resumed run.
- **Handles.** Each message gets its own handle, so edits and retractions work on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

from .contract import Step, StreamStart
from .errors import ChannelError, StreamClosed
from .inbound import InboundMessage
from .journal import STREAM_EFFECT
from .markdown import split_markdown, strip_mass_mentions
from .reply_host import ReplyHost
from .stream_cleanup import StreamCleanup
from .stream_parts import Sources, StreamedMessage, stable_end

log = logging.getLogger(__name__)

#: How an answer's :attr:`AnswerStream.key` begins (a call id never does).
STREAM_KEY_PREFIX = "stream:"
#: Seconds between appends after the first: ~5 calls for a 5-second answer.
FLUSH_INTERVAL = 1.0

Result = dict[str, Any]


class AnswerStream:
    """One answer being streamed for a session (see the module docstring)."""

    def __init__(
        self,
        session: ReplyHost,
        *,
        recipient: InboundMessage | None,
        feedback: str = "",
        interval: float = FLUSH_INTERVAL,
    ) -> None:
        self._session = session
        self._recipient = recipient
        self._feedback = feedback
        self._interval = interval
        #: Sets the messages right as the answer ends (and corrects one that diverged).
        self._cleanup = StreamCleanup(session, recipient=recipient, feedback=feedback)
        self._sources = Sources()
        self._steps: list[Step] = []
        self._messages: list[StreamedMessage] = []
        #: Final text of each part already closed.
        self._closed_parts: list[str] = []
        #: Streaming failed: what is not shown yet is posted when the answer ends.
        self.broken = False
        self._dirty = asyncio.Event()
        self._lock = asyncio.Lock()
        self._flusher: asyncio.Task[None] | None = None
        self._done = False
        #: The call id this answer's entries are journalled under when no tool call is handled.
        self.key = f"{STREAM_KEY_PREFIX}{uuid.uuid4().hex}"
        #: The ``channel_reply`` call this answer is finished by (:attr:`owner`), once the host says.
        self._owner: str | None = None

    # -- what the host feeds ------------------------------------------------------------
    @property
    def sources(self) -> list[str]:
        return list(self._sources.order)

    def text(self, source: str, text: str) -> None:
        """The whole text ``source`` has written so far."""
        if self._done:
            return
        self._sources.set(source, text)
        self._wake()

    def step(self, step: Step) -> None:
        """A step started or ended; shown with the next flush."""
        if self._done:
            return
        self._steps.append(step)
        self._wake()

    @property
    def owner(self) -> str:
        """The id of the one ``channel_reply`` call that finishes this answer: the one the host named
        (:meth:`own`: its step's checkpoint names this answer for it), else the first call whose text
        streamed into it. Any other reply call posts on its own, so a resumed run attributes every
        streamed message to exactly one call."""
        if self._owner is not None:
            return self._owner
        return next((s.removeprefix("call:") for s in self._sources.order if s.startswith("call:")), "")

    def own(self, call_id: str) -> None:
        """Name the call that finishes this answer ("": none of the step's calls)."""
        self._owner = call_id

    @property
    def shown_anything(self) -> bool:
        return bool(self._messages)

    def _wake(self) -> None:
        self._dirty.set()
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush_forever(), name="answer-stream")

    async def _flush_forever(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            async with self._lock:
                if self._done:
                    return
                sent = await self._sync(self._sources.joined(), final=False)
            if sent:
                await asyncio.sleep(self._interval)

    async def _stop_flusher(self) -> None:
        flusher, self._flusher = self._flusher, None
        if flusher is None:
            return
        async with self._lock:
            self._done = True
            flusher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await flusher

    def cancel(self) -> None:
        """Stop flushing without writing anything more (the run is over or cancelled)."""
        self._done = True
        if self._flusher is not None:
            self._flusher.cancel()

    # -- the end ---------------------------------------------------------------------------
    async def finish(self, markdown: str) -> Result:
        """Make the messages exactly ``markdown`` as a reply; returns the reply's result
        (``{message, permalink, parts?}``). Raises ``ChannelError`` when nothing could be posted."""
        await self._stop_flusher()
        self._done = True
        text = strip_mass_mentions(markdown)
        if not text.strip():
            await self.abandon()
            raise ChannelError("invalid_arguments", "text is blank; write the reply in text.")
        parts = split_markdown(text, self._session.adapter.max_post_chars)
        await self._sync(text, final=True, parts=parts)
        await self._cleanup.repair(self._messages, self._closed_parts, parts)
        for message in [m for m in self._messages if m.part >= len(parts)]:
            await self._cleanup.remove(message, "not part of the final answer")
            self._messages.remove(message)
        await self._cleanup.remove_lost(self._messages)
        handles = [m.handle for m in self._messages if m.handle]
        if not handles:
            raise ChannelError("provider_error", "the reply could not be posted")
        first = next(m.posted for m in self._messages if m.posted is not None)
        result: Result = {"message": handles[0], "permalink": first.permalink}
        if len(handles) > 1:
            result["parts"] = handles
        return result

    async def halt(self) -> None:
        """A person stopped the run: end every message still streaming as it stands (its text stays,
        nothing more is sent) and journal it as posted."""
        await self._stop_flusher()
        self._done = True
        for message in self._messages:
            if message.open:
                await self._stop(message, "")

    async def abandon(self) -> None:
        """The text shown was not an answer (the run ended without one): remove every message."""
        await self._stop_flusher()
        self._done = True
        for message in self._messages:
            await self._cleanup.remove(message, "the streamed text was not an answer")
        self._messages.clear()
        await self._cleanup.remove_lost(self._messages)

    # -- showing -----------------------------------------------------------------------------
    async def _sync(self, text: str, *, final: bool, parts: list[str] | None = None) -> bool:
        """Show ``text`` (neutralised and split unless ``parts`` is given); True if a call was made."""
        if parts is None:
            text = strip_mass_mentions(text)
            if not final:
                text = text[: stable_end(text)]
            parts = split_markdown(text, self._session.adapter.max_post_chars) if text.strip() else []
        sent = False
        k = len(self._closed_parts)
        while k < len(parts):
            last = k == len(parts) - 1
            complete = final or not last
            sent |= await self._show(
                k, parts[k], complete=complete, feedback=self._feedback if final and last else ""
            )
            if not complete:
                break
            self._closed_parts.append(parts[k])
            k += 1
        if not parts and self._steps and not self._messages and not self.broken and not final:
            # Steps before any text: open the message with them.
            sent |= await self._start(0, 0, "")
        return sent

    async def _show(self, k: int, target: str, *, complete: bool, feedback: str) -> bool:
        sent = False
        while True:
            mine = [m for m in self._messages if m.part == k]
            current = mine[-1] if mine and mine[-1].open else None
            if current is None:
                pos = mine[-1].base + len(mine[-1].shown) if mine else 0
                rest = target[pos:]
                if not rest.strip():
                    return sent
                if complete or self.broken:
                    if not complete:
                        return sent  # broken: the rest is posted when the answer ends
                    await self._post_whole(k, pos, rest, feedback)
                    return True
                return await self._start(k, pos, rest) or sent
            rest = target[current.base :]
            if not rest.startswith(current.shown):
                if complete:
                    await self._stop(current, "")
                    await self._cleanup.edit(current, rest, feedback)
                    return True
                return sent  # diverged while being written: settled when the part completes
            delta = rest[len(current.shown) :]
            steps = tuple(self._take_steps())
            if delta or steps:
                try:
                    assert current.live is not None
                    await current.live.append(delta, steps)
                    current.shown += delta
                    sent = True
                except StreamClosed as exc:
                    current.shown = (current.shown + delta)[
                        : len(current.shown) + len(delta) - len(exc.unsent)
                    ]
                    current.cut = True
                    await self._stop(current, "")
                    await self._session.stream_closed()  # a person's Stop ends the run here
                    continue  # the rest goes into a new message
                except ChannelError as exc:
                    await self._break(current, exc)
                    continue
            if complete:
                await self._stop(current, feedback)
                if current.open is False and current.base + len(current.shown) < len(target):
                    continue  # closed by the provider at the stop: the rest goes into a new message
                return True
            return sent

    def _take_steps(self) -> list[Step]:
        steps, self._steps = self._steps, []
        return steps

    async def _start(self, k: int, pos: int, rest: str) -> bool:
        session = self._session
        journal = session.journal
        # The intent, before the message exists: a crash before its ref is journalled leaves the
        # bot's unfinished message after ``after`` to be found and removed (journal.reconcile).
        where = {"channel": session.origin.channel, "thread_ts": session.origin.thread}
        after = (self._recipient.id if self._recipient else "") or session.origin.thread
        effect_id = await journal.open(
            "channel_reply",
            {**where, "part": k, "base": pos, "stream": True, "after": after},
            call_id=self.key,
        )
        steps = tuple(self._take_steps())
        try:
            start = StreamStart(rest, steps, effect_id, self._recipient)
            live = await session.adapter.open_stream(session.origin, start)
        except ChannelError as exc:
            if exc.ambiguous:
                # Slack may have started it and nobody could tell: left open, so the message is
                # looked for and removed (at the end of this answer, else by the next run).
                log.warning("starting a stream had no clear answer, posting instead: %s", exc.provider_code)
                unknown = {**where, "ref": "", "reply": effect_id, "after": after}
                self._cleanup.lost_start(await journal.open(STREAM_EFFECT, unknown))
            else:
                log.info("streaming refused, posting instead: %s", exc.provider_code or exc.code)
            await journal.close(effect_id, exc.as_result())
            self.broken = True
            return False
        message = StreamedMessage(part=k, base=pos, effect_id=effect_id, shown=rest, live=live, open=True)
        message.posted = live.posted
        self._messages.append(message)
        # Journalled before any append: a crash from here on finds (and removes) this message.
        message.stream_effect = await journal.open(
            STREAM_EFFECT, {"ref": live.posted.ref, "reply": effect_id}
        )
        return True

    async def _stop(self, message: StreamedMessage, feedback: str) -> None:
        """End a live message (or accept that the provider did) and give it its handle."""
        if message.live is not None and message.open:
            message.open = False
            try:
                await message.live.stop(effect_id=message.effect_id, feedback=feedback)
            except StreamClosed as exc:
                message.cut = True
                if exc.unsent:
                    message.shown = message.shown[: len(message.shown) - len(exc.unsent)]
            except ChannelError as exc:
                log.warning("stopping a stream failed: %s", exc.provider_code or exc.code)
                self.broken = True
                message.cut = True
        await self._record(message)

    async def _record(self, message: StreamedMessage) -> None:
        if message.handle or message.posted is None:
            return
        journal = self._session.journal
        message.handle = await self._session.record_post(message.posted)
        result: dict[str, Any] = {"message": message.handle}
        if message.cut:  # how much of its part it holds: the part is whole only with what follows
            result["chars"] = len(message.shown)
        await journal.close(message.effect_id, result)
        if message.stream_effect:
            await journal.close(message.stream_effect, {"ok": True})

    async def _break(self, message: StreamedMessage, exc: ChannelError) -> None:
        """Streaming failed: keep what is shown, post the rest as ordinary messages at the end."""
        log.warning("streaming failed, posting the rest instead: %s", exc.provider_code or exc.code)
        self.broken = True
        message.cut = True  # it holds what was shown; the rest of its part follows as a post
        await self._stop(message, "")
        message.open = False

    async def _post_whole(self, k: int, pos: int, rest: str, feedback: str) -> None:
        session = self._session
        effect_id = await session.journal.open(
            "channel_reply",
            {
                "channel": session.origin.channel,
                "thread_ts": session.origin.thread,
                "part": k,
                "base": pos,
            },
            call_id=self.key,
        )
        try:
            posted = await session.post_once(rest, effect_id, feedback=feedback)
        except ChannelError as exc:
            await session.journal.close(effect_id, exc.as_result())
            raise
        message = StreamedMessage(part=k, base=pos, effect_id=effect_id, shown=rest, posted=posted)
        self._messages.append(message)
        await self._record(message)
