"""Streamed replies on Slack: ``chat.startStream`` / ``appendStream`` / ``stopStream``, and feedback buttons.

The raw methods are used (not slack_sdk's ``chat_stream`` helper, which buffers by
size): the session decides when to flush, and every call leaves through the
adapter's outbound path (``startStream`` is paced with the channel's posts; a 429
is waited out). Slack's rules this module follows (SLACK-FACTS "AI-app surface"):

- outside a DM the stream names its reader, ``recipient_user_id`` and ``recipient_team_id``;
- a stream is a thread reply (no stream at a DM's top level: the session posts instead);
- it ends after about five minutes, and at 12,000 characters: appends then fail
  (``message_not_in_streaming_state``, ``msg_too_long``) and :class:`StreamClosed` is raised,
  so the session continues in a new message;
- ``stopStream`` takes the effect id as message metadata (``startStream`` takes none) and the
  feedback buttons as blocks; when Slack already ended the stream, ``chat.update`` adds both.

Outgoing text loses Slack's mass-mention syntax (``render.strip_mass_mentions``) like any post.
Text is sent as appended, so a ``<!here>`` split between two appends must not slip through: an
unclosed ``<`` at the end of what arrived is held back until its ``>`` (or the stop) arrives.
"""

from __future__ import annotations

from typing import Any

from channel.cards import FEEDBACK_ACTION
from channel.contract import Origin, Posted, Step
from channel.errors import ChannelError, StreamClosed
from channel.inbound import InboundMessage

from .link import SlackLink, effect_id_of
from .lookback import Lookback, shown_text
from .render import NO_UNFURL, fallback_text, strip_mass_mentions

#: Slack errors meaning the stream is over: the message keeps what it had.
_CLOSED = frozenset({"message_not_in_streaming_state", "msg_too_long"})
#: The title of the plan a streamed answer's steps show in (``task_display_mode: plan``).
PLAN_TITLE = "Working on it"
#: Slack's answers to a ``startStream`` that asked for the plan display it does not offer here.
_PLAN_REFUSED = frozenset({"invalid_arguments", "invalid_task_display_mode", "invalid_chunks"})


def feedback_blocks(key: str) -> list[dict[str, Any]]:
    """A ``context_actions`` block with Slack's feedback buttons; a click reports ``kind:key``."""
    return [
        {
            "type": "context_actions",
            "elements": [
                {
                    "type": "feedback_buttons",
                    "action_id": FEEDBACK_ACTION,
                    "positive_button": {
                        "text": {"type": "plain_text", "text": "Good response"},
                        "accessibility_label": "Mark this answer as helpful",
                        "value": f"positive:{key}",
                    },
                    "negative_button": {
                        "text": {"type": "plain_text", "text": "Bad response"},
                        "accessibility_label": "Mark this answer as not helpful",
                        "value": f"negative:{key}",
                    },
                }
            ],
        }
    ]


def _plan() -> dict[str, Any]:
    return {"type": "plan_update", "title": PLAN_TITLE}


def _chunk(step: Step) -> dict[str, Any]:
    return {"type": "task_update", "id": step.id, "title": step.title[:256], "status": step.status}


def _held(text: str) -> int:
    """Where the sendable part of ``text`` ends: before a ``<`` whose construct is not closed yet."""
    opening = text.rfind("<")
    if opening >= 0 and text.find(">", opening) < 0:
        return opening
    return len(text)


