"""``[mcp.NAME]`` tables of the agent file: which MCP servers to connect and how.

Parsing checks the shape of each table and fails with the table and key named;
``${VAR}`` references in ``env``, ``url`` and ``headers`` are kept as written until
:meth:`McpServerConfig.resolve` expands them from the environment at start-up,
so a missing variable is reported then, by name. What was expanded is kept as
the server's secrets, so logs and error reasons can leave it out, and so are header
values and ``env`` values whose name says credential (``*KEY*``, ``*TOKEN*``,
``*SECRET*``, ``*PASSWORD*``…) even when written literally.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from app.agent.toml_lines import toml_line

#: A server's name; its tools are offered as ``NAME_<tool>``.
SERVER_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
# Server names whose prefix would shadow threadbound's own tools (channel_*, tool_search, skills).
RESERVED_NAMES = frozenset({"channel", "tool", "skills"})
# ${VAR} or ${VAR:-default}; nothing else is special, so a literal "$" needs no escaping.
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
# Env names whose literal values are credentials (API_KEY, GITHUB_TOKEN, DB_PASSWORD…).
_CREDENTIAL_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|PRIVATE", re.IGNORECASE)
_KEYS = (
    "command",
    "env",
    "url",
    "headers",
    "include",
    "exclude",
    "eager",
    "timeout",
    "startup_timeout",
    "sampling",
    "sampling_max_tokens",
    "read_only",
)
# A url server acting as each person (``auth = "per_person"``): its OAuth client, when not registered.
_AUTH_KEYS = ("auth", "client_id", "client_secret", "scopes")
#: Seconds a tool call may take before it fails with ``tool_failed``.
DEFAULT_TIMEOUT = 60.0
#: Seconds a server has to start (or connect) and list its tools.
DEFAULT_STARTUP_TIMEOUT = 30.0
#: Output tokens one sampling request may use (``sampling_max_tokens``), when the server may sample.
DEFAULT_SAMPLING_MAX_TOKENS = 1_000


class McpConfigError(ValueError):
    """An ``[mcp.NAME]`` table that cannot work; the message names the table and key."""


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    """One ``[mcp.NAME]`` table, as written (``${VAR}`` not yet expanded)."""

    name: str
    #: stdio: the program and its arguments; empty for an HTTP server.
    command: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    #: Streamable HTTP: the endpoint; empty for a stdio server.
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    include: tuple[str, ...] = ("*",)
    exclude: tuple[str, ...] = ()
    eager: tuple[str, ...] = ()
    timeout: float = DEFAULT_TIMEOUT
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT
    #: Whether the server may ask the app's model for completions (``sampling/createMessage``).
    sampling: bool = False
    sampling_max_tokens: int = DEFAULT_SAMPLING_MAX_TOKENS
    #: Where a stdio server runs: the agent file's directory, so relative paths in ``command`` work.
    cwd: Path | None = None
    #: How messages name this server: ``[mcp.NAME]``, or ``MCP_CONFIG "NAME"`` for the JSON file's.
    where: str = ""
    #: Globs of the server's tools the agent file declares read-only (no approval by default).
    read_only: tuple[str, ...] = ()
    #: ``auth = "per_person"``: calls carry the token of the person who asked (``app.agent.mcp.oauth``).
    per_person: bool = False
    #: A client the operator registered with the server's authorization server (``${VAR}`` allowed);
    #: empty: the app registers itself (dynamic client registration).
    client_id: str = ""
    client_secret: str = ""
    #: Scopes to ask for; empty: what the server's metadata names.
    scopes: tuple[str, ...] = ()

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"

    def selects(self, tool: str) -> bool:
        """Whether the server's tool ``tool`` (its own name, unprefixed) exists for the agent."""
        return _matches(tool, self.include) and not _matches(tool, self.exclude)

    def is_eager(self, tool: str) -> bool:
        return _matches(tool, self.eager)

    def declares_read_only(self, tool: str) -> bool:
        return _matches(tool, self.read_only)

    def resolve(self, environ: Mapping[str, str]) -> Resolved:
        """``env``, ``url`` and ``headers`` with ``${VAR}`` expanded from ``environ``.

        Raises :class:`McpConfigError` naming the variable when one is not set and has no default.
        """
        where = self.where or f"[mcp.{self.name}]"
        secrets: set[str] = set()
        env = {k: _expand(v, environ, f"{where} env.{k}", secrets) for k, v in self.env}
        headers = {k: _expand(v, environ, f"{where} headers.{k}", secrets) for k, v in self.headers}
        url = _expand(self.url, environ, f"{where} url", secrets) if self.url else ""
        if url:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise McpConfigError(f"{where} url is not an http:// or https:// URL once expanded")
            secrets |= {v for v in (parts.password, parts.query, parts.fragment) if v}
        # Header values are credentials as written, too (a literal key in the file), as are env
        # values named like one.
        secrets |= set(headers.values())
        secrets |= {v for k, v in env.items() if _CREDENTIAL_NAME.search(k)}
        client_id = _expand(self.client_id, environ, f"{where} client_id", set())
        client_secret = _expand(self.client_secret, environ, f"{where} client_secret", secrets)
        secrets |= {client_secret} if client_secret else set()
        shown = frozenset(s for s in secrets if len(s) >= 6)
        return Resolved(
            env=env, headers=headers, url=url, secrets=shown, client_id=client_id, client_secret=client_secret
        )


