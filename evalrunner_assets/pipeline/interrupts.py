"""Ctrl-C while a comparison runs: SIGINT asks the engine to stop, and the engine stops where it
can save the cancellation whole.

Python raises ``KeyboardInterrupt`` wherever the main thread is when SIGINT arrives: halfway
through an assessment (its cache then in doubt), inside a recording, a lake write, or the handler
saving the cancellation itself. So while the engine runs on the main thread, SIGINT only sets the
comparison's ``stop`` event (:func:`sigint_sets`); the engine notices it at its next check (the
scheduler polls every 0.25 s) and saves the cancelled document with nothing half-done. Further
Ctrl-Cs while that is saved are counted and ignored: the save is bounded, and a second Ctrl-C
cutting it short is how a cancellation used to be lost.

Only Python's default handler is replaced: a process that installed its own (Dagster's run
worker turns SIGINT into its interrupted-execution error) keeps it, and the engine treats what
that handler raises as a cancellation (:func:`is_interrupt`).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

# DuckDB's Python API raises this (a plain RuntimeError) when SIGINT arrives mid-query.
DUCKDB_INTERRUPTED = "Query interrupted"


@dataclass
class SigintCount:
    """SIGINTs received while :func:`sigint_sets` deferred them (``deferring``)."""

    deferring: bool = False
    received: int = 0


@contextmanager
def sigint_sets(stop: threading.Event) -> Iterator[SigintCount]:
    """While the block runs, SIGINT sets ``stop`` instead of raising ``KeyboardInterrupt`` — on
    the main thread, when the process has Python's default handler (else nothing changes:
    ``deferring`` is False). The previous handler is restored on exit."""
    count = SigintCount()
    if threading.current_thread() is not threading.main_thread():
        yield count
        return
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield count
        return

    def deferred(signum: int, frame: Any) -> None:
        count.received += 1
        stop.set()

    previous = signal.signal(signal.SIGINT, deferred)
    count.deferring = True
    try:
        yield count
    finally:
        signal.signal(signal.SIGINT, previous)
        count.deferring = False


@contextmanager
def sigint_ignored() -> Iterator[None]:
    """SIGINT does nothing while the block runs (on the main thread; elsewhere it cannot raise
    anyway): for saving a cancellation, which a second Ctrl-C must not cut short."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def is_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is how an interrupt surfaced: ``KeyboardInterrupt``, another handler's
    interrupt (a ``BaseException`` that is neither an ``Exception`` nor an exit), or DuckDB's
    "Query interrupted"."""
    if isinstance(exc, KeyboardInterrupt):
        return True
    if not isinstance(exc, Exception):
        return not isinstance(exc, (SystemExit, GeneratorExit))
    if type(exc).__name__ == "InterruptException" and type(exc).__module__.startswith("duckdb"):
        return True
    return isinstance(exc, RuntimeError) and str(exc).strip() == DUCKDB_INTERRUPTED
