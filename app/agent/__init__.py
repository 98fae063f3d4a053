"""The agent and what it may call: the pydantic-ai runtime, the agent file, model settings,
usage and budgets, approvals, and MCP servers (``app.agent.mcp``).

May import ``app.settings``, ``app.logs``, ``app.clicks``, ``channel`` and ``storage``; never ``app.runs`` or
``app.intake``.
"""
