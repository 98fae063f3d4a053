"""Slack canvases: the adapter's ``post_document``, a canvas shared read-only and linked in the thread."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from slack_sdk.web.async_client import AsyncWebClient

from channel.contract import Document, Origin
from channel.errors import ChannelError, bounded

from .errors import SlackCallObserver, slack_call


async def create_canvas(
    client: AsyncWebClient,
    origin: Origin,
    title: str,
    markdown: str,
    *,
    permalink_of: Callable[[str], Awaitable[str | None]],
    observer: SlackCallObserver | None = None,
) -> Document:
    """Create a canvas with ``client`` (the writes client), share it read-only with the origin's
    channel and link it in the thread; ``permalink_of`` looks up a file's permalink (a read)."""
    async with slack_call("canvases.create", observer):
        created = await client.canvases_create(
            title=title, document_content={"type": "markdown", "markdown": markdown}
        )
    canvas_id = str(created["canvas_id"])
    try:
        async with slack_call("canvases.access.set", observer):
            await client.canvases_access_set(
                canvas_id=canvas_id, access_level="read", channel_ids=[origin.channel]
            )
        permalink = await permalink_of(canvas_id)
        if permalink:
            async with slack_call("chat.postMessage", observer):
                await client.chat_postMessage(
                    channel=origin.channel,
                    thread_ts=origin.thread_ts or None,
                    text=f"📄 <{permalink}|{_escape(title)}>",
                )
    except ChannelError as exc:
        # The canvas exists already: say so, or the model would create a duplicate on retry.
        exc.message = bounded(f"{exc.message} (the canvas itself was created: do not create it again)")
        raise
    return Document(ref=canvas_id, permalink=permalink)


def _escape(text: str) -> str:
    # Slack's mrkdwn control characters; "<!channel>" in a title must not become a mention.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "¦")
