"""``MCP_CONFIG``: MCP servers from a JSON file in the common ``{"mcpServers": {...}}`` format.

The format Claude Desktop, Cursor and pydantic-ai's ``load_mcp_toolsets`` read: each entry is a
stdio server (``command``, ``args``, ``env``) or an HTTP one (``url``, ``headers``; ``type`` may say
``http`` or ``streamable-http``, but ``sse`` is not supported). Besides those, an entry takes the
agent file's own keys (``include``, ``exclude``, ``eager``, ``timeout``, ``startup_timeout``,
``read_only``) with
the same rules, so both sources end as the same :class:`McpServerConfig`. ``${VAR}`` in ``env`` and
``headers`` is expanded at start-up, as in the agent file.

Names are how tools are prefixed (``NAME_<tool>``): a JSON name is lower-cased and ``-``, ``.`` and
spaces become ``_`` (``"github-server"`` offers ``github_server_<tool>``). A name in both this file and
the agent file's ``[mcp.*]`` stops start-up: neither silently wins.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.agent.mcp.config import McpConfigError, McpServerConfig, parse_servers

_OWN_KEYS = (
    "include",
    "exclude",
    "eager",
    "timeout",
    "startup_timeout",
    "sampling",
    "sampling_max_tokens",
    "read_only",
)
_STDIO_KEYS = ("command", "args", "env", "type")
_HTTP_KEYS = ("url", "headers", "type", "auth", "client_id", "client_secret", "scopes")
#: Keys other clients write that mean nothing here but do no harm (Claude Desktop, Cursor, VS Code).
_IGNORED_KEYS = ("description", "disabled", "autoApprove", "alwaysAllow", "envFile")
_SEPARATORS = re.compile(r"[-. ]+")


def load_mcp_json(path: Path) -> tuple[McpServerConfig, ...]:
    """The servers of ``path``, in file order; raises :class:`McpConfigError` naming the file and the
    server on any mistake (``disabled: true`` entries are left out)."""
    data = _read(path)
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise McpConfigError(f'MCP_CONFIG {path}: expected {{"mcpServers": {{"NAME": {{...}}, ...}}}}')
    tables: dict[str, dict[str, Any]] = {}
    written: dict[str, str] = {}
    for raw_name, entry in servers.items():
        name = _SEPARATORS.sub("_", str(raw_name).strip().lower())
        where = f'MCP_CONFIG {path} "{raw_name}"'
        if not isinstance(entry, dict):
            raise McpConfigError(f'{where}: must be an object with "command" or "url"')
        if entry.get("disabled") is True:
            continue
        if name in tables:
            raise McpConfigError(f"{where}: another server in this file has the same name {name!r}")
        tables[name] = _table(entry, where)
        written[name] = str(raw_name)
    servers_ = parse_servers(tables, source=path, label="MCP_CONFIG")
    return tuple(replace(s, where=f'MCP_CONFIG "{written[s.name]}"') for s in servers_)


def merge_servers(
    from_agent_file: tuple[McpServerConfig, ...], from_json: tuple[McpServerConfig, ...], json_path: Path
) -> tuple[McpServerConfig, ...]:
    """The agent file's servers, then MCP_CONFIG's; a name in both is a :class:`McpConfigError`."""
    named = {s.name for s in from_agent_file}
    for server in from_json:
        if server.name in named:
            raise McpConfigError(
                f"MCP server {server.name!r} is defined in both the agent file ([mcp.{server.name}]) and "
                f"MCP_CONFIG {json_path}: remove or rename one"
            )
    return (*from_agent_file, *from_json)


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise McpConfigError(f"MCP_CONFIG {path} does not exist: create it or unset MCP_CONFIG") from None
    except json.JSONDecodeError as exc:
        raise McpConfigError(
            f"MCP_CONFIG {path} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise McpConfigError(f"MCP_CONFIG {path} cannot be read: {exc}") from None


def _table(entry: dict[str, Any], where: str) -> dict[str, Any]:
    """An entry in the agent file's ``[mcp.NAME]`` shape (``command`` and ``args`` as one list)."""
    kind = entry.get("type", "stdio" if "command" in entry else "http")
    if kind == "sse":
        raise McpConfigError(f"{where}: SSE servers are not supported; use the server's Streamable HTTP URL")
    allowed = (*(_STDIO_KEYS if "command" in entry else _HTTP_KEYS), *_OWN_KEYS, *_IGNORED_KEYS)
    unknown = sorted(set(entry) - set(allowed))
    if unknown:
        raise McpConfigError(f"{where}: unknown keys {unknown}; allowed: {', '.join(allowed)}")
    table = {k: v for k, v in entry.items() if k not in (*_IGNORED_KEYS, "type", "args")}
    if "command" in entry:
        command, args = entry["command"], entry.get("args", [])
        if not isinstance(command, str) or not command or not isinstance(args, list):
            raise McpConfigError(f'{where}: "command" must be a string and "args" a list of strings')
        table["command"] = [command, *args]
    return table


__all__ = ["load_mcp_json", "merge_servers"]
