"""The Slack adapter for the channel tools.

Direct host use (without ``app/``)::

    adapter = await SlackAdapter.connect(token=..., api_url="https://slack.com/api/", file_origins=[...])
    session = ChannelSession(adapter=adapter, store=store, task=task, origin=Origin(channel, thread_ts), ...)
    await session.call("channel_reply", {"text": "Hello"})
"""

from .adapter import SlackAdapter, SlackIdentity, features_from_scopes, fetch_identity

__all__ = ["SlackAdapter", "SlackIdentity", "features_from_scopes", "fetch_identity"]
