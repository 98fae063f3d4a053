"""Where Slack shows the app outside a conversation: a person's App Home tab (``views.publish``) and
the private answers an interaction's ``response_url`` takes (a slash command, a click).

Neither is a message in a thread, so neither goes through the effect journal: publishing a Home view
again replaces it whole, and a ``response_url`` answer is one person's private note.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import aiohttp

from channel.errors import ChannelError

from .link import SlackLink

log = logging.getLogger(__name__)

#: How long a ``response_url`` answer may take before it counts as failed.
_RESPOND_TIMEOUT = aiohttp.ClientTimeout(total=10)


class Surfaces:
    """The App Home tab and ``response_url`` answers over one adapter's link."""

    def __init__(self, link: SlackLink) -> None:
        self.link = link

    def thread_link(self, channel: str, thread_ts: str) -> str | None:
        """A link to a conversation: its thread's root, or a DM's top level (built, not looked up)."""
        if thread_ts:
            return self.link.permalink(channel, thread_ts)
        team_url = self.link.identity.team_url
        return f"{team_url.rstrip('/')}/archives/{channel}" if team_url else None

    async def publish_home(self, user: str, view: Mapping[str, Any]) -> None:
        """Show ``view`` (``{"type": "home", "blocks": [...]}``) as ``user``'s App Home tab."""
        async with self.link.call("views.publish"):
            await self.link.read_client.views_publish(user_id=user, view=dict(view))

    async def respond(self, response_url: str, body: Mapping[str, Any]) -> None:
        """Post ``body`` (``text``, ``blocks``, ``replace_original``…) to an interaction's
        ``response_url``; the token is not sent (the URL is its own credential)."""
        if not response_url.startswith(("https://", "http://127.0.0.1", "http://localhost")):
            raise ChannelError("invalid_arguments", "a response_url must be an https URL")
        try:
            async with self.link.http.post(response_url, json=dict(body), timeout=_RESPOND_TIMEOUT) as answer:
                text = await answer.text()
                if answer.status >= 300:
                    raise ChannelError("slack_error", f"response_url answered {answer.status}: {text[:200]}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ChannelError("slack_error", f"response_url failed: {exc}") from exc
