"""A channel session: the channel tools bound to one task's conversation.

This is where the contract's guarantees live, independent of the provider:
arguments are validated by the tool's own model, handles are resolved for this
task only, edit/retract check authorship, writes go through the effect journal,
and every failure becomes an ``{"error": ...}`` result instead of an exception.

The deployment's tools come from ``channel.selection``, writes are journalled by
``channel.journal``, and the store is reached only through ``channel.store.SessionStore``.
A host builds one session per run::

    session = ChannelSession(adapter=..., store=..., task=task, origin=origin, tools=selection, task_dir=...)
    specs = session.active_specs()          # what to offer the model now
    result = await session.call(name, args)  # never raises

The modules, one concern each (each part is a base of :class:`ChannelSession`):

- ``state``: what one session holds, and reading the conversation (``channel_read``);
- ``offer``: which tools are offered now, ``tool_search``/``mcp_search`` and ``skills``;
- ``replies``: posting replies, footers, reactions, edits and retractions;
- ``files``: fetching, attaching and posting documents;
- ``asking``: questions and approvals (the host's cards) and ``no_reply``;
- ``core``: :class:`ChannelSession` itself: streaming the answer and dispatching a call.
"""

from .asking import AskHost
from .core import ChannelSession
from .state import Result

__all__ = ["AskHost", "ChannelSession", "Result"]
