"""Test doubles for threadbound: a fake Slack, a fake OpenAI-compatible model, Events API deliveries.

They ship with the project so tests and benchmarks share them::

    from testing import FakeSlack, FakeOpenAI, events
"""

from testing import events
from testing.fake_model import FakeOpenAI, Reply, ToolCall
from testing.fake_slack import DEFAULT_SCOPES, Call, FakeSlack, FileRequest, Status

__all__ = [
    "DEFAULT_SCOPES",
    "Call",
    "FakeOpenAI",
    "FakeSlack",
    "FileRequest",
    "Reply",
    "Status",
    "ToolCall",
    "events",
]
