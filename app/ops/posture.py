"""``check``'s policy lines: each profile's effective policy, and the install's production posture.

Read from the settings and the agent file only (no network): what an operator at a large company
wants to see before putting the bot in front of everyone — who is served (access lists, guests,
people from other organisations), what needs a person's approval and who gives it, what a day may
cost, whether ``/metrics`` is open and whether message text reaches the logs. docs/security.md
("Production posture") explains each line and its fix.
"""

from __future__ import annotations

from collections.abc import Callable

from app.agent.agent_file import AgentFile
from app.agent.profiles import DEFAULT, Profile
from app.settings import Settings

__all__ = ["group_scope_line", "posture_lines", "profile_lines"]

#: ``(status, name, detail)``, as ``check`` prints a finding.
Line = tuple[str, str, str]


def _listed(values: tuple[str, ...] | None, everyone: str) -> str:
    if values is None or "*" in values:
        return everyone
    return ", ".join(values) if values else "none"


def _budget(value: int) -> str:
    return f"{value:,} tokens/day" if value else "no limit"


def profile_lines(settings: Settings, agent_file: AgentFile) -> list[Line]:
    """One line per profile: where it applies and what it allows there."""
    out: list[Line] = []
    for profile in agent_file.profiles.all():
        out.append(("INFO", "profile", f"{_where(profile)}: {_policy(settings, agent_file, profile)}"))
    return out


def _where(profile: Profile) -> str:
    if profile.name == DEFAULT:
        return "default (top-level keys; every conversation no profile names)"
    return f"{profile.name} ({', '.join(profile.channels)})"


def _policy(settings: Settings, agent_file: AgentFile, profile: Profile) -> str:
    model = profile.model or settings.model or agent_file.model or "MODEL unset"
    users = _listed(profile.users, "everyone")
    if settings.allowed_users:
        users += f" (within ALLOWED_USERS: {len(settings.allowed_users)} people)"
    guests = profile.guests if profile.guests is not None else settings.allow_guests
    deciders = ["the requester"] if settings.approval_by == "requester" else []
    deciders += [f"APPROVERS ({len(settings.approvers)})"] if settings.approvers else []
    deciders += list(profile.approvers)
    approval = ", ".join(profile.approval) or "none"
    per_user = _either(profile.user_daily_token_budget, settings.user_daily_token_budget or 0)
    install = _either(profile.daily_token_budget, settings.daily_token_budget or 0)
    parts = [
        f"model {model}",
        f"tools {_listed(profile.tools, 'all')}",
        f"mcp {_listed(profile.mcp, 'all servers')}",
        f"approval {approval}"
        + (f" decided by {' or '.join(deciders) or 'nobody'}" if profile.approval else ""),
        f"users {users}",
        f"guests {'served' if guests else 'not served'}",
        f"budgets per person {_budget(per_user)}, install {_budget(install)}",
    ]
    if profile.instructions and profile.instructions != agent_file.instructions:
        parts.append("own instructions")
    return "; ".join(parts)


def _either(value: int | None, default: int) -> int:
    return default if value is None else value


def posture_lines(settings: Settings, agent_file: AgentFile) -> list[Line]:
    """The production posture: a PASS or WARN per concern, each WARN naming its fix."""
    profiles = agent_file.profiles.all()
    checks: list[Callable[[Settings, tuple[Profile, ...], AgentFile], Line]] = [
        _access,
        _guests,
        _externals,
        _approvals,
        _budgets,
        _metrics,
        _previews,
    ]
    return [check(settings, profiles, agent_file) for check in checks]


def _access(settings: Settings, profiles: tuple[Profile, ...], agent_file: AgentFile) -> Line:
    open_ = [p.name for p in profiles if p.users is None or "*" in p.users]
    if settings.allowed_users or not open_:
        return ("PASS", "posture", "access: only listed people are served (ALLOWED_USERS or profile users)")
    where = ", ".join(open_)
    return (
        "WARN",
        "posture",
        f"access: everyone in the workspace is served in profile(s) {where}; set ALLOWED_USERS or a "
        "profile's users (ids or @usergroups) to narrow it",
    )


