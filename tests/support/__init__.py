"""Test doubles for threadbound: a fake OpenAI-compatible model, Events API deliveries, harnesses.

They ship with the project so tests and benchmarks share them (the Slack emulator
is its own package, ``emulator``)::

    from threadbound_emulator import FakeSlack
    from tests.support import FakeOpenAI, events
"""

from tests.support import events
from tests.support.fake_model import FakeOpenAI, Reply, ToolCall

__all__ = ["FakeOpenAI", "Reply", "ToolCall", "events"]
