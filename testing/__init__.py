"""Test doubles for threadbound: a fake OpenAI-compatible model, Events API deliveries, harnesses.

They ship with the project so tests and benchmarks share them (the Slack emulator
is its own package, ``emulator``)::

    from emulator import FakeSlack
    from testing import FakeOpenAI, events
"""

from testing import events
from testing.fake_model import FakeOpenAI, Reply, ToolCall

__all__ = ["FakeOpenAI", "Reply", "ToolCall", "events"]
