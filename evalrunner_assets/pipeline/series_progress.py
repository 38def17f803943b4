"""Live progress of a series run (a backfill of main commits): points done of planned, windows,
samples, spend and an ETA, as one line.

The ``cohort_series`` asset tells whoever watches in its process (:func:`watching`), window by
window and point by point; ``evalrunner backfill`` runs the job in process and draws the line.
A backfill launched from the UI shows its progress on Dagster's backfill page instead (each
point is its partition's materialization as it lands). Plain Python.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol, TextIO


class SeriesWatcher(Protocol):
    def on_window(self, outcome: Any) -> None: ...

    def on_point(self, point: Mapping[str, Any], fresh: bool) -> None: ...


_watchers: list[SeriesWatcher] = []
_watchers_lock = threading.Lock()


@contextmanager
def watching(watcher: SeriesWatcher) -> Iterator[SeriesWatcher]:
    """Tell ``watcher`` about every series window and point of this process while inside."""
    with _watchers_lock:
        _watchers.append(watcher)
    try:
        yield watcher
    finally:
        with _watchers_lock:
            _watchers.remove(watcher)


def notify_window(outcome: Any) -> None:
    for watcher in _current():
        watcher.on_window(outcome)


def notify_point(point: Mapping[str, Any], fresh: bool) -> None:
    for watcher in _current():
        watcher.on_point(point, fresh)


def _current() -> list[SeriesWatcher]:
    with _watchers_lock:
        return list(_watchers)


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class SeriesProgress:
    """Counts of one series run. ``planned`` points in all, of which ``to_measure`` are not in
    the lake yet (the rest are reused at once, so the ETA is measured points' pace × the points
    still to measure). Thread-safe: tasks of a point report their windows from worker threads."""

    def __init__(self, planned: int, to_measure: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.planned = planned
        self.to_measure = to_measure
        self.points_done = 0
        self.points_measured = 0
        self.points_reused = 0
        self.flagged: list[str] = []
        self.windows_run = 0
        self.windows_reused = 0
        self.windows_failed = 0
        self.samples = 0
        self.spend_usd: float | None = 0.0
        self._clock = clock
        self._started = clock()
        self._lock = threading.Lock()

    def plan(self, planned: int, to_measure: int) -> None:
        with self._lock:
            self.planned, self.to_measure = planned, to_measure
            self._started = self._clock()

    def on_window(self, outcome: Any) -> None:
        with self._lock:
            if outcome.status == "landed":
                self.windows_run += 1
                self.samples += int(outcome.samples or 0)
            elif outcome.status == "reused":
                self.windows_reused += 1
            else:
                self.windows_failed += 1

    def on_point(self, point: Mapping[str, Any], fresh: bool) -> None:
        with self._lock:
            self.points_done += 1
            if fresh:
                self.points_measured += 1
                cost = (point.get("execution") or {}).get("cost_usd")
                self.spend_usd = None if cost is None or self.spend_usd is None else self.spend_usd + cost
            else:
                self.points_reused += 1
            if point.get("flagged"):
                self.flagged.append(str(point["commit"])[:7])

    def eta_s(self) -> float | None:
        """Seconds until the last point to measure lands, at the pace so far (None before the
        first measured point)."""
        with self._lock:
            left = max(0, self.to_measure - self.points_measured)
            if left == 0:
                return 0.0
            if self.points_measured == 0:
                return None
            return (self._clock() - self._started) / self.points_measured * left

    def line(self) -> str:
        eta = self.eta_s()
        with self._lock:
            spend = "unknown" if self.spend_usd is None else f"${self.spend_usd:.2f}"
            parts = [
                f"points {self.points_done}/{self.planned} "
                f"({self.points_measured} measured, {self.points_reused} already measured)",
                f"windows {self.windows_run} run, {self.windows_reused} reused"
                + (f", {self.windows_failed} failed" if self.windows_failed else ""),
                f"samples {self.samples:,}",
                f"spend {spend}",
                _duration(self._clock() - self._started),
            ]
            if self.points_done < self.planned:
                parts.append("ETA " + ("…" if eta is None else _duration(eta)))
            if self.flagged:
                parts.append("flagged " + ", ".join(self.flagged))
            return " · ".join(parts)


class ProgressDisplay:
    """Draws a :class:`SeriesProgress` on ``out``: on a terminal one line redrawn at every
    window and point; otherwise (a log, a pipe) one line per point, nothing redrawn."""

    def __init__(self, progress: SeriesProgress, out: TextIO, *, tty: bool | None = None) -> None:
        self.progress = progress
        self.out = out
        self.tty = out.isatty() if tty is None else tty
        self._lock = threading.Lock()

    def plan(self, planned: int, to_measure: int) -> None:
        """What the run will do, once it is known (the clock starts here)."""
        self.progress.plan(planned, to_measure)
        self._draw(newline=not self.tty)

    def on_window(self, outcome: Any) -> None:
        self.progress.on_window(outcome)
        if self.tty:
            self._draw()

    def on_point(self, point: Mapping[str, Any], fresh: bool) -> None:
        self.progress.on_point(point, fresh)
        self._draw(newline=not self.tty)

    def finish(self) -> None:
        if self.tty:
            with self._lock:
                self.out.write("\n")
                self.out.flush()

    def _draw(self, *, newline: bool = False) -> None:
        text = self.progress.line()
        with self._lock:
            if self.tty:
                self.out.write("\r" + text + "\x1b[K")
            else:
                self.out.write(text + ("\n" if newline else ""))
            self.out.flush()
