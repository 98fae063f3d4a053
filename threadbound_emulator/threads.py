"""Slack's threading rules in one place: where a message is, which thread it belongs to, what a reply
does to its root, what the bot's own messages look like. The Web API methods
(``threadbound_emulator.api``) and the workspace's set-up helpers share them.
"""

from __future__ import annotations

from typing import Any

from .records import FAKE_HOST, Channel
from .wire import JSON, Params, SlackError, ts_key


class MessageRules:
    """The rules over a workspace's stored messages; :class:`~threadbound_emulator.workspace.Workspace`
    is built on it and sets these attributes."""

    bot_user_id: str
    bot_id: str
    app_id: str
    team_id: str
    bot_name: str
    channels: dict[str, Channel]
    _messages: dict[str, list[JSON]]

    def channel(self, params: Params, key: str = "channel") -> Channel:
        """The conversation a call names, or ``channel_not_found``."""
        chan = self.channels.get(str(params.get(key) or ""))
        if chan is None:
            raise SlackError("channel_not_found")
        return chan

    def stored(self, channel: str) -> list[JSON]:
        """The channel's stored messages themselves (not copies), oldest first."""
        return self._messages.setdefault(channel, [])

    def find(self, channel: str, ts: str) -> JSON | None:
        try:
            key = ts_key(ts)
        except ValueError:
            return None
        for message in self._messages.get(channel, []):
            if ts_key(message["ts"]) == key:
                return message
        return None

    @staticmethod
    def is_reply(message: JSON) -> bool:
        return "thread_ts" in message and message["thread_ts"] != message["ts"]

    def is_bots(self, message: JSON) -> bool:
        return message.get("bot_id") == self.bot_id or message.get("user") == self.bot_user_id

    def insert(self, channel: str, message: JSON) -> None:
        """Store a message in ts order."""
        stored = self._messages.setdefault(channel, [])
        key = ts_key(message["ts"])
        index = len(stored)
        while index > 0 and ts_key(stored[index - 1]["ts"]) > key:
            index -= 1
        stored.insert(index, message)

    def attach_reply(self, root: JSON, reply: JSON) -> None:
        """Make ``reply`` part of ``root``'s thread, updating the root's reply summary."""
        reply["thread_ts"] = root["ts"]
        reply["parent_user_id"] = root.get("user", "")
        root["thread_ts"] = root["ts"]
        root["reply_count"] = int(root.get("reply_count", 0)) + 1
        users = list(root.get("reply_users", []))
        if reply.get("user") and reply["user"] not in users:
            users.append(reply["user"])
        root["reply_users"] = users
        root["reply_users_count"] = len(users)
        if ts_key(reply["ts"]) > ts_key(str(root.get("latest_reply") or root["ts"])):
            root["latest_reply"] = reply["ts"]

    def thread(self, channel: str, ts: str) -> list[JSON]:
        """The thread containing ``ts``, root first ([] if there is no such message)."""
        message = self.find(channel, ts)
        if message is None:
            return []
        root_ts = message["thread_ts"] if self.is_reply(message) else message["ts"]
        root = self.find(channel, root_ts)
        stored = self._messages.get(channel, [])
        replies = [m for m in stored if self.is_reply(m) and m["thread_ts"] == root_ts]
        return ([root] if root is not None else []) + replies

    def thread_root(self, channel: str, thread_ts: Any) -> str | None:
        """The root ts a post with ``thread_ts`` goes under (a reply's ts maps to its root)."""
        if thread_ts in (None, ""):
            return None
        target = self.find(channel, str(thread_ts))
        if target is None:
            raise SlackError("thread_not_found")
        return str(target["thread_ts"]) if self.is_reply(target) else str(target["ts"])

    def bot_message(self, text: str, ts: str) -> JSON:
        """A new message as the bot posts it."""
        return {
            "type": "message",
            "user": self.bot_user_id,
            "bot_id": self.bot_id,
            "app_id": self.app_id,
            "text": text,
            "ts": ts,
            "team": self.team_id,
            "bot_profile": {"id": self.bot_id, "app_id": self.app_id, "name": self.bot_name},
        }

    def permalink(self, channel: str, message: JSON) -> str:
        link = f"{FAKE_HOST}/archives/{channel}/p{message['ts'].replace('.', '')}"
        if self.is_reply(message):
            link += f"?thread_ts={message['thread_ts']}&cid={channel}"
        return link

    def react(self, message: JSON, name: str, user: str) -> None:
        """Add ``user``'s reaction ``name``; ``already_reacted`` if it is there."""
        reactions: list[JSON] = message.setdefault("reactions", [])
        for reaction in reactions:
            if reaction["name"] == name:
                if user in reaction["users"]:
                    raise SlackError("already_reacted")
                reaction["users"].append(user)
                reaction["count"] = len(reaction["users"])
                return
        reactions.append({"name": name, "users": [user], "count": 1})