def _guests(settings: Settings, profiles: tuple[Profile, ...], agent_file: AgentFile) -> Line:
    serving = [p.name for p in profiles if (p.guests if p.guests is not None else settings.allow_guests)]
    if not serving:
        return ("PASS", "posture", "guests: not served (ALLOW_GUESTS off, no profile allows them)")
    where = ", ".join(serving)
    return ("WARN", "posture", f"guests: served in profile(s) {where} (ALLOW_GUESTS or guests = true)")


def _externals(settings: Settings, profiles: tuple[Profile, ...], agent_file: AgentFile) -> Line:
    if not settings.allow_external_users:
        return ("PASS", "posture", "externals: people from other organisations are not served")
    return (
        "WARN",
        "posture",
        "externals: people from other organisations (Slack Connect) are served (ALLOW_EXTERNAL_USERS); "
        "turn it off unless shared channels need the bot",
    )


def _approvals(settings: Settings, profiles: tuple[Profile, ...], agent_file: AgentFile) -> Line:
    if not agent_file.mcp:
        return ("PASS", "posture", "approvals: no MCP servers, so no tool acts outside Slack")
    ungated = [p.name for p in profiles if not p.approval and (p.mcp is None or p.mcp)]
    if ungated:
        return (
            "WARN",
            "posture",
            f"approvals: profile(s) {', '.join(ungated)} offer MCP tools and name no calls in approval; "
            'list the tools that change things (e.g. approval = ["tickets_close_*"])',
        )
    return ("PASS", "posture", "approvals: every profile with MCP tools names calls that wait for approval")


def _budgets(settings: Settings, profiles: tuple[Profile, ...], agent_file: AgentFile) -> Line:
    unbounded = [
        p.name
        for p in profiles
        if not _either(p.daily_token_budget, settings.daily_token_budget or 0)
        and not _either(p.user_daily_token_budget, settings.user_daily_token_budget or 0)
    ]
    if not unbounded:
        return ("PASS", "posture", "budgets: every profile has a daily token budget")
    return (
        "WARN",
        "posture",
        f"budgets: profile(s) {', '.join(unbounded)} have no daily token budget, so cost has no ceiling; "
        "set DAILY_TOKEN_BUDGET and USER_DAILY_TOKEN_BUDGET (or per profile)",
    )


def _metrics(settings: Settings, profiles: tuple[Profile, ...], agent_file: AgentFile) -> Line:
    if settings.metrics_token.get_secret_value():
        return ("PASS", "posture", "/metrics: needs METRICS_TOKEN")
    return ("WARN", "posture", "/metrics: open to anyone who can reach the port; set METRICS_TOKEN")


def _previews(settings: Settings, profiles: tuple[Profile, ...], agent_file: AgentFile) -> Line:
    if not settings.log_previews:
        return ("PASS", "posture", "previews: no message text in the logs (LOG_PREVIEWS off)")
    return ("WARN", "posture", "previews: message text reaches the logs (LOG_PREVIEWS on); turn it off")


def group_scope_line(agent_file: AgentFile, scopes: tuple[str, ...] | None) -> Line | None:
    """A FAIL when a profile names ``@usergroups`` but ``usergroups:read`` is not granted (then
    nobody is admitted through them); None when no profile names one or scopes are unknown."""
    named = sorted({g for p in agent_file.profiles.all() for g in p.groups})
    if not named or scopes is None or "usergroups:read" in scopes:
        return None
    return (
        "FAIL",
        "profile",
        f"profiles name @{', @'.join(named)} but the usergroups:read scope is not granted, so nobody is "
        "admitted through a group; add it and reinstall the app",
    )
