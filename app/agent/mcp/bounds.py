"""Bounds on what an MCP server says about its tools, which the model reads on every request.

A server chooses its tools' descriptions and input schemas; unbounded, one server could fill the
model's context (and the bill) or bury instructions there. A description longer than
:data:`MAX_DESCRIPTION_CHARS` is cut, with a note the model sees; a schema larger than
:data:`MAX_SCHEMA_CHARS` (as JSON) first loses its prose (``description``, ``title``,
``examples``), and a tool whose schema is still too large is left out. Each cut is logged.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["MAX_DESCRIPTION_CHARS", "MAX_SCHEMA_CHARS", "bounded_description", "bounded_schema"]

#: Characters of a tool's description offered to the model.
MAX_DESCRIPTION_CHARS = 2000
#: Characters of a tool's input schema, as compact JSON.
MAX_SCHEMA_CHARS = 16_000
_PROSE = frozenset({"description", "title", "examples"})


def bounded_description(server: str, tool: str, text: str) -> str:
    """``text``, cut to :data:`MAX_DESCRIPTION_CHARS` with a note when longer (and logged)."""
    if len(text) <= MAX_DESCRIPTION_CHARS:
        return text
    log.warning(
        "MCP server %s: the description of tool %s was cut from %d to %d characters",
        server,
        tool,
        len(text),
        MAX_DESCRIPTION_CHARS,
    )
    return text[:MAX_DESCRIPTION_CHARS].rstrip() + " [description cut]"


def bounded_schema(server: str, tool: str, schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """``schema`` within :data:`MAX_SCHEMA_CHARS`, its prose removed if needed; None when it
    cannot fit (the tool is then left out). Both are logged."""
    size = _size(schema)
    if size <= MAX_SCHEMA_CHARS:
        return dict(schema)
    plain = _without_prose(schema)
    assert isinstance(plain, dict)
    smaller = _size(plain)
    if smaller <= MAX_SCHEMA_CHARS:
        log.warning(
            "MCP server %s: the input schema of tool %s was cut from %d to %d characters "
            "(descriptions, titles and examples removed)",
            server,
            tool,
            size,
            smaller,
        )
        return plain
    log.warning(
        "MCP server %s: tool %s left out, its input schema has %d characters (at most %d)",
        server,
        tool,
        smaller,
        MAX_SCHEMA_CHARS,
    )
    return None


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str))


def _without_prose(value: Any, *, in_properties: bool = False) -> Any:
    """``value`` without prose keys; a ``properties`` table keeps its keys, whatever their names."""
    if isinstance(value, Mapping):
        return {
            key: _without_prose(inner, in_properties=key == "properties" and not in_properties)
            for key, inner in value.items()
            if in_properties or key not in _PROSE
        }
    if isinstance(value, list):
        return [_without_prose(v) for v in value]
    return value
