"""Slack file objects as contract metadata, and the size bound every file transfer keeps.

The adapter, downloads and uploads all read Slack's file objects through :func:`file_meta`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from channel.contract import FileMeta

#: Largest file fetched or attached (Guarded files).
MAX_BYTES = 100 * 2**20


#: The ``file_access`` value the adapter gives a forwarded file not shared in this conversation.
NOT_SHARED_HERE = "not_shared_here"
#: The ``file_access`` value the adapter gives a file past the look-ups one message may cost.
NOT_LOOKED_UP = "not_looked_up"

#: Stand-ins Slack sends instead of a file the bot may not see, and what the model is told.
_UNAVAILABLE = {
    ("mode", "tombstone"): "the file was deleted",
    ("mode", "hidden_by_limit"): "the file is hidden by the workspace's plan limits",
    ("file_access", "check_file_info"): "Slack does not let the bot see this file",
    ("file_access", "access_denied"): "Slack does not let the bot see this file",
    ("file_access", "file_not_found"): "the file was deleted or is not shared with the bot",
    ("file_access", NOT_SHARED_HERE): (
        "the file was forwarded from another conversation and is not shared in this one; "
        "ask for it to be shared here"
    ),
    ("file_access", NOT_LOOKED_UP): (
        "too many files are named here for the bot to check them all; ask for this one to be shared again"
    ),
}


def file_meta(raw: Mapping[str, Any]) -> FileMeta:
    """A file object from an event, ``files.info`` or a history row, as contract metadata.

    Slack Connect events may carry only ``{id, file_access: "check_file_info"}``: the
    adapter resolves those with ``files.info`` first; a stub it could not resolve, and a
    deleted or hidden file, is marked ``unavailable`` with no made-up type or size.
    """
    for (key, value), reason in _UNAVAILABLE.items():
        if raw.get(key) == value:
            name = raw.get("name") or raw.get("title")
            return FileMeta(
                ref=str(raw.get("id") or ""),
                name=str(name) if name else "a file",
                media_type="",
                size=0,
                unavailable=reason,
            )
    data: dict[str, object] = {}
    url = raw.get("url_private_download") or raw.get("url_private")
    if url:
        data["url"] = str(url)
    if raw.get("mp4_low"):
        data["mp4_low"] = str(raw["mp4_low"])
    return FileMeta(
        ref=str(raw.get("id") or ""),
        name=str(raw.get("name") or raw.get("title") or "file"),
        media_type=str(raw.get("mimetype") or "application/octet-stream"),
        size=_size(raw.get("size")),
        data=data,
    )


def _size(value: Any) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


def mib(size: int) -> str:
    """``size`` in MiB for messages to the model."""
    return f"{size / 2**20:.1f} MiB"
