"""A test-only seam that kills the process (SIGKILL) at a named point (the crash matrix of the
invariant "Exactly once", docs/architecture.md).

``THREADBOUND_CRASH_AT=point`` (or ``point:n``, the n-th time the point is passed; default the first)
is read when this module is imported (:func:`arm_from_environment`). Unset (always, outside tests),
:func:`crash_point` calls a function that does nothing: no environment look-up, no counting.

Armed, the seam remembers the points the process passes, in order, and just before the kill writes
them to stderr in one line starting with :data:`TRAIL` (a test reads from it what the process had
committed when it died, a fact nothing done after the kill can change).

``THREADBOUND_FAILOVER_AT=point[:n]`` arms the same points for a database failover instead: at the
point the process writes a :data:`FAILOVER` line to stderr and stops (blocking, as a stalled process
would) until the file ``THREADBOUND_FAILOVER_GO`` names exists, while the test ends every database
session the process holds; then it goes on, and its next store call meets the ended sessions
(``tests/test_failover_matrix.py``).

Every point the code passes is named in :data:`POINTS`; ``tests/test_crash_matrix.py`` kills the app
at each of them and fails when the code names a point the matrix does not cover. The seam lives in
``storage`` because every layer (``channel``, ``app``) may import it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Final

#: Slack writes: ``slack.<kind>.before`` / ``.after`` around the Web API call of each kind.
SLACK_WRITES: Final = (
    "post",
    "startStream",
    "appendStream",
    "stopStream",
    "update",
    "delete",
    "reaction",
    "upload",
)
#: Store commits: ``store.<kind>.before`` / ``.after`` around the transaction of each kind.
STORE_COMMITS: Final = (
    *("claim", "checkpoint", "journal_open", "journal_close", "save", "consume"),
    # The records a run writes beside its journal: an ask, a follow-up, a gated call's approval, a handle.
    *("ask", "follow_up", "approval", "handle"),
)
#: Every point there is.
POINTS: Final = frozenset(
    {f"slack.{kind}.{when}" for kind in SLACK_WRITES for when in ("before", "after")}
    | {f"store.{kind}.{when}" for kind in STORE_COMMITS for when in ("before", "after")}
    | {"model.request", "tool.call"}
    # A person's Stop: recorded, then settled by the halted run (or the next one).
    | {"store.stop.after", "store.settle_stop.before", "store.settle_stop.after"}
)

#: The start of the line the armed seam writes to stderr before the kill; the points passed follow.
TRAIL: Final = "THREADBOUND_CRASH_AT passed:"
#: The line the seam armed for a failover writes when it stops at its point.
FAILOVER: Final = "THREADBOUND_FAILOVER_AT stopped at"
#: Seconds a process stopped for a failover waits for the go-ahead before it goes on regardless.
_FAILOVER_WAIT = 60.0


def _parse(spec: str) -> tuple[str, int]:
    name, _, count = spec.partition(":")
    if name not in POINTS:
        raise ValueError(f"THREADBOUND_CRASH_AT names no crash point: {name!r}")
    return name, int(count or "1")


def _noop(name: str) -> None:
    return None


def _armed(target: str, nth: int) -> Callable[[str], None]:
    seen = 0
    passed: list[str] = []

    def crash(name: str) -> None:
        nonlocal seen
        passed.append(name)
        if name != target:
            return
        seen += 1
        if seen == nth:
            line = f"{TRAIL} {' '.join(passed)}\n".encode()
            while line:  # unbuffered, whole before the kill
                line = line[os.write(2, line) :]
            os.kill(os.getpid(), signal.SIGKILL)

    return crash


def _stalled(target: str, nth: int, go: str) -> Callable[[str], None]:
    seen = 0

    def stall(name: str) -> None:
        nonlocal seen
        if name != target:
            return
        seen += 1
        if seen == nth:
            os.write(2, f"{FAILOVER} {name}\n".encode())
            deadline = time.monotonic() + _FAILOVER_WAIT
            while not os.path.exists(go) and time.monotonic() < deadline:
                time.sleep(0.01)  # the whole process stops here, event loop and all, as a stall would

    return stall


_point: Callable[[str], None] = _noop


def crash_point(name: str) -> None:
    """SIGKILL here when ``THREADBOUND_CRASH_AT`` names this point (module doc)."""
    _point(name)


def arm_from_environment() -> None:
    """Read ``THREADBOUND_CRASH_AT``: on import, and again in a process forked after the import (the
    tests' preloaded server children, ``tests/support/preloaded.py``), whose environment is its own."""
    global _point
    spec = os.environ.get("THREADBOUND_CRASH_AT", "")
    failover = os.environ.get("THREADBOUND_FAILOVER_AT", "")
    if spec:
        _point = _armed(*_parse(spec))
    elif failover:
        _point = _stalled(*_parse(failover), os.environ.get("THREADBOUND_FAILOVER_GO", ""))
    else:
        _point = _noop


arm_from_environment()
