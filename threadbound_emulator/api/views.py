"""``views.publish``: a person's App Home tab, replaced whole on every publish."""

from __future__ import annotations

import json

from ..wire import JSON, Params, SlackError
from ..workspace import Workspace
from .method import Method


def publish(ws: Workspace, params: Params) -> JSON:
    user = str(params.get("user_id") or "")
    if user not in ws.users:
        raise SlackError("user_not_found")
    view = params.get("view")
    if isinstance(view, str):  # form-encoded calls send it as JSON text
        try:
            view = json.loads(view)
        except ValueError:
            raise SlackError("invalid_arguments") from None
    if not isinstance(view, dict) or view.get("type") != "home" or not isinstance(view.get("blocks"), list):
        raise SlackError("invalid_arguments")
    if len(view["blocks"]) > 100:
        raise SlackError("invalid_arguments")
    ws.home_views[user] = view
    return {"view": {"id": f"V{len(ws.home_views):08d}", "type": "home", "blocks": view["blocks"]}}


METHODS = {"views.publish": Method(publish)}
