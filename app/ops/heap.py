"""Short full garbage collections: what start-up built is taken out of the collector's sight.

A full (generation 2) collection walks every object the collector tracks, and it holds the GIL
while it does: every thread stops, the HTTP edge's (``app.intake.edge_thread``) included. After
start-up that is some 250,000 objects (pydantic-ai and its schemas, the model SDKs, Bolt, the
agent, the tools), about 150 ms of CPU per full collection on the reference machine, several
times more under load; with runs working such collections came every second or two and were most
of the acknowledgements' p99. What start-up built lives as long as the process, so ``serve``
collects once and then freezes it (:func:`gc.freeze`): later full collections walk only what the
runs made since. Nothing is lost: frozen objects are still freed when their last reference goes;
only a reference cycle among them would stay (none is made at start-up on purpose).

The young generation's threshold goes from Python's 700 to :data:`YOUNG_THRESHOLD` allocations: a
run's short-lived objects (requests, responses, validated models) then die in a young collection
instead of being promoted after a few, and full collections come half as often. Measured on the
ingress rows (``docs/performance.md``): the served app's full collections took 0.59–0.69 s in all
per ``--only ingress`` run against 1.19–1.23 s, for ~4 KiB more per resting conversation.
"""

from __future__ import annotations

import gc

#: Allocations (less deallocations) between young collections once ``serve`` runs; Python's is 700.
YOUNG_THRESHOLD = 10_000


def freeze_startup_heap() -> int:
    """Collect the garbage start-up left, then freeze the rest and raise the young generation's
    threshold (module doc); how many objects are frozen."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
    return gc.get_freeze_count()
