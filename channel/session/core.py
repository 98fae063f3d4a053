"""The session itself: the answer streamed as it is written, and one tool call dispatched, never raising."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import cached_property
from typing import Any

from pydantic import ValidationError

from storage.base import EffectRecord, LeaseMoved, StoreError
from storage.crashpoints import crash_point

from ..contract import Step
from ..errors import ChannelError
from ..inbound import InboundMessage
from ..journal import JOURNAL_ONLY
from ..streaming import FLUSH_INTERVAL, AnswerStream
from ..tools import CATALOG, MCP_SEARCH
from .asking import Asking
from .files import Files
from .follow_ups import FollowUpTools
from .offer import Offer
from .replies import Replies
from .state import CALL_ID, Result

log = logging.getLogger(__name__)


class ChannelSession(Replies, Files, Offer, FollowUpTools, Asking):
    """The channel tools bound to one task's conversation (see :mod:`channel.session`)."""

    @cached_property
    def _handlers(self) -> dict[str, Callable[[Any], Awaitable[Result]]]:
        return {
            "channel_reply": self._reply,
            "channel_read": self._read,
            "channel_react": self._react,
            "channel_edit": self._edit,
            "channel_retract": self._retract,
            "channel_fetch_file": self._fetch_file,
            "channel_attach": self._attach,
            "channel_post_document": self._post_document,
            "channel_follow_up": self._follow_up,
            "channel_follow_ups": self._follow_ups,
            "channel_cancel_follow_up": self._cancel_follow_up,
            "tool_search": self._tool_search,
            "mcp_search": self._tool_search,
            "skills": self._skills,
            "channel_ask": self._ask,
            "channel_request_approval": self._request_approval,
            "channel_check_approval": self._check_approval,
            "no_reply": self._no_reply,
        }

    async def reconcile(self, effects: Sequence[EffectRecord]) -> list[str]:
        """Settle effects a crashed run left open: the asks' cards through the ask host (found by
        their effect id, so posted once), host notes finished once, the rest by the journal
        (``channel.journal.reconcile``)."""
        rest = await self.settle_notes(await self.settle_asks(effects))
        return await super().reconcile(rest) if rest else []

    # -- streaming ----------------------------------------------------------------------
    def stream_answers(self, recipient: InboundMessage | None, *, interval: float = FLUSH_INTERVAL) -> bool:
        """Stream answers from now on, when the adapter can stream here (a thread); ``recipient`` is the
        inbound message answered. Returns whether streaming is on."""
        self._streaming = self.adapter.features.stream and bool(self.origin.thread)
        self._recipient = recipient
        self._interval = interval
        return self._streaming

    @property
    def streaming(self) -> bool:
        """Answers stream, and the current one (if any) has not fallen back to posts."""
        return self._streaming and not (self.answer is not None and self.answer.broken)

    def _answer_stream(self) -> AnswerStream:
        if self.answer is None:
            self.answer = AnswerStream(
                self, recipient=self._recipient, feedback=self.feedback, interval=self._interval
            )
        return self.answer

    def stream_text(self, source: str, text: str) -> None:
        """What ``source`` wrote so far: ``text:…`` a model response's text (shown until the session
        replied), ``call:<id>`` a channel_reply call's ``text`` argument."""
        if not self._streaming or self.silent or (self.replied and not source.startswith("call:")):
            return
        if not text and self.answer is None:
            return
        self._answer_stream().text(source, text)

    def stream_step(self, step: Step) -> None:
        """A tool started or ended; shown in the answer being streamed (not after the reply)."""
        if not self._streaming or (self.replied and self.answer is None):
            return
        self._answer_stream().step(step)

    async def answer_with(self, markdown: str) -> Result:
        """The run's final text as the reply: the streamed answer finished with it, or posted."""
        answer, self.answer = self.answer, None
        if answer is not None:
            result = await answer.finish(markdown)
            self.replied = True
            await self._remember_streamed(markdown, result)
            return result
        return await self.post_markdown(markdown)

    def stop_streaming(self) -> None:
        """Stop feeding the answer being streamed (the run is over); writes nothing."""
        self._streaming = False
        if self.answer is not None:
            self.answer.cancel()

    async def drop_answer(self) -> None:
        """The run ended without the streamed text becoming an answer: remove what was shown."""
        answer, self.answer = self.answer, None
        if answer is not None:
            await answer.abandon()

    # -- calling ----------------------------------------------------------------------
    async def call(self, name: str, args: Any, *, call_id: str = "") -> Result:
        """Run one tool call; always returns a result (an error result on any refusal or failure).
        ``call_id`` is the model's id for the call (a streamed reply is matched by it)."""
        crash_point("tool.call")  # a step's checkpoint may still be held here (app.runs.checkpoint)
        token = CALL_ID.set(call_id)
        try:
            return await self._call(name, args)
        finally:
            CALL_ID.reset(token)

    async def _call(self, name: str, args: Any) -> Result:
        spec = MCP_SEARCH if name == MCP_SEARCH.name else CATALOG.get(name)
        if spec is None or not self.offered(name):
            deferred = any(s.name == name for s in (*self.tools.deferred, *self.tools.host_deferred))
            hint = " Use tool_search to enable it." if deferred else ""
            return ChannelError("unsupported", f"There is no tool {name!r} available now.{hint}").as_result()
        try:
            parsed = spec.args.model_validate(args if args is not None else {})
        except ValidationError as exc:
            return _validation_error(exc).as_result()
        try:
            if name not in JOURNAL_ONLY:
                # It may write outside the journal: what the host held back goes first (journal doc).
                await self.journal.settle_held()
            return await self._handlers[name](parsed)
        except ChannelError as exc:
            return exc.as_result()
        except LeaseMoved:
            raise  # the host may no longer act for the task: its run stops (no result to report)
        except StoreError:
            # Our storage, not Slack: say so, or the model would blame (and retry against) Slack.
            log.exception("store failure in tool %s", name)
            return ChannelError(
                "tool_failed", "Internal storage error; the action may not have happened."
            ).as_result()


_HANDLE_FIELDS = {"message": "msg", "file": "file", "follow_up": "fu"}


def _validation_error(exc: ValidationError) -> ChannelError:
    # A raw Slack ts or file id in a handle field is a handle problem, and the model should hear so.
    for err in exc.errors():
        field_name = str(err["loc"][0]) if err["loc"] else ""
        if field_name in _HANDLE_FIELDS and err["type"] == "string_pattern_mismatch":
            kind = _HANDLE_FIELDS[field_name]
            return ChannelError(
                "invalid_handle",
                f"{field_name} must be a {kind}_… handle from channel_read or your prompt; "
                "raw Slack ids and timestamps are not accepted.",
            )
    return ChannelError("invalid_arguments", _describe(exc))


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err["loc"]) or "arguments"
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown argument {loc!r}")
        else:
            parts.append(f"{loc}: {err['msg']}")
    return "invalid arguments: " + "; ".join(parts)