@dataclass(frozen=True, slots=True)
class Resolved:
    """A server's settings with ``${VAR}`` expanded, and the text that must not be shown."""

    env: dict[str, str]
    headers: dict[str, str]
    url: str
    #: Expanded values, the URL's password, query and fragment, header values, credential-named env values.
    secrets: frozenset[str]
    #: A per-person server's configured OAuth client (empty: registered dynamically).
    client_id: str = ""
    client_secret: str = ""

    @property
    def shown_url(self) -> str:
        """The URL as logs and the model may see it: scheme, host, port and path only."""
        if not self.url:
            return ""
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}{parts.path}"

    def redact(self, text: str) -> str:
        """``text`` with the URL shown as :attr:`shown_url` and every secret replaced."""
        if self.url:
            text = text.replace(self.url, self.shown_url)
        for secret in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(secret, "[redacted]")
        return text


def parse_servers(raw: Any, *, source: Path, label: str = "") -> tuple[McpServerConfig, ...]:
    """The ``mcp`` table of ``source`` (the agent file) as server configs, in file order.

    ``label`` (``"MCP_CONFIG"``) says that ``source`` is the JSON file, for the messages."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise McpConfigError(f"{source}: mcp must be a table of servers, e.g. [mcp.tickets]")
    return tuple(_parse_server(name, table, source, label) for name, table in raw.items())


def _parse_server(name: str, table: Any, source: Path, label: str = "") -> McpServerConfig:
    line = None if label else toml_line(source, None, f"mcp.{name}")
    at = f", line {line}" if line else ""
    where = f'{label} {source} "{name}"' if label else f"{source}{at} [mcp.{name}]"
    if not SERVER_NAME.match(name):
        raise McpConfigError(
            f"{where}: a server name is lower-case letters, digits and _, starting with a letter"
        )
    if name in RESERVED_NAMES:
        raise McpConfigError(
            f"{where}: the name {name!r} is reserved for threadbound's own tools; pick another"
        )
    if not isinstance(table, dict):
        raise McpConfigError(f'{where}: must be a table with command = [...] or url = "..."')
    unknown = sorted(set(table) - set(_KEYS) - set(_AUTH_KEYS))
    if unknown:
        raise McpConfigError(f"{where}: unknown keys {unknown}; allowed: {', '.join(_KEYS + _AUTH_KEYS)}")
    command = table.get("command")
    url = table.get("url")
    if (command is None) == (url is None):
        raise McpConfigError(f"{where}: give exactly one of command (stdio) or url (Streamable HTTP)")
    if command is not None and (
        not isinstance(command, list) or not command or not all(isinstance(c, str) and c for c in command)
    ):
        raise McpConfigError(
            f'{where}: command must be a non-empty list of strings, e.g. ["python", "server.py"]'
        )
    if url is not None:
        parts = urlsplit(url) if isinstance(url, str) else None
        templated = isinstance(url, str) and url.startswith("${")
        if parts is None or (not templated and (parts.scheme not in ("http", "https") or not parts.netloc)):
            raise McpConfigError(f"{where}: url must be an http:// or https:// URL (${{VAR}} may be used)")
    if command is not None and "headers" in table:
        raise McpConfigError(f"{where}: headers are for url servers; a command server takes env")
    if url is not None and "env" in table:
        raise McpConfigError(f"{where}: env is for command servers; a url server takes headers")
    per_person = _per_person(table, where, url is not None)
    return McpServerConfig(
        name=name,
        per_person=per_person,
        client_id=_string(table.get("client_id", ""), f"{where} client_id"),
        client_secret=_string(table.get("client_secret", ""), f"{where} client_secret"),
        scopes=_globs(table.get("scopes", []), f"{where} scopes") if "scopes" in table else (),
        command=tuple(command or ()),
        env=_string_table(table.get("env"), f"{where} env"),
        url=url or "",
        headers=_string_table(table.get("headers"), f"{where} headers"),
        include=_globs(table.get("include", ["*"]), f"{where} include"),
        exclude=_globs(table.get("exclude", []), f"{where} exclude"),
        eager=_globs(table.get("eager", []), f"{where} eager"),
        timeout=_seconds(table.get("timeout", DEFAULT_TIMEOUT), f"{where} timeout"),
        startup_timeout=_seconds(
            table.get("startup_timeout", DEFAULT_STARTUP_TIMEOUT), f"{where} startup_timeout"
        ),
        sampling=_flag(table.get("sampling", False), f"{where} sampling"),
        sampling_max_tokens=_tokens(
            table.get("sampling_max_tokens", DEFAULT_SAMPLING_MAX_TOKENS), f"{where} sampling_max_tokens"
        ),
        cwd=source.resolve().parent,
        read_only=_globs(table.get("read_only", []), f"{where} read_only"),
    )


def _per_person(table: dict[str, Any], where: str, is_url: bool) -> bool:
    auth = table.get("auth", "")
    if auth not in ("", "per_person"):
        raise McpConfigError(f'{where} auth must be "per_person" (or left out for a shared server)')
    if auth and not is_url:
        raise McpConfigError(f'{where}: auth = "per_person" is for url servers')
    if auth and "headers" in table:
        raise McpConfigError(f"{where}: a per-person server takes no headers; each person's token is sent")
    if not auth and any(k in table for k in _AUTH_KEYS[1:]):
        raise McpConfigError(f'{where}: client_id, client_secret and scopes need auth = "per_person"')
    return bool(auth)


def _string(raw: Any, where: str) -> str:
    if not isinstance(raw, str):
        raise McpConfigError(f"{where} must be a string")
    return raw


def _flag(raw: Any, where: str) -> bool:
    if not isinstance(raw, bool):
        raise McpConfigError(f"{where} must be true or false")
    return raw


def _tokens(raw: Any, where: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 < raw <= 100_000:
        raise McpConfigError(f"{where} must be a whole number of tokens between 1 and 100000")
    return raw


def _string_table(raw: Any, where: str) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise McpConfigError(f'{where} must be a table of strings, e.g. {{ KEY = "${{KEY}}" }}')
    return tuple(raw.items())


def _globs(raw: Any, where: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(g, str) and g for g in raw):
        raise McpConfigError(f"{where} must be a list of tool names or globs")
    return tuple(raw)


def _seconds(raw: Any, where: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not 0 < raw <= 3600:
        raise McpConfigError(f"{where} must be a number of seconds between 0 and 3600")
    return float(raw)


def _matches(name: str, globs: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, g) for g in globs)


def _expand(value: str, environ: Mapping[str, str], where: str, secrets: set[str]) -> str:
    def substitute(match: re.Match[str]) -> str:
        variable, default = match.group(1), match.group(2)
        if variable in environ:
            secrets.add(environ[variable])
            return environ[variable]
        if default is not None:
            secrets.add(default)
            return default
        raise McpConfigError(f"{where} uses ${{{variable}}}, but {variable} is not set in the environment")

    return _REFERENCE.sub(substitute, value)
