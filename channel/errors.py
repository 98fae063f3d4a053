"""Errors a channel tool can report to the model.

Tree::

    ChannelError            every refusal or failure a tool turns into a result
    ├── code "invalid_arguments"   the call's arguments break the tool's schema
    ├── code "invalid_handle"      a handle that is unknown, another task's, forged, or a raw provider id
    ├── code "not_authored"        edit/retract of a message the bot did not post
    ├── code "unsupported"         the adapter or this conversation cannot do it
    ├── code "file_refused"        a download or upload refused for safety (origin, size, type, path)
    ├── code "not_found"           the provider says the object is gone
    │   └── MessageGone            ... and that object is the message the call names (a write to it
    │                              that a crash interrupted counts as done: the effect journal)
    ├── code "already_done"        the write had taken effect already (the reaction was there, or was
    │                              gone): its callers count it done, so the model never reads this code
    ├── code "rate_limited"        the provider kept refusing for rate limits
    ├── code "provider_error"      any other provider failure (the provider's code is in the message)
    ├── code "slack_error"         the Slack adapter's name for provider_error (the contract's code)
    ├── code "tool_failed"         failed inside threadbound (its storage, the task's disk), not the provider
    ├── code "denied"              refused by the host's rules, whatever the arguments (a ceiling on
    │                              follow-ups scheduled with no person writing in between)
    └── StreamClosed               the provider ended a streamed message early (time, size): a new one goes on

Adapters map provider exceptions into ``ChannelError`` at one place each
(``channel.slack.errors``); the session turns it into
``{"error": {"code": ..., "message": ...}}``. A tool call never raises to the agent, but for
two exceptions that end the run instead of informing the model: the store's refusal of a fenced
write (the lease moved), and :class:`Unsettled` (a write whose outcome cannot be recorded or told
yet: the run stops and is taken up again). Callers branch on these codes and classes;
``provider_code`` (the provider's own string) is for logs.
"""

from __future__ import annotations

from typing import Any, Literal

ErrorCode = Literal[
    "invalid_arguments",
    "invalid_handle",
    "not_authored",
    "unsupported",
    "file_refused",
    "not_found",
    "already_done",
    "rate_limited",
    "provider_error",
    "slack_error",
    "tool_failed",
    "denied",
]

#: Bound on any message shown to the model, in bytes of UTF-8.
MAX_MESSAGE_BYTES = 512


def bounded(text: str, limit: int = MAX_MESSAGE_BYTES) -> str:
    """Cut ``text`` to at most ``limit`` UTF-8 bytes without splitting a character."""
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text
    return raw[: limit - 3].decode("utf-8", errors="ignore") + "..."


class ChannelError(Exception):
    """A refusal or failure with a contract error code and a message the model can read."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        provider_code: str | None = None,
        ambiguous: bool = False,
        for_good: bool = False,
    ) -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = bounded(message)
        #: The provider's own error string (e.g. Slack's ``already_reacted``), for logs and metrics.
        self.provider_code = provider_code
        #: The provider may have done it anyway (a dropped connection, a 5xx, ``internal_error``):
        #: look before reporting it failed or doing it again.
        self.ambiguous = ambiguous
        #: The provider refused this write and will refuse it again as long as nothing else changes
        #: (content it rejects, credentials it no longer accepts): not worth another attempt.
        self.for_good = for_good

    def as_result(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message}}


class MessageGone(ChannelError):
    """The message a call names no longer exists (code ``not_found``, as the model reads it)."""

    def __init__(self, message: str, *, provider_code: str | None = None) -> None:
        super().__init__("not_found", message, provider_code=provider_code)


class ConversationGone(ChannelError):
    """The conversation itself can no longer be written to (deleted, archived, the bot removed): a
    run there ends without an apology. Its code (``not_found`` or ``unsupported``) is what the model
    reads, as before."""


class StreamClosed(ChannelError):
    """The provider closed a streamed message before we did (it expired, or is full): the message
    keeps what it had, and the answer continues in a new message. Never reaches the model."""

    def __init__(self, message: str, *, unsent: str = "", provider_code: str | None = None) -> None:
        super().__init__("provider_error", message, provider_code=provider_code)
        #: The end of the Markdown handed to the stream that the message does not show.
        self.unsent = unsent


class Unsettled(Exception):
    """A write that was made, or may have been, whose outcome cannot be recorded or told yet: the
    store failed once it was made, or the provider's answer was ambiguous and the look at what it
    holds failed. Telling the model "it failed" would have it made again, so it is not told: the
    write's journal entry stays open, the run stops writing (as a run whose store failed does) and
    is taken up again later, when the resumed run settles the entry (found, or not). Never reaches
    the model."""
