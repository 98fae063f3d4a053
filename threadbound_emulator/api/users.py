"""``auth.test``, ``users.info`` and user groups: who the bot is, and who the workspace's people are."""

from __future__ import annotations

from ..records import FAKE_HOST
from ..wire import JSON, Params, SlackError
from ..workspace import Workspace
from .method import Method


def auth_test(ws: Workspace, params: Params) -> JSON:
    return {
        "url": f"{FAKE_HOST}/",
        "team": ws.team,
        "user": ws.bot_name,
        "team_id": ws.team_id,
        "user_id": ws.bot_user_id,
        "bot_id": ws.bot_id,
        "is_enterprise_install": False,
    }


def info(ws: Workspace, params: Params) -> JSON:
    user = ws.users.get(str(params.get("user") or ""))
    if user is None:
        raise SlackError("user_not_found")
    profile: JSON = {
        "display_name": user.display_name,
        "real_name": user.real_name,
        "display_name_normalized": user.display_name,
        "real_name_normalized": user.real_name,
        "team": user.team_id or ws.team_id,
    }
    if user.bot_id:
        profile["bot_id"] = user.bot_id
    return {
        "user": {
            "id": user.id,
            "team_id": user.team_id or ws.team_id,
            "name": user.name,
            "real_name": user.real_name,
            "deleted": user.deleted,
            "is_bot": user.is_bot,
            "is_restricted": user.is_restricted,
            "is_ultra_restricted": user.is_ultra_restricted,
            "is_app_user": False,
            "tz": user.tz or "America/Los_Angeles",
            "profile": profile,
        }
    }


def usergroups_list(ws: Workspace, params: Params) -> JSON:
    groups = [
        {"id": g.id, "team_id": ws.team_id, "handle": g.handle, "name": g.name, "user_count": len(g.users)}
        for g in ws.usergroups.values()
    ]
    return {"usergroups": groups}


def usergroups_users(ws: Workspace, params: Params) -> JSON:
    group = ws.usergroups.get(str(params.get("usergroup") or ""))
    if group is None:
        raise SlackError("no_such_subteam")
    return {"users": list(group.users)}


METHODS = {
    "auth.test": Method(auth_test),
    "users.info": Method(info, "users:read"),
    "usergroups.list": Method(usergroups_list, "usergroups:read"),
    "usergroups.users.list": Method(usergroups_users, "usergroups:read"),
}
