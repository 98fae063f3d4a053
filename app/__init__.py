"""threadbound's process: everything that is not the provider-neutral channel or the store.

Packages, one concern each, in the order calls go:

- ``app.intake``: Slack deliveries and clicks become durable inbox items (router, ingress, clicks).
- ``app.runs``: when a conversation runs and what one run does (scheduler, lease, run, streaming).
- ``app.agent``: the pydantic-ai agent, the agent file, budgets, approvals, MCP (``app.agent.mcp``).
- ``app.ops``: the commands beside ``serve``, metrics and observability, PaaS hints.
- ``app.playground``: a local page standing in for a Slack workspace.

``app.settings``, ``app.logs``, ``app.traces`` (OpenTelemetry spans) and ``app.clicks`` (what a
click is) are the shared base every
package may import, and import no app package themselves;
``app.service`` is the composition root, the one place that knows every part (``app.serving``
runs it as a process), and ``app.__main__`` the CLI. ``tests/test_layout.py`` enforces the directions.
"""
