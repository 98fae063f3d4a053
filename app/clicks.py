"""What a click is: one clicked element of a ``block_actions`` payload (:class:`Action`) and the
handler a feature registers for it.

Part of the shared base every app package may import (beside ``app.settings`` and ``app.logs``):
the intake routes clicks (``app.intake.interactions``), while the features that own them
(approvals in ``app.agent``, feedback in ``app.runs``) handle them. Imports no app package.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Action:
    """One clicked element of a ``block_actions`` payload, with where and by whom."""

    action_id: str
    #: The clicked element's value (a feedback button's value, an approval id).
    value: str
    #: The element type (``button``, ``feedback_buttons``…).
    type: str
    user_id: str
    #: The person's name as Slack sent it (``user.name``/``username``), may be empty.
    user_name: str
    team_id: str
    channel: str
    #: ts of the message the clicked block belongs to (empty for a view, a modal).
    message_ts: str
    #: The thread that message is in (its own ts when it is a root), may be empty.
    thread_ts: str
    block_id: str = ""
    #: Where Slack accepts a reply to this click (ephemeral), may be empty.
    response_url: str = ""
    #: What the card's inputs held when it was clicked, by input name (``channel.cards.Input``).
    values: Mapping[str, str] = field(default_factory=dict)
    #: The whole payload, for a handler that needs more.
    payload: Mapping[str, Any] = field(default_factory=dict, repr=False)


Handler = Callable[[Action], Awaitable[None]]
