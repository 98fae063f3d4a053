"""``agent.toml``: the deployment's own instructions, tool selection and model."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class AgentFile:
    """``agent.toml``: ``instructions`` (text or a path to a file), ``tools`` and ``model``."""

    instructions: str = ""
    tools: tuple[str, ...] | None = None
    model: str = ""

    @classmethod
    def load(cls, path: Path | None) -> AgentFile:
        if path is None:
            return cls()
        if not path.is_file():
            raise ValueError(f"AGENT_FILE {path} does not exist")
        with path.open("rb") as fh:
            data = tomllib.load(fh)
        unknown = set(data) - {"instructions", "tools", "model"}
        if unknown:
            raise ValueError(f"{path}: unknown keys {sorted(unknown)}; allowed: instructions, tools, model")
        instructions = str(data.get("instructions", ""))
        candidate = (path.parent / instructions) if instructions and "\n" not in instructions else None
        if candidate is not None and candidate.suffix in (".md", ".txt") and candidate.is_file():
            instructions = candidate.read_text(encoding="utf-8")
        tools = data.get("tools")
        if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, str) for t in tools)):
            raise ValueError(f"{path}: tools must be a list of tool names")
        return cls(
            instructions=instructions,
            tools=tuple(tools) if tools is not None else None,
            model=str(data.get("model", "")),
        )
