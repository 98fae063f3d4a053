"""Slack canvases: the adapter's ``post_document``, a canvas shared read-only and linked in the thread."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from slack_sdk.web.async_client import AsyncWebClient

from channel.contract import Document, Origin
from channel.errors import ChannelError, bounded

from .outbound import Outbound
from .render import NO_UNFURL


async def create_canvas(
    client: AsyncWebClient,
    origin: Origin,
    title: str,
    markdown: str,
    *,
    permalink_of: Callable[[str], Awaitable[str | None]],
    outbound: Outbound | None = None,
) -> Document:
    """Create a canvas with ``client`` (the writes client), share it read-only with the origin's
    channel and link it in the thread; ``permalink_of`` looks up a file's permalink (a read).
    Every write goes through ``outbound`` (the adapter's): the link is paced as a post."""
    outbound = outbound or Outbound()
    created = await outbound.write(
        "canvases.create",
        lambda: client.canvases_create(
            title=title, document_content={"type": "markdown", "markdown": markdown}
        ),
    )
    canvas_id = str(created["canvas_id"])
    try:
        await outbound.write(
            "canvases.access.set",
            lambda: client.canvases_access_set(
                canvas_id=canvas_id, access_level="read", channel_ids=[origin.channel]
            ),
        )
        permalink = await permalink_of(canvas_id)
        if permalink:
            link = f"📄 <{permalink}|{_escape(title)}>"
            await outbound.write(
                "chat.postMessage",
                lambda: client.chat_postMessage(
                    channel=origin.channel, thread_ts=origin.thread or None, text=link, **NO_UNFURL
                ),
                channel=origin.channel,
                post=True,
            )
    except ChannelError as exc:
        # The canvas exists already: say so, or the model would create a duplicate on retry.
        exc.message = bounded(f"{exc.message} (the canvas itself was created: do not create it again)")
        raise
    return Document(ref=canvas_id, permalink=permalink)


def _escape(text: str) -> str:
    # Slack's mrkdwn control characters; "<!channel>" in a title must not become a mention.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "¦")
