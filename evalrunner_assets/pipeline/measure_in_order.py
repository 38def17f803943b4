"""Measure several points at once, finish them in order.

A backfill's points are flagged oldest first (each against the nearest measured point before
it) and a candidate is paired against the reference measured first, so their results must be
*used* in order — but nothing forces them to be *measured* one at a time. Measured one at a
time, a point's last, slowest task leaves the other sandbox slots idle, and each point's
discovery runs alone. Here up to ``ahead`` measurements run at once, their sandbox work packed
into one shared pool of ``workers`` slots (:class:`SandboxSlots`), and each result is handed
back in the items' order as soon as it and every one before it are done. Plain Python.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

# How often a wait for the oldest result looks at the caller's cancel event.
_POLL_S = 0.2


class SandboxSlots:
    """The worker budget shared by every measurement of one run: a job that starts sandboxes (a
    task's windows, a commit's discovery) takes a slot for as long as it runs. Jobs start in the
    order they were submitted, so an older point's tasks go before a newer point's."""

    def __init__(self, workers: int) -> None:
        self.workers = max(1, workers)
        self._executor = cf.ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="evalrunner-slot")

    def submit(self, fn: Callable[..., R], /, *args: object) -> cf.Future[R]:
        return self._executor.submit(fn, *args)

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> SandboxSlots:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def measure_in_order(
    items: Sequence[T],
    measure: Callable[[T, threading.Event], R],
    *,
    ahead: int,
    cancel: threading.Event | None = None,
) -> Iterator[tuple[T, R]]:
    """Yield ``(item, measure(item, stop))`` for ``items`` in their order, running up to
    ``ahead`` measurements at once (started oldest first; a finished one waits for those before
    it). ``stop`` is set when ``cancel`` is, when a measurement raised, and when the consumer
    stops early; measurements should then end soon. An exception is raised at its item's turn,
    after every measurement still running has returned, so nothing writes after this returns."""
    stop = threading.Event()
    pending: deque[tuple[T, cf.Future[R]]] = deque()
    upcoming = iter(items)
    with cf.ThreadPoolExecutor(max_workers=max(1, ahead), thread_name_prefix="evalrunner-point") as ex:
        try:

            def top_up() -> None:
                while len(pending) < max(1, ahead) and not stop.is_set():
                    try:
                        item = next(upcoming)
                    except StopIteration:
                        return
                    pending.append((item, ex.submit(measure, item, stop)))

            top_up()
            while pending:
                item, future = pending[0]
                while True:
                    if cancel is not None and cancel.is_set():
                        stop.set()
                    try:
                        result = future.result(timeout=_POLL_S)
                        break
                    except cf.TimeoutError:
                        continue
                    except BaseException:
                        stop.set()  # the rest stop soon; the pool's exit waits for them
                        raise
                pending.popleft()
                yield item, result
                top_up()
        finally:
            # Normal end, an error, or the consumer closing the generator early: nothing new
            # starts, and the pool's exit waits for what is running.
            stop.set()
            for _, future in pending:
                future.cancel()
