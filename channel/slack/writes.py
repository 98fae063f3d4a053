"""Writing to Slack: posts (marked with their effect id), edits, deletions, reactions,
ephemeral notes, agent-view status, titles and prompts, and opening a streamed message.

Every write leaves through the adapter's :class:`.outbound.Outbound` (paced per channel,
429s waited out) and is never retried here; an ambiguous answer (a dropped connection, a
5xx, ``internal_error``…) is settled by a look at Slack (:mod:`.lookback`): a post by its
effect id, an edit by the text shown, a deletion by the message being gone, a reaction by
the bot being among its users. An ephemeral note and a status cannot be looked up.
Outgoing text loses Slack's mass-mention syntax (``render.strip_mass_mentions``), and every
write carrying it asks Slack for no link or media previews (``render.NO_UNFURL``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from channel.contract import LiveMessage, Origin, Posted, StreamStart

from .link import split_ref
from .lookback import Lookback, shown_text
from .render import NO_UNFURL, fallback_text, strip_mass_mentions
from .stream import SlackLiveMessage, feedback_blocks

#: Seconds a status line may wait out rate limits: shown minutes late it would be wrong.
STATUS_DEADLINE = 10.0


class Writes(Lookback):
    """The writing half of the adapter (mixed into ``SlackAdapter``)."""

    async def post(self, origin: Origin, markdown: str, *, effect_id: str, feedback: str = "") -> Posted:
        markdown = strip_mass_mentions(markdown)
        blocks: list[dict[str, Any]] = [{"type": "markdown", "text": markdown}]
        if feedback:
            blocks += feedback_blocks(feedback)
        return await self._post_message(origin, fallback_text(markdown), blocks, effect_id)

    async def post_blocks(
        self, origin: Origin, text: str, blocks: Sequence[Mapping[str, Any]], *, effect_id: str
    ) -> Posted:
        """Post a host message built of Block Kit ``blocks`` (an approval card), marked with
        ``effect_id`` like :meth:`post` so :meth:`find_posted` finds it after a crash. Never retried."""
        return await self._post_message(origin, text, [dict(b) for b in blocks], effect_id)

    async def _post_message(
        self, origin: Origin, text: str, blocks: list[dict[str, Any]], effect_id: str
    ) -> Posted:
        kwargs: dict[str, Any] = {
            "channel": origin.channel,
            "text": text,
            "blocks": blocks,
            "metadata": self.effect_metadata(effect_id),
            **NO_UNFURL,
        }
        if origin.thread:
            kwargs["thread_ts"] = origin.thread

        async def send() -> Posted:
            response = await self.writes.chat_postMessage(**kwargs)
            return self.posted(origin, str(response["ts"]))

        async def check() -> Posted | None:
            found = await self.find_posted(origin, effect_id)
            return found[0] if found else None

        return await self.once("chat.postMessage", send, check, channel=origin.channel, post=True)

    async def update_blocks(self, ref: str, text: str, blocks: Sequence[Mapping[str, Any]]) -> None:
        """Replace a host message's text and blocks (an approval card once decided)."""
        channel, ts = split_ref(ref)

        async def send() -> bool:
            await self.writes.chat_update(
                channel=channel, ts=ts, text=text, blocks=[dict(b) for b in blocks], **NO_UNFURL
            )
            return True

        async def check() -> bool | None:
            now = await self.message(ref)
            return True if now is not None and now.get("text") == text else None

        await self.once("chat.update", send, check)

    async def tell_privately(self, channel: str, user: str, text: str, *, thread_ts: str = "") -> None:
        """Show ``text`` to ``user`` only (``chat.postEphemeral``), in ``thread_ts`` when given."""
        kwargs: dict[str, Any] = {"channel": channel, "user": user, "text": text}
        if thread_ts:
            kwargs["thread_ts"] = thread_ts
        await self.outbound.write(
            "chat.postEphemeral", lambda: self.writes.chat_postEphemeral(**kwargs), channel=channel
        )

    async def react(self, ref: str, emoji: str, *, add: bool) -> None:
        channel, ts = split_ref(ref)

        async def send() -> bool:
            if add:
                await self.writes.reactions_add(channel=channel, timestamp=ts, name=emoji)
            else:
                await self.writes.reactions_remove(channel=channel, timestamp=ts, name=emoji)
            return True

        async def check() -> bool | None:
            now = await self.message(ref)
            if now is None:
                return None
            ours = any(
                r.get("name") == emoji and self.identity.user_id in (r.get("users") or [])
                for r in now.get("reactions") or []
            )
            return True if ours == add else None

        await self.once("reactions.add" if add else "reactions.remove", send, check)

    async def edit(self, ref: str, markdown: str, *, feedback: str = "", footer: str = "") -> None:
        markdown = strip_mass_mentions(markdown)
        channel, ts = split_ref(ref)
        blocks: list[dict[str, Any]] = [{"type": "markdown", "text": markdown}]
        if footer:
            blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": footer}]})
        if feedback:
            blocks += feedback_blocks(feedback)

        async def send() -> bool:
            await self.writes.chat_update(
                channel=channel, ts=ts, text=fallback_text(markdown), blocks=blocks, **NO_UNFURL
            )
            return True

        async def check() -> bool | None:
            now = await self.message(ref)
            return True if now is not None and shown_text(now) == markdown else None

        await self.once("chat.update", send, check)

    async def retract(self, ref: str) -> None:
        channel, ts = split_ref(ref)

        async def send() -> bool:
            await self.writes.chat_delete(channel=channel, ts=ts)
            return True

        async def check() -> bool | None:
            return True if await self.message(ref) is None else None

        await self.once("chat.delete", send, check)

    async def open_stream(self, origin: Origin, start: StreamStart) -> LiveMessage:
        return await SlackLiveMessage.start(self, origin, start.markdown, start.steps, start.recipient)

    async def set_title(self, origin: Origin, title: str) -> None:
        """Name a DM thread in Slack's agent view (``assistant.threads.setTitle``)."""
        await self.outbound.write(
            "assistant.threads.setTitle",
            lambda: self.writes.assistant_threads_setTitle(
                channel_id=origin.channel, thread_ts=origin.thread, title=title
            ),
            deadline=STATUS_DEADLINE,
        )

    async def suggest_prompts(self, origin: Origin, prompts: Sequence[str]) -> None:
        """Offer prompts in a new agent-view thread (``assistant.threads.setSuggestedPrompts``)."""
        entries = [{"title": p[:75], "message": p} for p in prompts]
        await self.outbound.write(
            "assistant.threads.setSuggestedPrompts",
            lambda: self.writes.assistant_threads_setSuggestedPrompts(
                channel_id=origin.channel, thread_ts=origin.thread, prompts=entries
            ),
            deadline=STATUS_DEADLINE,
        )

    async def set_status(self, origin: Origin, status: str, loading_messages: Sequence[str] = ()) -> None:
        await self.outbound.write(
            "assistant.threads.setStatus",
            lambda: self.writes.assistant_threads_setStatus(
                channel_id=origin.channel,
                thread_ts=origin.thread,
                status=status,
                loading_messages=list(loading_messages) or None,
            ),
            deadline=STATUS_DEADLINE,
        )
