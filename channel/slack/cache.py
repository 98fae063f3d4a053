"""A bounded cache for the adapter's look-ups: least recently used out, entries expire.

Names, channel info and file info are looked up in trusted code and cached so a busy thread
does not cost a call per message. Unbounded, such caches only grow with every user, channel
and file a long-lived process ever saw; kept forever, a renamed person keeps their old name.
:class:`TtlCache` holds at most ``maxsize`` entries (the least recently used leaves first) and
forgets each one ``ttl`` seconds after it was stored, so it is looked up again (refreshed).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

#: Seconds a looked-up name or info is trusted before it is looked up again.
LOOKUP_TTL = 3600.0


class TtlCache(Generic[K, V]):
    """A mapping of at most ``maxsize`` entries, each forgotten ``ttl`` seconds after it was set."""

    def __init__(self, maxsize: int, ttl: float = LOOKUP_TTL, clock: Callable[[], float] = time.monotonic):
        if maxsize < 1 or ttl <= 0:
            raise ValueError("maxsize must be at least 1 and ttl positive")
        self.maxsize = maxsize
        self.ttl = ttl
        #: Seconds, monotonic (tests may replace it).
        self.clock = clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def _live(self, key: K) -> tuple[float, V] | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[0] <= self.clock():
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry

    def get(self, key: K, default: V | None = None) -> V | None:
        entry = self._live(key)
        return default if entry is None else entry[1]

    def __getitem__(self, key: K) -> V:
        entry = self._live(key)
        if entry is None:
            raise KeyError(key)
        return entry[1]

    def __contains__(self, key: object) -> bool:
        return self._live(key) is not None  # type: ignore[arg-type]

    def __setitem__(self, key: K, value: V) -> None:
        self._entries[key] = (self.clock() + self.ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.maxsize:
            self._entries.popitem(last=False)

    def pop(self, key: K, default: V | None = None) -> V | None:
        entry = self._entries.pop(key, None)
        return default if entry is None else entry[1]

    def __iter__(self) -> Iterator[K]:
        now = self.clock()
        for key in [k for k, (due, _) in self._entries.items() if due <= now]:
            del self._entries[key]
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)
