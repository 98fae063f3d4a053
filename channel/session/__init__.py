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

:class:`ChannelSession` owns one part per collaborator, each built with what it needs, and they share
one :class:`~channel.session.state.SessionState` (the adapter, store, task, origin, handles and
journal; who asked; whether the run replied; the answer being streamed). A tool call goes to the
handler its spec names:

- ``state``: the shared state, and ``Reading`` (``channel_read``, a message as the model sees it);
- ``offer``: ``Offer``, which tools are offered now, ``tool_search``/``mcp_search`` and ``skills``;
- ``replies``: ``Replies``, posting replies, host notes, footers, reactions, edits and retractions;
- ``files``: ``Files``, fetching, attaching and posting documents;
- ``follow_ups``: ``FollowUpTools``, the follow-up tools;
- ``asking``: ``Asking``, questions and approvals (the host's cards) and ``no_reply``;
- ``core``: :class:`ChannelSession` itself: the parts, streaming the answer and dispatching a call.
"""

from .asking import AskHost
from .core import ChannelSession
from .state import Result

__all__ = ["AskHost", "ChannelSession", "Result"]
