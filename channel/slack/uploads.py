"""Slack file uploads into the origin thread (``files_upload_v2``), for the adapter's ``attach``."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import aiofiles
import aiofiles.os
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from channel.contract import Origin, Uploaded, look_until
from channel.errors import ChannelError

from .content import shared_in
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
    files_info: Callable[[str], Awaitable[Mapping[str, Any]]] | None = None,
    in_flight: float = 0.0,
) -> Uploaded:
    """Upload ``path`` into the origin thread (``files_upload_v2``: get URL, POST bytes, complete).

    Through ``outbound`` (the adapter's; paced as a post): a 429 at any step means the file was
    not shared, and the whole upload is made again; an abandoned upload URL is never completed,
    so nothing doubles. When the completion's answer is ambiguous (a 5xx, ``internal_error``),
    ``files_info`` looks whether the file got shared here anyway (its id is in the request); after
    a gateway's 5xx, which Slack may still apply, it looks again until ``in_flight`` seconds have
    passed (``channel.slack.lookback``) before the upload counts as not done.
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
    response: Any
    try:
        response = await (outbound or Outbound()).write(
            "files.upload_v2",
            lambda: client.files_upload_v2(
                channel=origin.channel,
                thread_ts=origin.thread or None,
                file=data,
                filename=path.name,
                title=title,
                initial_comment=comment,
            ),
            channel=origin.channel,
            post=True,
        )
    except ChannelError as exc:
        found = await _shared_anyway(exc, origin.channel, files_info, in_flight) if exc.ambiguous else None
        if found is None:
            raise
        response = {"file": found}
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


async def _shared_anyway(
    exc: ChannelError,
    channel: str,
    files_info: Callable[[str], Awaitable[Mapping[str, Any]]] | None,
    in_flight: float,
) -> Mapping[str, Any] | None:
    """The file object when an ambiguous ``files.completeUploadExternal`` did share the file in
    ``channel`` after all; None when it did not, or nobody can tell (a dropped connection carries
    no file id: the error stays ambiguous)."""
    cause = exc.__cause__
    if files_info is None or not isinstance(cause, SlackApiError) or cause.response is None:
        return None
    if not str(cause.response.api_url).endswith("files.completeUploadExternal"):
        return None
    try:
        files = json.loads(str((cause.response.req_args.get("params") or {}).get("files") or "[]"))
        file_id = str(files[0]["id"])
    except (ValueError, LookupError, TypeError):
        return None
    look = files_info

    async def shared() -> Mapping[str, Any] | None:
        info = (await look(file_id)).get("file")
        return info if isinstance(info, Mapping) and shared_in(info, channel) else None

    # Counted from now, later than the completion's attempt began: never too soon.
    until = time.monotonic() + in_flight if cause.response.status_code >= 500 else 0.0
    try:
        info = await look_until(shared, until)
    except ChannelError:
        return None
    if info is not None:
        return info
    exc.ambiguous = False  # looked: not shared here
    return None
