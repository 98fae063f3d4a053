"""What the channel layer needs from storage: the part of the store a session uses.

:class:`SessionStore` is storage's ``SessionMethods`` (``storage/sqlstore_session.py``): the task's
handles, its effect journal, its conversation keys and enabled tools, each defined (and its contract
documented) once there. Typing the session with this part alone keeps it off everything else the
store does: a change to scheduling or ingress storage never reaches the tools.
"""

from __future__ import annotations

from storage.sqlstore_session import SessionMethods as SessionStore

__all__ = ["SessionStore"]
