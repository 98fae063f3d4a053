"""The one place Slack failures become ``ChannelError``s.

``SlackApiError`` (Slack answered ``ok: false`` or HTTP 429) maps by its error
string to the contract's neutral codes (``already_reacted`` and ``no_reaction`` to
``already_done``, ``message_not_found`` to :class:`~channel.errors.MessageGone`, a thread or
channel gone to :class:`~channel.errors.ConversationGone`), Slack's
string kept as ``provider_code`` for logs; transport failures (aiohttp, timeouts) become
``slack_error``. Anything
else raised inside a Slack call is a bug in our code, not Slack's answer: it is
not mapped, so it propagates with its traceback (the run logs it and apologises).
Messages name the method and Slack's error code, never the token or a payload.

Every call through :func:`slack_call` is also reported to the observer it is given
(method, outcome, seconds): each adapter passes its own (``SlackAdapter.on_call``),
so two services in one process count their calls apart. The host uses it for
metrics and logs; this package stays free of any metrics library.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError

from channel.errors import ChannelError, ConversationGone, ErrorCode, MessageGone

log = logging.getLogger(__name__)

#: ``(method, outcome, seconds)``; outcome is ``"ok"``, Slack's error string, or ``"transport"``.
SlackCallObserver = Callable[[str, str, float], None]

_CODES: dict[str, tuple[ErrorCode, str]] = {
    "ratelimited": ("rate_limited", "Slack is rate limiting this; wait a little before trying again."),
    "message_not_found": ("not_found", "That message no longer exists."),
    "thread_not_found": ("not_found", "That thread no longer exists."),
    "channel_not_found": ("not_found", "This conversation is not visible to the bot."),
    "file_not_found": ("not_found", "That file no longer exists or is not visible to the bot."),
    "file_deleted": ("not_found", "That file was deleted."),
    "cant_update_message": ("not_authored", "Slack refused: only messages the bot posted can be edited."),
    "cant_delete_message": ("not_authored", "Slack refused: only messages the bot posted can be deleted."),
    "edit_window_closed": ("slack_error", "The edit window for that message has closed; reply instead."),
    "msg_too_long": ("invalid_arguments", "The text is too long for one Slack message."),
    "msg_blocks_too_long": ("invalid_arguments", "The text is too long for one Slack message."),
    "already_reacted": ("already_done", "You had already added that reaction."),
    "no_reaction": ("already_done", "You have no such reaction on that message."),
    "invalid_name": ("invalid_arguments", "That is not an emoji name this workspace knows."),
    "too_many_reactions": ("slack_error", "That message has too many reactions already."),
    "missing_scope": ("unsupported", "The Slack app is missing a permission (scope) for this."),
    "not_in_channel": ("unsupported", "The bot is not a member of this conversation."),
    "is_archived": ("unsupported", "This conversation is archived."),
    "restricted_action": ("unsupported", "A workspace setting forbids this action."),
}

#: Slack's answers that the message a call names is gone (the rest of ``not_found`` is not).
_MESSAGE_GONE = frozenset({"message_not_found"})
#: Slack's answers that the conversation itself is gone for the bot.
_CONVERSATION_GONE = frozenset({"thread_not_found", "channel_not_found", "is_archived", "not_in_channel"})

#: Slack's refusals that the same write meets again (its blocks or size, the install's credentials).
_REFUSED_FOR_GOOD = frozenset(
    {
        "invalid_blocks",
        "invalid_blocks_format",
        "msg_blocks_too_long",
        "msg_too_long",
        "invalid_auth",
        "not_authed",
        "token_revoked",
        "token_expired",
        "account_inactive",
    }
)

#: Slack answers that do not say whether the write happened (Slack's own "something went wrong";
#: an HTML page from a proxy reads as ``unknown_error``): looked up before they count as failures.
AMBIGUOUS_CODES = frozenset(
    {"unknown_error", "internal_error", "fatal_error", "request_timeout", "service_unavailable"}
)


def map_slack_error(exc: Exception, method: str) -> ChannelError | None:
    """The ``ChannelError`` for a Slack or transport failure; None for anything else (a bug).
    A 5xx, an ambiguous code or a broken connection is marked ``ambiguous``."""
    if isinstance(exc, SlackApiError):
        response = exc.response
        code = str(response.get("error") or "unknown_error") if response is not None else "unknown_error"
        status = response.status_code if response is not None else 0
        if status == 429:
            code = "ratelimited"
        mapped, message = _CODES.get(code, ("slack_error", f"Slack answered {code}."))
        ambiguous = code in AMBIGUOUS_CODES or status >= 500
        if status >= 500:
            message = f"Slack answered HTTP {status} ({code})."
        if code in _MESSAGE_GONE and not ambiguous:
            return MessageGone(f"{method}: {message}", provider_code=code)
        if code in _CONVERSATION_GONE and not ambiguous:
            return ConversationGone(mapped, f"{method}: {message}", provider_code=code)
        for_good = code in _REFUSED_FOR_GOOD and not ambiguous
        return ChannelError(
            mapped, f"{method}: {message}", provider_code=code, ambiguous=ambiguous, for_good=for_good
        )
    if isinstance(exc, asyncio.TimeoutError | aiohttp.ClientError | SlackClientError | OSError):
        return ChannelError(
            "slack_error",
            f"{method}: could not reach Slack ({type(exc).__name__})",
            provider_code="transport",
            ambiguous=True,
        )
    return None


def _observe(observer: SlackCallObserver | None, method: str, outcome: str, started: float) -> None:
    if observer is None:
        return
    try:
        observer(method, outcome, time.perf_counter() - started)
    except Exception:  # an observer's failure must never turn into a failed Slack call
        log.exception("slack call observer failed")


@asynccontextmanager
async def slack_call(method: str, observer: SlackCallObserver | None = None) -> AsyncIterator[None]:
    """Map any Slack or transport failure inside the block to a ``ChannelError``, and report the
    outcome to ``observer``."""
    started = time.perf_counter()
    try:
        yield
    except ChannelError as exc:
        _observe(observer, method, exc.provider_code or exc.code, started)
        raise
    except Exception as exc:
        error = map_slack_error(exc, method)
        if error is None:
            _observe(observer, method, "bug", started)
            raise  # a programming error: keep its type and traceback
        _observe(observer, method, error.provider_code or error.code, started)
        raise error from exc
    _observe(observer, method, "ok", started)
