"""How a run's failure is read: what the exception is or wraps, through groups and causes."""

from __future__ import annotations

from typing import TypeVar

from app.runs.outcome import RunStopped, slack_refusal, stopped
from channel.errors import ChannelError
from storage.base import LeaseMoved

E = TypeVar("E", bound=BaseException)


def _caused(exc: E, cause: BaseException) -> E:
    exc.__cause__ = cause
    return exc


def test_stopped_sees_a_lost_lease_inside_groups_and_causes() -> None:
    nested = ExceptionGroup("outer", [ValueError("x"), _caused(RuntimeError("y"), LeaseMoved("moved"))])
    assert stopped(nested)
    assert stopped(_caused(RuntimeError("z"), RunStopped()))
    assert not stopped(ExceptionGroup("only bugs", [ValueError("x"), KeyError("k")]))


def test_a_looping_cause_chain_ends() -> None:
    first, second = RuntimeError("a"), RuntimeError("b")
    first.__cause__, second.__cause__ = second, first
    assert not stopped(first)
    assert slack_refusal(first) is None


def test_slack_refusal_is_a_sure_provider_no_found_anywhere_in_the_chain() -> None:
    refusal = ChannelError("not_found", "gone", provider_code="thread_not_found")
    wrapped = ExceptionGroup("run", [_caused(RuntimeError("tool failed"), refusal)])
    assert slack_refusal(wrapped) is refusal
    ambiguous = ChannelError("provider_error", "maybe", provider_code="internal_error", ambiguous=True)
    limited = ChannelError("rate_limited", "slow down", provider_code="ratelimited")
    transport = ChannelError("provider_error", "connection reset")
    assert slack_refusal(ExceptionGroup("run", [ambiguous, limited, transport])) is None
