"""``serve`` freezes what start-up built (``app.ops.heap``): later full collections skip it, and
young collections come less often."""

from __future__ import annotations

import gc
import weakref

from app.ops.heap import YOUNG_THRESHOLD, freeze_startup_heap


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_the_live_heap_is_frozen_and_startup_garbage_collected_first() -> None:
    kept = [_Node() for _ in range(1000)]
    a, b = _Node(), _Node()
    a.other, b.other = b, a  # a reference cycle nobody holds: garbage only the collector frees
    gone = weakref.ref(a)
    del a, b
    thresholds = gc.get_threshold()
    try:
        frozen = freeze_startup_heap()
        assert gone() is None  # collected before the freeze, not frozen for ever
        assert frozen == gc.get_freeze_count() >= len(kept)
        assert all(not any(o is n for o in gc.get_objects()) for n in kept[:3])  # out of sight
        # Young collections less often; the older generations' thresholds as they were.
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *thresholds[1:]) != thresholds
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
    assert gc.get_freeze_count() == 0
