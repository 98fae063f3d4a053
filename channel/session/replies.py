"""Posting: replies (split into parts, journalled, never twice), footers, reactions, edits, retractions."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from functools import partial

from storage.base import EffectRecord, StoreError, retry_if_session_ended

from ..contract import Origin, Posted
from ..errors import ChannelError, bounded
from ..journal import Settle, reconcile
from ..markdown import split_markdown, strip_mass_mentions
from ..tools import EditArgs, ReactArgs, ReplyArgs, RetractArgs, spec_named
from .state import CALL_ID, Result, SessionState

log = logging.getLogger(__name__)

#: Journal tool of a host note posted once by its own effect id (:meth:`Replies.post_note_once`).
NOTE_EFFECT = "host_note"


class Replies:
    """What this run posts in the conversation: replies, host notes, footers; and its reactions,
    edits and retractions. Every write goes through the journal (journal before the write)."""

    def __init__(self, state: SessionState, *, adopt_first_root: bool = False) -> None:
        """``adopt_first_root``: a `run` without --thread posts a new root, and its later posts go
        into that root's thread."""
        self._state = state
        self._adopt_first_root = adopt_first_root
        #: Handles of every message the bot posted in this run.
        self.posted: list[str] = []
        #: Plain posts (not streamed) this run began, numbered from 1; and the number of the
        #: newest that reached its origin thread. Such a post clears the thread's assistant status
        #: (Slack): one begun after a status was set has cleared it (``app.runs.progress``).
        self.posts_begun = 0
        self.last_thread_post = 0
        # The newest post of this run, where a usage footer goes: its ref, text and feedback key.
        self._last_post: tuple[str, str, str] | None = None

    async def reply(self, args: ReplyArgs) -> Result:
        """``channel_reply``: finish the answer streamed for this call, else post the text."""
        answer = self._state.answer
        call_id = CALL_ID.get()
        if answer is not None and call_id and answer.owner == call_id:
            self._state.answer = None
            # Finishing makes the streamed text a whole message without a journal entry of its own
            # (the stream's were opened as it started): what the host holds back goes first.
            await self._state.journal.settle_held()
            result = await answer.finish(args.text)
            self._state.replied = True
            await self.remember_streamed(args.text, result)
            return result
        return await self.post_markdown(args.text)

    async def post_markdown(
        self, markdown: str, *, feedback: bool = True, start: tuple[int, int] = (0, 0)
    ) -> Result:
        """Post Markdown as one or more consecutive messages; the host uses this for fallbacks too
        (``feedback=False``: no feedback buttons, e.g. on an apology). ``start``: (part, offset in
        it) where posting begins, what is before it posted already (:meth:`post_rest`)."""
        text = strip_mass_mentions(markdown)
        parts = split_markdown(text, self._state.adapter.max_post_chars)
        first, offset = start
        if len(parts) <= first:
            raise ChannelError("invalid_arguments", "text is blank; write the reply in text.")
        handles: list[str] = []
        first_permalink: str | None = None
        bridge_error: str | None = None
        for index, whole in enumerate(parts):
            if index < first:
                continue
            base = offset if index == first else 0
            part = whole[base:]
            where = {
                "channel": self._state.origin.channel,
                "thread_ts": self._state.origin.thread,
                "part": index,
            }
            effect_id = await self._state.journal.open(
                "channel_reply", {**where, "base": base} if base else where
            )
            last = index == len(parts) - 1
            self.posts_begun += 1
            begun = self.posts_begun
            try:
                posted = await self.post_once(
                    part, effect_id, feedback=self._state.feedback if feedback and last else ""
                )
            except ChannelError as exc:
                await self._state.journal.close(effect_id, exc.as_result())
                if handles:
                    exc.message = bounded(
                        f"{exc.message} (parts {first + 1}-{index} were posted: {', '.join(handles)})"
                    )
                raise
            if self._state.origin.thread and not posted.new_root:
                self.last_thread_post = max(self.last_thread_post, begun)
            try:
                handle = await self.record_post(posted)
                await self._state.journal.close(effect_id, {"message": handle})
            except StoreError as exc:
                # The provider has the post; never post again. Tell the model what we know (its
                # permalink is in the result; the ref is the adapter's and never shown).
                log.exception("recording a post failed after the provider accepted it")
                handle = "unrecorded"
                bridge_error = bounded(f"posted, but recording it failed: {exc}")
            handles.append(handle)
            self._last_post = (posted.ref, part, self._state.feedback if feedback and last else "")
            if first_permalink is None:
                first_permalink = posted.permalink
        self._state.replied = True
        result: Result = {"message": handles[0], "permalink": first_permalink}
        if len(handles) > 1:
            result["parts"] = handles
        if bridge_error:
            result["bridge_error"] = bridge_error
        return result

    async def post_rest(
        self, markdown: str, reached: tuple[int, int | None] | None, *, feedback: bool = True
    ) -> list[str]:
        """Post what the reply ``markdown`` has after ``reached`` — (part, characters of it shown;
        None: the whole part), as the thread shows it; None: nothing of it — a reply a crash cut off,
        finished under the call it belongs to (``CALL_ID``). Returns the new messages' handles;
        none when nothing was missing."""
        parts = split_markdown(strip_mass_mentions(markdown), self._state.adapter.max_post_chars)
        start = (0, 0)
        if reached is not None:
            part, shown = reached
            cut = shown is not None and part < len(parts) and bool(parts[part][shown:].strip())
            start = (part, shown or 0) if cut else (part + 1, 0)
        if len(parts) <= start[0]:
            return []
        result = await self.post_markdown(markdown, feedback=feedback, start=start)
        return list(result.get("parts") or [result["message"]])

    async def post_note_once(self, effect_id: str, markdown: str) -> None:
        """Post a short host note (no feedback buttons) exactly once across crashes: ``effect_id`` is
        the note's own, so a restart that finds its effect closed, or its post in the thread, does
        not post it again. Its text is journalled with it: a note a crash left open is finished by
        the next run's reconcile (:meth:`settle_notes`) whether or not that run would post it again.
        A note is no reply: the run's answer is still posted after it."""
        known = await self._state.journal.get(effect_id)
        if known is not None and known.result is not None:
            return
        adapter, origin = self._state.adapter, self._state.origin
        # Left open by a run that is gone: looked for until it can no longer land, then posted.
        find = partial(adapter.find_posted, origin, effect_id)
        found = await self._state.journal.look_for(adapter, known, find) if known is not None else []
        if known is None:
            args = {
                "channel": self._state.origin.channel,
                "thread_ts": self._state.origin.thread,
                "text": markdown,
            }
            await self._state.journal.open(NOTE_EFFECT, args, effect_id=effect_id)
        try:
            posted = found[0] if found else await self.post_once(strip_mass_mentions(markdown), effect_id)
        except ChannelError as exc:
            await self._state.journal.close(effect_id, exc.as_result())
            raise
        await self._state.journal.close(effect_id, {"message": await self.record_post(posted)})

    async def settle_notes(self, effects: Sequence[EffectRecord]) -> list[EffectRecord]:
        """Finish the host notes among ``effects`` a crash left open (found in the thread by their
        effect id, else posted); the others, for the journal's reconcile."""
        rest = []
        for effect in effects:
            if effect.tool != NOTE_EFFECT:
                rest.append(effect)
                continue
            text = json.loads(effect.args).get("text")
            try:
                if isinstance(text, str) and text.strip():
                    await self.post_note_once(effect.effect_id, text)
                elif found := await self._state.journal.look_for(
                    self._state.adapter,
                    effect,
                    partial(self._state.adapter.find_posted, self._state.origin, effect.effect_id),
                ):
                    await self._state.journal.close(
                        effect.effect_id, {"message": await self.record_post(found[0])}
                    )
                else:  # journalled without its text (an older version): not found, not posted
                    error = ChannelError("not_found", "the interrupted note is not in the conversation")
                    await self._state.journal.close(effect.effect_id, error.as_result())
            except ChannelError as exc:
                log.warning("could not finish an interrupted note: %s", exc.message)
                left = await self._state.journal.get(effect.effect_id)
                if left is not None and left.result is None:  # settled, never retried run after run
                    await self._state.journal.close(effect.effect_id, exc.as_result())
        return rest

    async def add_footer(self, footer: str) -> None:
        """Show ``footer`` (e.g. the run's usage) under this run's newest post, keeping its text and
        feedback buttons; nothing when it posted nothing. A failure is logged: the answer is there."""
        if self._last_post is None:
            return
        ref, markdown, feedback = self._last_post
        await self._state.journal.check()
        try:
            await self._state.adapter.edit(ref, markdown, feedback=feedback, footer=footer)
        except ChannelError as exc:
            log.warning("could not add the footer to a post: %s", exc.message)

    async def remember_streamed(self, markdown: str, result: Result) -> None:
        """A streamed answer ended as ``result``: its last message is where a footer goes."""
        handles = result.get("parts") or [result.get("message")]
        parts = split_markdown(strip_mass_mentions(markdown), self._state.adapter.max_post_chars)
        if not parts or not isinstance(handles[-1], str) or not handles[-1].startswith("msg_"):
            return
        try:
            record = await self._state.handles.resolve(handles[-1], "msg")
        except (ChannelError, StoreError):
            return
        self._last_post = (record.ref, parts[-1], self._state.feedback)

    async def post_once(self, markdown: str, effect_id: str, *, feedback: str = "") -> Posted:
        """Post, never retrying; when the answer was ambiguous (a broken connection, a 5xx), look for
        the post instead."""
        try:
            return await self._state.adapter.post(
                self._state.origin, markdown, effect_id=effect_id, feedback=feedback
            )
        except ChannelError as exc:
            if not exc.ambiguous:
                raise
            try:
                found = await self._state.adapter.find_posted(self._state.origin, effect_id)
            except ChannelError:
                found = []
            if not found:
                raise
            return found[0]

    async def record_post(self, posted: Posted) -> str:
        """Mint the handle of a message the bot just posted (and route a new root to this task);
        the mint (an upsert) is made again once when the store failed the first."""
        handle = await retry_if_session_ended(
            partial(self._state.handles.mint, "msg", posted.ref, authored=True)
        )
        if handle not in self.posted:
            self.posted.append(handle)
        if posted.new_root:
            await self._state.store.record_root(
                channel=self._state.origin.channel, ts=posted.new_root, task_id=self._state.task.task_id
            )
            if self._adopt_first_root and not self._state.origin.thread:
                await self._state.store.set_task_thread(self._state.task.task_id, posted.new_root)
                self._state.origin = Origin(self._state.origin.channel, posted.new_root)
                self._adopt_first_root = False
        return handle

    def forget_post(self, handle: str) -> None:
        """A message posted in this run was removed again (a streamed text that was no answer)."""
        if handle in self.posted:
            self.posted.remove(handle)

    async def reconcile(self, effects: Sequence[EffectRecord]) -> list[str]:
        """Settle effects a crashed run left open (see :func:`channel.journal.reconcile`)."""
        state = self._state
        return await reconcile(
            state.journal, state.adapter, state.origin, effects, self.record_post, _settle_of
        )

    # -- reactions, edits, retractions ----------------------------------------------------
    async def react(self, args: ReactArgs) -> Result:
        record = await self._state.handles.resolve(args.message, "msg")
        emoji = args.emoji.strip(":")
        add = args.action == "add"

        async def act() -> Result:
            try:
                await self._state.adapter.react(record.ref, emoji, add=add)
            except ChannelError as exc:
                if exc.code != "already_done":
                    raise
                if add:
                    return {"ok": True, "note": f"you had already reacted with :{emoji}:"}
                return {"ok": True, "note": f"there was no :{emoji}: reaction of yours to remove"}
            return {"ok": True}

        return await self._state.journal.write(
            "channel_react", {"ref": record.ref, "emoji": emoji, "add": add}, act
        )

    async def _own(self, handle: str) -> str:
        record = await self._state.handles.resolve(handle, "msg")
        if not record.authored:
            raise ChannelError(
                "not_authored", f"{handle} was not posted by you; you can only change your own messages."
            )
        return record.ref

    async def edit(self, args: EditArgs) -> Result:
        ref = await self._own(args.message)
        text = strip_mass_mentions(args.text)
        if len(text) > self._state.adapter.max_post_chars:
            raise ChannelError(
                "invalid_arguments",
                f"text is {len(text)} characters; one message holds {self._state.adapter.max_post_chars}. "
                "Edit with a shorter text, or reply with the rest.",
            )

        async def act() -> Result:
            await self._state.adapter.edit(ref, text)
            return {"message": args.message}

        return await self._state.journal.write("channel_edit", {"ref": ref, "text": text}, act)

    async def retract(self, args: RetractArgs) -> Result:
        ref = await self._own(args.message)

        async def act() -> Result:
            await self._state.adapter.retract(ref)
            return {"ok": True}

        return await self._state.journal.write("channel_retract", {"ref": ref}, act)


def _settle_of(tool: str) -> Settle | None:
    """How an interrupted entry of ``tool`` settles: its spec's journal policy says."""
    spec = spec_named(tool)
    return spec.journal.settle if spec is not None else None
