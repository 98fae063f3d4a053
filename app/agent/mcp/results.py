"""What an MCP tool returns, mapped for the model: text and JSON as they are, everything else a file.

pydantic-ai maps text, images and audio (``BinaryContent``); a *resource* it would hand the model as
bare text or a URI. Here a resource becomes a file in the task's directory like an image does, so
``channel_attach`` can post it: an embedded resource (``EmbeddedResource``) from its own content, a
resource link (``ResourceLink``) read from its server with ``resources/read`` (at most
:data:`MAX_LINKS` links a result, each bounded by the server's answer limit). A link that cannot be
read stays a link, with the reason.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

#: Resource links read per result; the rest stay links (a result naming hundreds must not read hundreds).
MAX_LINKS = 5

#: Reads one resource: its contents as the SDK gives them (``TextResourceContents``/``BlobResourceContents``).
ReadResource = Callable[[str], Awaitable[list[Any]]]


@dataclass(frozen=True, slots=True)
class ResourceFile:
    """A resource's bytes, to be saved in the task's directory under (a safe form of) ``name``."""

    uri: str
    name: str
    media_type: str
    data: bytes


def resource_name(uri: str, fallback: str = "resource") -> str:
    """The last path segment of ``uri`` ("report.csv" of ``file:///x/report.csv``), else ``fallback``."""
    path = urlsplit(uri).path or uri
    name = PurePosixPath(path).name
    return name or fallback


def contents_file(uri: str, contents: Any, media_type: str | None = None) -> ResourceFile:
    """One ``TextResourceContents``/``BlobResourceContents`` as a :class:`ResourceFile`."""
    mime = getattr(contents, "mime_type", None) or media_type or "application/octet-stream"
    text = getattr(contents, "text", None)
    if text is not None:
        data = text.encode("utf-8")
        if mime == "application/octet-stream":
            mime = "text/plain"
    else:
        data = base64.b64decode(getattr(contents, "blob", "") or "")
    return ResourceFile(uri=uri, name=resource_name(uri), media_type=mime, data=data)


async def map_result(result: Any, read: ReadResource | None = None) -> Any:
    """``result`` (an MCP ``CallToolResult``) as the model will read it: pydantic-ai's mapping for
    text, JSON, images and audio; :class:`ResourceFile` for embedded resources and the first
    :data:`MAX_LINKS` resource links ``read`` can read."""
    import mcp_types
    from pydantic_ai.mcp import _map_mcp_call_tool_result, _map_mcp_tool_result

    if not any(isinstance(p, mcp_types.EmbeddedResource | mcp_types.ResourceLink) for p in result.content):
        return _map_mcp_call_tool_result(result)
    mapped: list[Any] = []
    links = 0
    for part in result.content:
        if isinstance(part, mcp_types.EmbeddedResource):
            mapped.append(contents_file(str(part.resource.uri), part.resource))
        elif isinstance(part, mcp_types.ResourceLink):
            links += 1
            mapped.append(await _linked(part, read if links <= MAX_LINKS else None))
        else:
            mapped.append(_map_mcp_tool_result(part))
    return mapped[0] if len(mapped) == 1 else mapped


async def _linked(link: Any, read: ReadResource | None) -> Any:
    uri = str(link.uri)
    shown = {"resource_link": uri, "name": link.name}
    if read is None:
        return {**shown, "note": f"not read: a result's first {MAX_LINKS} links are read"}
    try:
        contents = await read(uri)
    except Exception as exc:
        log.info("MCP resource %s could not be read: %s", uri, type(exc).__name__)
        return {**shown, "note": f"could not be read: {type(exc).__name__}"}
    if not contents:
        return {**shown, "note": "the server returned nothing for it"}
    found = contents_file(uri, contents[0], getattr(link, "mime_type", None))
    # The link's own name ("summary.csv") says more than a URI's last segment ("1").
    named = PurePosixPath(link.name or "").name
    return ResourceFile(found.uri, named, found.media_type, found.data) if named else found
