"""``PeakRss``: the peak resident memory of a process while some work runs, sampled on a thread.

Unlike ``ru_maxrss``, which never falls, it measures growth *during* the work from
the RSS at its start, so a test or benchmark run after a bigger one still sees it.
"""

from __future__ import annotations

import contextlib
import threading

import psutil


class PeakRss:
    """Samples a process's RSS every ``interval`` seconds on a thread (reading /proc costs the event
    loop nothing), keeping the peak. Use as a context manager around the measured work."""

    def __init__(self, pid: int | None = None, interval: float = 0.002) -> None:
        self._proc = psutil.Process(pid)
        self.interval = interval
        self.start = 0
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="peak-rss", daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(psutil.Error):
                self.peak = max(self.peak, int(self._proc.memory_info().rss))
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRss:
        self.start = self.peak = int(self._proc.memory_info().rss)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        with contextlib.suppress(psutil.Error):
            self.peak = max(self.peak, int(self._proc.memory_info().rss))

    @property
    def growth(self) -> int:
        return self.peak - self.start
