"""How Slack sees a person now, in one conversation (``channel.contract.Standing``).

Asked afresh each time (``users.info``, then ``conversations.members`` paged until the person is
found): a follow-up fires days after it was scheduled, and what it re-checks must be today's
answer, not a cached one. A guest is ``is_restricted`` (multi-channel) or ``is_ultra_restricted``
(single-channel); a person from another organisation (Slack Connect) has another ``team_id``, or
``is_stranger``. A failed look-up keeps the default of what it would have told (the caller's access
lists still apply) and is logged.
"""

from __future__ import annotations

import logging
from typing import Any

from channel.contract import Origin, Standing
from channel.errors import ChannelError

from .link import SlackLink

log = logging.getLogger(__name__)

__all__ = ["standing"]

#: Members asked for per ``conversations.members`` page, and pages read at most (100,000 people).
_PAGE = 1000
_MAX_PAGES = 100


async def standing(link: SlackLink, origin: Origin, user: str) -> Standing:
    """``user``'s standing in ``origin``'s conversation, as Slack sees it now."""
    found = await _user(link, user)
    if found is None:
        return Standing(member=await _member(link, origin.channel, user))
    own = link.identity.team_id
    team = str(found.get("team_id") or "")
    return Standing(
        active=not found.get("deleted"),
        guest=bool(found.get("is_restricted") or found.get("is_ultra_restricted")),
        external=bool(found.get("is_stranger")) or bool(own and team and team != own),
        member=await _member(link, origin.channel, user),
    )


async def _user(link: SlackLink, user: str) -> dict[str, Any] | None:
    try:
        async with link.call("users.info"):
            response = await link.read_client.users_info(user=user)
    except ChannelError as exc:
        if exc.provider_code in ("user_not_found", "account_inactive"):
            return {"deleted": True}
        log.warning("could not re-check a person (users.info): %s", exc.message)
        return None
    info = response.get("user")
    return info if isinstance(info, dict) else None


async def _member(link: SlackLink, channel: str, user: str) -> bool:
    cursor = ""
    try:
        for _ in range(_MAX_PAGES):
            async with link.call("conversations.members"):
                response = await link.read_client.conversations_members(
                    channel=channel, limit=_PAGE, cursor=cursor or None
                )
            if user in (response.get("members") or []):
                return True
            cursor = str((response.get("response_metadata") or {}).get("next_cursor") or "")
            if not cursor:
                return False
    except ChannelError as exc:
        log.warning("could not re-check a person's membership (conversations.members): %s", exc.message)
    return True
