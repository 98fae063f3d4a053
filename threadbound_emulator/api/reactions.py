"""``reactions.*``: the bot adds and removes its own reactions on stored messages."""

from __future__ import annotations

import re

from ..wire import JSON, Params, SlackError
from ..workspace import Workspace
from .method import Method

REACTION_NAME = re.compile(r"[a-z0-9_+'-]+")


def _target(ws: Workspace, params: Params) -> tuple[JSON, str]:
    chan = ws.channel(params)
    name = str(params.get("name") or "")
    if not REACTION_NAME.fullmatch(name):
        raise SlackError("invalid_name")
    message = ws.find(chan.id, str(params.get("timestamp") or ""))
    if message is None:
        raise SlackError("message_not_found")
    return message, name


def add(ws: Workspace, params: Params) -> JSON:
    message, name = _target(ws, params)
    ws.react(message, name, ws.bot_user_id)
    return {}


def remove(ws: Workspace, params: Params) -> JSON:
    message, name = _target(ws, params)
    reactions: list[JSON] = message.get("reactions", [])
    for reaction in reactions:
        if reaction["name"] == name and ws.bot_user_id in reaction["users"]:
            reaction["users"].remove(ws.bot_user_id)
            reaction["count"] = len(reaction["users"])
            if not reaction["users"]:
                reactions.remove(reaction)
            if not reactions:
                message.pop("reactions", None)
            return {}
    raise SlackError("no_reaction")


METHODS = {
    "reactions.add": Method(add, "reactions:write"),
    "reactions.remove": Method(remove, "reactions:write"),
}
