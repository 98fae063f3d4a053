"""The UTC days a test may see: daily budgets and usage rows are keyed by ``utc_day``, and a test that
records "today's" spending just before midnight is checked by the server a moment after it."""

from __future__ import annotations

import time

from app.agent.usage import utc_day

#: Longer than any one test runs (seconds).
TEST_SPAN = 900.0


def days_ahead(now: float | None = None) -> list[str]:
    """Today (UTC) and, when the next ``TEST_SPAN`` seconds cross midnight, tomorrow too."""
    start = time.time() if now is None else now
    return sorted({utc_day(start), utc_day(start + TEST_SPAN)})
