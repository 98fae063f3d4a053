"""One Web API method as the emulator serves it: its handler and the scope it needs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..wire import JSON, Params
from ..workspace import Workspace


@dataclass(frozen=True)
class Method:
    """One Web API method: its handler, and the scope it needs (fixed, or chosen per call)."""

    handler: Callable[[Workspace, Params], JSON]
    scope: str | Callable[[Workspace, Params], str] | None = None

    def required_scope(self, ws: Workspace, params: Params) -> str | None:
        if callable(self.scope):
            return self.scope(ws, params)
        return self.scope
