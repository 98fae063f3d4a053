"""``agent.toml``: the deployment's own instructions, tool selection, model, MCP servers and profiles."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app.agent.approval_policy import APPROVAL_DEFAULTS, ApprovalDefault, ApprovalPolicy
from app.agent.mcp.config import McpServerConfig, parse_servers
from app.agent.mcp.json_config import load_mcp_json, merge_servers
from app.agent.profiles import Profile, Profiles, parse_profiles
from app.agent.toml_lines import located

#: A one-line ``instructions`` value with one of these endings is a file path, not the text.
INSTRUCTION_FILE_SUFFIXES = (".md", ".txt")
_KEYS = (
    "instructions",
    "tools",
    "model",
    "approval",
    "mcp",
    "prompts",
    "loading_messages",
    "max_requests_per_run",
    "profiles",
    "approval_default",
)
#: Model requests one run may make before it stops with an apology (a runaway tool loop).
DEFAULT_MAX_REQUESTS_PER_RUN = 20
#: Slack shows at most four suggested prompts; each is a title and the message it sends.
MAX_PROMPTS = 4
MAX_PROMPT_CHARS = 200
#: Slack rotates at most ten ``loading_messages`` under a thread while the app works.
MAX_LOADING_MESSAGES = 10
MAX_LOADING_CHARS = 100


@dataclass(frozen=True, slots=True)
class AgentFile:
    """``agent.toml``: ``instructions`` (text, or a ``.md``/``.txt`` file beside it), ``tools`` (names
    or globs), ``model``, ``approval`` (names or globs of calls that wait for a person's decision),
    ``approval_default`` (whether MCP tools not marked read-only wait too), ``[mcp.NAME]`` servers,
    ``max_requests_per_run`` and ``[profiles.NAME]`` (``app.agent.profiles``; the top-level keys are
    the default profile).

    :meth:`load` raises ValueError naming the file and the line on any mistake."""

    instructions: str = ""
    tools: tuple[str, ...] | None = None
    model: str = ""
    mcp: tuple[McpServerConfig, ...] = ()
    approval: tuple[str, ...] = ()
    max_requests_per_run: int = DEFAULT_MAX_REQUESTS_PER_RUN
    #: Suggested prompts offered when someone opens a new conversation with the bot (Slack's agent view).
    prompts: tuple[str, ...] = ()
    #: Texts Slack rotates under the thread while a run works ("Reading the thread…"); empty: our defaults.
    loading_messages: tuple[str, ...] = ()
    #: The default profile (these top-level keys) and ``[profiles.NAME]`` (``app.agent.profiles``).
    profiles: Profiles = field(default_factory=Profiles)
    #: ``not_read_only``: MCP tools not marked read-only wait for approval too; ``listed_only``: only
    #: the calls ``approval`` names.
    approval_default: ApprovalDefault = "not_read_only"

    @property
    def approval_policy(self) -> ApprovalPolicy:
        """Which calls wait for a person (``app.agent.approval_policy``)."""
        return ApprovalPolicy(self.approval, self.approval_default)

    @classmethod
    def load(cls, path: Path | None, mcp_config: Path | None = None) -> AgentFile:
        """The agent file at ``path`` (None: defaults), with the servers of ``mcp_config`` (the
        ``MCP_CONFIG`` JSON file) added to its ``[mcp.*]``; a server named in both is a ValueError."""
        loaded = cls._load(path)
        if mcp_config is None:
            return loaded
        extra = load_mcp_json(mcp_config)
        return replace(loaded, mcp=merge_servers(loaded.mcp, extra, mcp_config))

    @classmethod
    def _load(cls, path: Path | None) -> AgentFile:
        if path is None:
            return cls()
        if not path.is_file():
            raise ValueError(f"AGENT_FILE {path} does not exist: create it or unset AGENT_FILE")
        data = _read_toml(path)
        unknown = set(data) - set(_KEYS)
        if unknown:
            first = sorted(unknown)[0]
            raise ValueError(
                located(path, first, f"unknown keys {sorted(unknown)}; allowed: {', '.join(_KEYS)}")
            )
        for key in ("instructions", "model"):
            if not isinstance(data.get(key, ""), str):
                raise ValueError(located(path, key, f'{key} must be a string, e.g. {key} = "…"'))
        instructions = _instructions(path, data.get("instructions", ""))
        tools = data.get("tools")
        if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, str) for t in tools)):
            raise ValueError(located(path, "tools", "tools must be a list of tool names or globs"))
        approval = data.get("approval", [])
        if not isinstance(approval, list) or not all(isinstance(t, str) and t for t in approval):
            text = 'approval must be a list of tool names or globs, e.g. ["channel_retract"]'
            raise ValueError(located(path, "approval", text))
        approval_default = data.get("approval_default", "not_read_only")
        if approval_default not in APPROVAL_DEFAULTS:
            text = 'approval_default must be "not_read_only" (the default) or "listed_only"'
            raise ValueError(located(path, "approval_default", text))
        limit = data.get("max_requests_per_run", DEFAULT_MAX_REQUESTS_PER_RUN)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            text = "max_requests_per_run must be a whole number of at least 1, e.g. 20"
            raise ValueError(located(path, "max_requests_per_run", text))
        prompts = _short_strings(
            path, data, "prompts", MAX_PROMPTS, MAX_PROMPT_CHARS, '["Summarise this thread"]'
        )
        loading = _short_strings(
            path,
            data,
            "loading_messages",
            MAX_LOADING_MESSAGES,
            MAX_LOADING_CHARS,
            '["Checking the runbook…"]',
        )
        default = Profile(instructions=instructions, tools=_tuple(tools), approval=tuple(approval))
        return cls(
            profiles=parse_profiles(path, data.get("profiles"), default),
            instructions=instructions,
            loading_messages=loading,
            tools=tuple(tools) if tools is not None else None,
            model=data.get("model", ""),
            mcp=parse_servers(data.get("mcp"), source=path),
            approval=tuple(approval),
            approval_default=approval_default,
            max_requests_per_run=limit,
            prompts=prompts,
        )


def _tuple(values: list[str] | None) -> tuple[str, ...] | None:
    return tuple(values) if values is not None else None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        # Python 3.11's message ends "(at line L, column C)", or "(at end of document)" with no line.
        where = str(exc).replace("(at end of document)", f"(at the end, line {_line_count(path)})")
        raise ValueError(f"{path} is not valid TOML: {where}") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text: {exc.reason} at byte {exc.start}") from exc
    except OSError as exc:
        raise ValueError(f"{path} cannot be read: {exc.strerror}") from exc


def _line_count(path: Path) -> int:
    return max(1, len(path.read_bytes().splitlines()))


def _instructions(path: Path, value: str) -> str:
    """The instructions text. A single line ending in ``.md`` or ``.txt`` names a file beside the
    agent file, which must exist: a typo must not silently become the instructions themselves."""
    if "\n" in value or not value.strip().lower().endswith(INSTRUCTION_FILE_SUFFIXES):
        return value
    file = path.parent / value.strip()
    try:
        return file.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = (
            f"instructions file {file} does not exist "
            "(a one-line value ending in .md or .txt is a path; write inline instructions on several lines)"
        )
        raise ValueError(located(path, "instructions", text)) from None
    except (OSError, UnicodeDecodeError) as exc:
        text = f"instructions file {file} cannot be read: {exc}"
        raise ValueError(located(path, "instructions", text)) from exc


def _short_strings(
    path: Path, data: dict[str, Any], key: str, most: int, chars: int, example: str
) -> tuple[str, ...]:
    """``data[key]``: at most ``most`` non-empty strings of at most ``chars`` characters, stripped."""
    values = data.get(key, [])
    if (
        not isinstance(values, list)
        or not all(isinstance(v, str) and v.strip() and len(v) <= chars for v in values)
        or len(values) > most
    ):
        text = (
            f"{key} must be a list of at most {most} non-empty strings of at most "
            f"{chars} characters, e.g. {key} = {example}"
        )
        raise ValueError(located(path, key, text))
    return tuple(v.strip() for v in values)
