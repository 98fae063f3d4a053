"""A task's saved transcript as model messages: loading it, and trimming it to fit the model."""

from __future__ import annotations

import logging

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest, UserPromptPart

log = logging.getLogger(__name__)


def trim_history(messages: list[ModelMessage], limit: int) -> list[ModelMessage]:
    """The newest part of a transcript of at most ``limit`` messages, starting at a person's prompt.

    A conversation that goes on for months (a DM's top level) must not outgrow the model's context
    and end every run in an error; cutting only before a user prompt keeps tool calls with their results.
    """
    if len(messages) <= limit:
        return messages
    for start in range(len(messages) - limit, len(messages)):
        message = messages[start]
        if isinstance(message, ModelRequest) and any(isinstance(p, UserPromptPart) for p in message.parts):
            return messages[start:]
    return []


def load_history(transcript: bytes) -> list[ModelMessage]:
    if not transcript:
        return []
    try:
        return list(ModelMessagesTypeAdapter.validate_json(transcript))
    except ValueError:
        # A transcript from an incompatible pydantic-ai version must not brick the task.
        log.warning("discarding an unreadable transcript")
        return []
