"""The Web API methods the emulator answers, one module per method family.

``METHODS`` maps a method name (``chat.postMessage``) to its handler and the scope
it needs. A handler takes the workspace and the call's parameters, returns the
answer's fields (``ok`` is added by the server) or raises ``SlackError``.
"""

from __future__ import annotations

from . import assistant, canvases, chat, conversations, files, reactions, streams, users, views
from .method import Method

METHODS: dict[str, Method] = {
    **users.METHODS,
    **chat.METHODS,
    **streams.METHODS,
    **conversations.METHODS,
    **reactions.METHODS,
    **files.METHODS,
    **canvases.METHODS,
    **assistant.METHODS,
    **views.METHODS,
}

__all__ = ["METHODS", "Method"]
