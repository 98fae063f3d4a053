"""Slack file uploads into the origin thread (``files_upload_v2``), for the adapter's ``attach``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiofiles
import aiofiles.os
from slack_sdk.web.async_client import AsyncWebClient

from channel.contract import Origin, Uploaded
from channel.errors import ChannelError

from .file_meta import MAX_BYTES, file_meta, mib
from .outbound import Outbound


async def upload(
    client: AsyncWebClient,
    origin: Origin,
    path: Path,
    *,
    title: str | None,
    comment: str | None,
    outbound: Outbound | None = None,
) -> Uploaded:
    """Upload ``path`` into the origin thread (``files_upload_v2``: get URL, POST bytes, complete).

    Through ``outbound`` (the adapter's; paced as a post): a 429 at any step means the file was
    not shared, and the whole upload is made again; an abandoned upload URL is never completed,
    so nothing doubles.
    """
    try:
        size = (await aiofiles.os.stat(path)).st_size
        if size > MAX_BYTES:
            # slack_sdk holds the whole body in memory to POST it; the download bound keeps that sane.
            raise ChannelError(
                "file_refused", f"the file is {mib(size)}; files over {mib(MAX_BYTES)} are not attached."
            )
        # Read here, asynchronously: given a path, slack_sdk would read it with a blocking open().
        async with aiofiles.open(path, "rb") as source:
            data = await source.read()
    except OSError as exc:
        raise ChannelError(
            "not_found", f"could not read {path.name} ({exc.strerror or type(exc).__name__})."
        ) from exc
    response = await (outbound or Outbound()).write(
        "files.upload_v2",
        lambda: client.files_upload_v2(
            channel=origin.channel,
            thread_ts=origin.thread_ts or None,
            file=data,
            filename=path.name,
            title=title,
            initial_comment=comment,
        ),
        channel=origin.channel,
        post=True,
    )
    raw = response.get("file") or (response.get("files") or [{}])[0]
    share_ts = _share_ts(raw, origin.channel)
    return Uploaded(file=file_meta(raw), message_ref=f"{origin.channel}:{share_ts}" if share_ts else None)


def _share_ts(raw: Mapping[str, Any], channel: str) -> str | None:
    """The ts of the message that shared the file in ``channel``, when the answer already has it.

    Slack usually shares asynchronously and answers without ``shares``; then there is no ref
    (no extra ``files.info`` call just to learn it).
    """
    shares = raw.get("shares") or {}
    for bucket in ("public", "private"):
        entries = (shares.get(bucket) or {}).get(channel) or []
        if entries and entries[0].get("ts"):
            return str(entries[0]["ts"])
    return None
