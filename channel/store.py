"""What the channel layer needs from storage: the part of the store a session uses.

:class:`SessionStore` is storage's protocol of that part (``storage/base.py``): the task's
handles, its effect journal, its conversation keys and enabled tools, each documented once by the
:class:`~storage.base.Store`. Typing the session with this part alone keeps it off everything else the
store does: a change to scheduling or ingress storage never reaches the tools.
"""

from __future__ import annotations

from storage.base import SessionStore

__all__ = ["SessionStore"]
