"""MCP servers from the agent file: their configuration, their processes and connections, and
the pydantic-ai toolset that offers their tools to a run."""
