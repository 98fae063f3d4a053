"""Who the installed bot is: ``auth.test``'s answer, learnt once at start."""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp

from .errors import SlackCallObserver, slack_call
from .transport import http_session, read_client


@dataclass(frozen=True, slots=True)
class SlackIdentity:
    """What ``auth.test`` says about the installed bot."""

    user_id: str
    bot_id: str
    team_id: str
    team_url: str
    scopes: tuple[str, ...]
    bot_name: str = ""


async def fetch_identity(
    token: str,
    api_url: str,
    *,
    http: aiohttp.ClientSession | None = None,
    on_call: SlackCallObserver | None = None,
) -> SlackIdentity:
    """``auth.test``, over ``http`` when given (the adapter's session), else a session of its own."""
    session = http if http is not None else http_session()
    try:
        async with slack_call("auth.test", on_call):
            response = await read_client(token, api_url, session).auth_test()
    finally:
        if http is None:
            await session.close()
    headers = {k.lower(): v for k, v in (response.headers or {}).items()}
    raw_scopes = headers.get("x-oauth-scopes", "")
    if isinstance(raw_scopes, list):
        raw_scopes = ",".join(raw_scopes)
    scopes = tuple(s.strip() for s in str(raw_scopes).split(",") if s.strip())
    return SlackIdentity(
        user_id=str(response.get("user_id") or ""),
        bot_id=str(response.get("bot_id") or ""),
        team_id=str(response.get("team_id") or ""),
        team_url=str(response.get("url") or ""),
        scopes=scopes,
        bot_name=str(response.get("user") or ""),
    )