class SlackLiveMessage:
    """One streamed message (see :class:`channel.contract.LiveMessage`).

    Its steps show in Slack's plan display (``task_display_mode: plan``, the steps gathered under a
    ``plan_update`` title) where Slack offers it; the first refusal turns plans off for the process
    and the steps show as today's timeline of task cards."""

    #: Whether streams ask for the plan display (off after Slack refused it once).
    plans = True

    def __init__(self, link: SlackLink, lookback: Lookback, origin: Origin, ts: str) -> None:
        self._link = link
        self._lookback = lookback
        self._channel = origin.channel
        self.ts = ts
        self.posted = Posted(
            ref=f"{origin.channel}:{ts}",
            new_root="",
            permalink=link.permalink(origin.channel, ts, origin.thread),
        )
        #: Markdown handed to us but not sent yet (an unclosed ``<…``).
        self._pending = ""
        #: Markdown the message holds (as sent, mentions neutralised).
        self.sent = ""
        #: The plan's title was sent (steps in plan display), or plans are not used for it.
        self._planned = not SlackLiveMessage.plans

    @classmethod
    async def start(
        cls,
        link: SlackLink,
        lookback: Lookback,
        origin: Origin,
        markdown: str,
        steps: tuple[Step, ...],
        recipient: InboundMessage | None,
    ) -> SlackLiveMessage:
        if not origin.thread:
            raise ChannelError("unsupported", "Slack streams only into a thread.")
        kwargs: dict[str, Any] = {"channel": origin.channel, "thread_ts": origin.thread, **NO_UNFURL}
        user = recipient.author.id if recipient else ""
        if user:
            team = recipient.author.organisation if recipient else ""
            kwargs["recipient_user_id"] = user
            kwargs["recipient_team_id"] = team or link.identity.team_id
        elif not origin.channel.startswith("D"):
            raise ChannelError("unsupported", "Slack streams in channels only to a named person.")
        text = cls._split(markdown)
        plan = cls.plans
        chunks: list[dict[str, Any]] = ([_plan()] if plan and steps else []) + [_chunk(s) for s in steps]
        if text[0]:
            chunks.append({"type": "markdown_text", "text": text[0]})
        if chunks:
            kwargs["chunks"] = chunks
        if plan:
            kwargs["task_display_mode"] = "plan"

        async def send() -> str:
            response = await link.write_client.chat_startStream(**kwargs)
            return str(response["ts"])

        async def check() -> str | None:
            # No effect id to look for: the bot's unfinished message after the one answered, showing
            # exactly what was sent, is this stream (then it goes on in it).
            found = await lookback.unfinished(origin, stream_after(origin, recipient))
            mine = [m for m in found if shown_text(m) == text[0]]
            if len(mine) == 1 and len(found) == 1:
                return str(mine[0]["ts"])
            if found:  # unfinished messages, but not clearly this one: left to be found and removed
                raise ChannelError("slack_error", "the stream's message cannot be told apart")
            return None

        try:
            ts = await lookback.once("chat.startStream", send, check, channel=origin.channel, post=True)
        except ChannelError as exc:
            if not plan or exc.ambiguous or exc.provider_code not in _PLAN_REFUSED:
                raise
            cls.plans = plan = False  # no plan display here: today's timeline of task cards instead
            kwargs.pop("task_display_mode", None)
            rest = [c for c in kwargs.get("chunks", []) if c["type"] != "plan_update"]
            kwargs.pop("chunks", None)
            if rest:
                kwargs["chunks"] = rest
            ts = await lookback.once("chat.startStream", send, check, channel=origin.channel, post=True)
        live = cls(link, lookback, origin, ts)
        live._planned = not plan or bool(steps)
        live.sent, live._pending = text
        return live

    @staticmethod
    def _split(markdown: str) -> tuple[str, str]:
        """(what can be sent now, neutralised; what waits)."""
        cut = _held(markdown)
        return strip_mass_mentions(markdown[:cut]), markdown[cut:]

    async def append(self, markdown: str, steps: tuple[Step, ...] = ()) -> None:
        sendable, pending = self._split(self._pending + markdown)
        chunks: list[dict[str, Any]] = [_chunk(s) for s in steps]
        if steps and not self._planned:  # the first steps of a plan: its title first
            chunks.insert(0, _plan())
            self._planned = True
        if sendable:
            chunks.append({"type": "markdown_text", "text": sendable})
        if not chunks:
            self._pending = pending
            return

        async def send() -> bool:
            await self._link.write_client.chat_appendStream(
                channel=self._channel, ts=self.ts, chunks=chunks, **NO_UNFURL
            )
            return True

        async def check() -> bool | None:
            now = await self._lookback.message(self.posted.ref)
            shown = shown_text(now) if now is not None else None
            if shown == self.sent + sendable:
                return True
            if shown == self.sent and sendable:
                return None
            raise ChannelError("slack_error", "the streamed message does not show what was sent")

        try:
            await self._lookback.once("chat.appendStream", send, check)
        except ChannelError as exc:
            if exc.provider_code in _CLOSED:
                # The held-back text is reported unsent here, once: the stop that follows must not
                # report it again (the continuation would start that much too early and repeat it).
                unsent, self._pending = self._pending + markdown, ""
                raise StreamClosed(exc.message, unsent=unsent, provider_code=exc.provider_code) from exc
            raise
        self.sent += sendable
        self._pending = pending

    async def stop(self, *, effect_id: str, feedback: str = "") -> None:
        rest = strip_mass_mentions(self._pending)
        metadata = self._link.effect_metadata(effect_id)
        kwargs: dict[str, Any] = {"channel": self._channel, "ts": self.ts, "metadata": metadata, **NO_UNFURL}
        if rest:
            kwargs["chunks"] = [{"type": "markdown_text", "text": rest}]
        if feedback:
            kwargs["blocks"] = feedback_blocks(feedback)

        async def send() -> bool:
            await self._link.write_client.chat_stopStream(**kwargs)
            return True

        async def check() -> bool | None:
            return True if await self._marked(effect_id) else None

        try:
            await self._lookback.once("chat.stopStream", send, check)
        except ChannelError as exc:
            if exc.provider_code not in _CLOSED:
                # Not stopped: mark it as ours anyway, so it is not taken for an unfinished orphan.
                self.sent += rest
                self._pending = ""
                try:
                    await self._mark(metadata, feedback)
                except ChannelError:
                    raise exc from None
                return
            # Slack ended it first: the message keeps what it had; mark it as ours with an update.
            await self._mark(metadata, feedback)
            raise StreamClosed(exc.message, unsent=self._pending, provider_code=exc.provider_code) from exc
        self.sent += rest
        self._pending = ""

    async def _marked(self, effect_id: str) -> bool:
        now = await self._lookback.message(self.posted.ref)
        return now is not None and effect_id_of(now) == effect_id

    async def _mark(self, metadata: dict[str, Any], feedback: str) -> None:
        blocks: list[dict[str, Any]] = [{"type": "markdown", "text": self.sent}] if self.sent else []
        if feedback:
            blocks += feedback_blocks(feedback)

        async def send() -> bool:
            await self._link.write_client.chat_update(
                channel=self._channel,
                ts=self.ts,
                text=fallback_text(self.sent) or " ",
                blocks=blocks,
                metadata=metadata,
                **NO_UNFURL,
            )
            return True

        async def check() -> bool | None:
            return True if await self._marked(str(metadata["event_payload"]["effect_id"])) else None

        await self._lookback.once("chat.update", send, check)


def stream_after(origin: Origin, recipient: InboundMessage | None) -> str:
    """The message a stream comes after: the one it answers, else the thread's root."""
    return (recipient.id if recipient else "") or origin.thread
