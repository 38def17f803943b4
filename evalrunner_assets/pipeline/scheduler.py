"""Packed execution of a comparison's sample windows: one bounded worker pool, an outage breaker
folded in submission order, cancellation that reaches every sandbox, and crash-safe resume.

Packing. Every (commit, task) step the planner asks for goes into one pool of ``workers``
threads, shared by all tasks and both commits. When a step finishes, the comparison is
re-assessed from the lake and that task's next windows are submitted while the others still
run: no per-round barrier, so one slow window never idles the other workers. A step is never
submitted while a step of the same (commit, task) is in flight, nor twice (run keys).

Timing independence. A task's label depends only on its own landed prefix of fixed windows,
so the order in which tasks finish cannot change any decision. The one cross-task rule is a
sample budget (``budget_samples``): the planner spends it over tasks in affinity order from
what has *landed*, which under packing would depend on which task landed first. So with a budget
the scheduler keeps the round barrier (assess → run the round → assess), exactly as the
sampling sensor does, and the budget is folded in the planner's fixed task order.

Outage breaker. Each submitted step gets a sequence number; results are folded strictly in that
order, whatever order they complete in. A fresh infrastructure failure (sandbox crash, no log,
log status error, invalid log, a sandbox that would not start, the lake unreachable or refusing
a write — each failed attempt, retries included) adds one to the streak; a landed window resets
it; reused windows (a window another process landed first included) and cancelled windows leave
it alone; agent failures (wrong answers, samples that raised in the repository's code — landed
as errored rows, see ``execution.inspect_runner``) are scores, not failures, and never reach
it. At ``threshold`` the comparison stops: everything in
flight is cancelled and nothing more is submitted.

Overshoot bound. Folding waits for the oldest step, so a trip can be *detected* late. Whenever
the unfolded steps (submitted, not yet folded) *could* trip the breaker (finished ones counted
as they are, running ones as if every attempt failed) the scheduler holds at most ``workers``
unfolded steps. Every step submitted after the step that trips was submitted while that step
was unfolded and could trip, so at most ``workers - 1`` steps (one window each in practice) run
past the trip, and those still running at the trip are killed, not finished. In a healthy run
successes reset the worst case, so the hold rarely engages and a slow oldest step does not idle
the pool (the head-of-line blocking a plain in-order window would cost).

Cancellation. ``stop`` (a ``threading.Event``) reaches every sandbox call; the engine sets it on
Ctrl-C (:mod:`~evalrunner_assets.pipeline.interrupts`), the scheduler on a ``KeyboardInterrupt``
in the driving thread or a breaker trip; then it kills the warm pool's sessions (in use or not;
whole process groups), and joins every worker within ``JOIN_SECONDS``. Cancelled windows record nothing in the lake and run again on resume;
completed windows stay landed.

Resume. Windows land atomically (record last), so a ``kill -9`` at any point leaves either a
committed batch or nothing that a reader sees; :func:`sweep_orphaned_temp_files` removes the
temporary files such a kill leaves behind, and the next run reuses every committed window.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalrunner_assets.errors import EvalrunnerError
from evalrunner_assets.execution import pid_alive
from evalrunner_assets.execution.backends import default_workers
from evalrunner_assets.pipeline.loop import Step
from evalrunner_assets.pipeline.windows import WindowOutcome

DEFAULT_BREAKER_THRESHOLD = 5
MAX_ATTEMPTS = 2  # a window is retried at most once (see pipeline.windows)
JOIN_SECONDS = 15.0


class SchedulerError(EvalrunnerError, RuntimeError):
    """The scheduler was configured wrongly; the message names the setting."""


@dataclass
class Unit:
    """One submitted (commit, task) step."""

    seq: int
    step: Step
    windows: int
    future: cf.Future | None = None
    outcomes: list[WindowOutcome] = field(default_factory=list)
    error: str | None = None  # the step raised before producing outcomes (e.g. a sandbox would not start)
    error_kind: str = "sandbox_start"  # what kind of infrastructure failure ``error`` is
    submitted_at: float = 0.0
    finished_at: float | None = None

    @property
    def cancelled(self) -> bool:
        return any(o.status == "cancelled" for o in self.outcomes)


# Inspect's refusal of a model name whose provider it does not have (inspect_ai.model._model).
_UNKNOWN_MODEL = re.compile(r"Model API (\S+) of model '([^']+)' not recognized")


@dataclass
class BreakerTrip:
    threshold: int
    failures: list[dict[str, Any]]  # the streak that tripped it, oldest first
    tripped_at_seq: int
    overshoot_steps: list[dict[str, Any]] = field(default_factory=list)  # submitted after the trip step
    overshoot_bound: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "consecutive_failures": len(self.failures),
            "failures": self.failures,
            "tripped_at_step": self.tripped_at_seq,
            "overshoot_steps": self.overshoot_steps,
            "overshoot_bound": self.overshoot_bound,
        }

    def configuration_error(self) -> tuple[str, str] | None:
        """(what is wrong, how to fix it) when every failure of the streak is the same mistake
        in the comparison's own configuration rather than an outage (a model Inspect does not
        know in the repository's environment); None otherwise."""
        found = [_UNKNOWN_MODEL.search(str(f["cause"])) for f in self.failures]
        models = {m.groups() for m in found if m}
        if not all(found) or len(models) != 1:
            return None
        api, model = models.pop()
        return (
            f"the model {model!r} is not known to Inspect in the repository's environment "
            f"(no model provider named {api!r}; {len(self.failures)} windows failed the same way)",
            "check --model (or the agent config's model); a provider from a package must be in the "
            "repository's dependencies, and `inspect info` lists the built-in providers",
        )

    def describe(self) -> str:
        misconfigured = self.configuration_error()
        if misconfigured is not None:
            return misconfigured[0]
        kinds: dict[str, int] = {}
        for f in self.failures:
            kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
        what = ", ".join(f"{n}× {k}" for k, n in sorted(kinds.items()))
        last = self.failures[-1]
        return (
            f"outage breaker tripped after {len(self.failures)} consecutive infrastructure failures "
            f"({what}); last: {last['task']} @ {last['commit'][:7]} {last['window']}: {last['cause'][:300]}"
        )


class OutageBreaker:
    """Consecutive fresh infrastructure failures, folded in submission order."""

    def __init__(self, threshold: int = DEFAULT_BREAKER_THRESHOLD) -> None:
        if threshold < 1:
            raise SchedulerError(f"breaker threshold must be at least 1, got {threshold}")
        self.threshold = threshold
        self.streak: list[dict[str, Any]] = []
        self.trip: BreakerTrip | None = None

    @staticmethod
    def events(unit: Unit) -> list[tuple[str, dict[str, Any] | None]]:
        """A finished unit's breaker events in order: ("fail", info) or ("ok", None)."""
        events: list[tuple[str, dict[str, Any] | None]] = []
        if unit.error is not None:
            events.append(
                ("fail", {"kind": unit.error_kind, "cause": unit.error, "window": ",".join(unit.step.windows)})
            )
        for o in unit.outcomes:
            for kind, cause in o.failed_attempts:  # fresh attempts only (empty for reused/recorded)
                events.append(("fail", {"kind": kind, "cause": cause, "window": o.key.window.name}))
            if o.status == "landed":
                events.append(("ok", None))
        return events

    def fold(self, unit: Unit) -> bool:
        """Fold one unit's outcomes (in window order); True if this unit trips the breaker."""
        if self.trip is not None:
            return False
        for what, info in self.events(unit):
            if what == "ok":
                self.streak = []
                continue
            assert info is not None
            self.streak.append(
                {"step": unit.seq, "commit": unit.step.commit.split("@")[-1], "task": unit.step.task, **info}
            )
            if len(self.streak) >= self.threshold:
                self.trip = BreakerTrip(self.threshold, list(self.streak), unit.seq)
                return True
        return False

    def could_trip(self, unfolded: Sequence[Unit]) -> bool:
        """Whether folding ``unfolded`` (in order) could trip the breaker: finished units as
        they are, running ones as if every attempt of every window failed (a window is tried
        at most twice). Never below the real streak, so False means no unfolded unit trips."""
        n = len(self.streak)
        for unit in unfolded:
            if unit.finished_at is None:
                n += max(1, MAX_ATTEMPTS * unit.windows)
            else:
                for what, _ in self.events(unit):
                    n = 0 if what == "ok" else n + 1
            if n >= self.threshold:
                return True
        return False


def failure_kind(exc: BaseException) -> str:
    """The infrastructure failure a step's exception is: the lake unreachable, a lake write
    that failed (a full disk included, wherever it struck), or a sandbox that would not start."""
    import errno

    from lake.storage import LakeUnavailable, LakeWriteError

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, LakeUnavailable):
            return "lake_unavailable"
        if isinstance(seen, LakeWriteError) or (
            isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT)
        ):
            return "lake_write"
        seen = seen.__cause__ or seen.__context__
    return "sandbox_start"


def window_accounting(outcomes: Sequence[WindowOutcome]) -> dict[str, Any]:
    """Samples, tokens and cost of windows that ran but did not land (failed or cancelled),
    where their logs say (:func:`~evalrunner_assets.pricing.usage_accounting`)."""
    from evalrunner_assets.pricing import PriceTable, usage_accounting

    ran = [o for o in outcomes if o.status in ("failed", "cancelled", "budget_stopped") and o.attempts > 0]
    return usage_accounting((o.usage for o in ran), PriceTable.default())


class PackedScheduler:
    """Run sample steps on a bounded pool; see the module docstring for the guarantees.

    ``plan()`` returns the steps the planner wants now (re-read from the lake each call);
    ``run_step(step, stop)`` runs one step's windows and returns their outcomes;
    ``on_done(unit)`` is called on the driving thread after each unit is folded (e.g. to record
    the Dagster materialization and print progress); ``on_idle()`` when the driver may do
    periodic work."""

    def __init__(
        self,
        *,
        plan: Callable[[], list[Step]],
        run_step: Callable[[Step, threading.Event], list[WindowOutcome]],
        on_done: Callable[[Unit], None] | None = None,
        on_idle: Callable[[], None] | None = None,
        kill_sandboxes: Callable[[], None] | None = None,
        workers: int | None = None,
        breaker_threshold: int = DEFAULT_BREAKER_THRESHOLD,
        packed: bool = True,
        stop: threading.Event | None = None,
        executor: cf.ThreadPoolExecutor | None = None,
    ) -> None:
        self.workers = default_workers() if workers is None else workers
        if self.workers < 1:
            raise SchedulerError(f"workers must be at least 1, got {self.workers}")
        # A caller's executor, when warm sandboxes were opened on its threads before the loop
        # (a local sandbox dies with the thread that started it). The scheduler shuts it down.
        self.executor = executor
        self.plan, self.run_step = plan, run_step
        self.on_done, self.on_idle, self.kill_sandboxes = on_done, on_idle, kill_sandboxes
        self.packed = packed
        self.breaker = OutageBreaker(breaker_threshold)
        self.stop = stop or threading.Event()
        self.units: list[Unit] = []
        self.in_flight: dict[tuple[str, str], Unit] = {}  # (commit, task) -> its running step
        self.done_keys: set[str] = set()
        self.cancelled = False
        self.max_in_flight = 0
        self._fold_next = 0

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> None:
        """Until the planner has nothing left, the breaker trips, or ``stop`` is set.
        Re-raises ``KeyboardInterrupt`` after cancelling and joining everything."""
        executor = self.executor or cf.ThreadPoolExecutor(
            max_workers=self.workers, thread_name_prefix="evalrunner-window"
        )
        in_flight = self.in_flight
        try:
            while True:
                if self.stop.is_set() or self.breaker.trip is not None:
                    break
                if self.packed or not in_flight:
                    self._submit(executor, in_flight)
                if not in_flight:
                    break
                done, _ = cf.wait(
                    [u.future for u in in_flight.values() if u.future is not None],  # set on submission
                    timeout=0.25,
                    return_when=cf.FIRST_COMPLETED,
                )
                if not done:
                    if self.on_idle is not None:
                        self.on_idle()
                    continue
                for ck, unit in list(in_flight.items()):
                    if unit.future in done:
                        self._collect(unit)
                        del in_flight[ck]
                folded = self._fold()
                if not self.stop.is_set() and self.packed:
                    self._submit(executor, in_flight)  # refill before any bookkeeping
                if self.on_done is not None:
                    for unit in folded:
                        self.on_done(unit)
            if self.breaker.trip is not None or self.stop.is_set():
                self._cancel(executor, in_flight)
        except BaseException:
            self.cancelled = True
            self._cancel(executor, in_flight)
            raise
        finally:
            executor.shutdown(wait=False, cancel_futures=True)

    def _submit(self, executor: cf.ThreadPoolExecutor, in_flight: dict[tuple[str, str], Unit]) -> None:
        steps = [s for s in self.plan() if s.kind == "samples"]
        # Breadth first: a (commit, task) that has had fewer steps goes first, then the
        # planner's order, so every task's sandbox is busy early rather than one task at a time.
        count: dict[tuple[str, str], int] = {}
        for u in self.units:
            count[(u.step.commit, u.step.task)] = count.get((u.step.commit, u.step.task), 0) + 1
        steps = [s for _, s in sorted(enumerate(steps), key=lambda p: (count.get((p[1].commit, p[1].task), 0), p[0]))]
        for step in steps:
            ck = (step.commit, step.task)
            if ck in in_flight or step.run_key in self.done_keys:
                continue
            if len(in_flight) >= self.workers:
                break
            # The overshoot bound (module docstring): hold at most `workers` unfolded steps
            # only while one of them could still trip the breaker.
            if self._unfolded() >= self.workers and self.breaker.could_trip(self.units[self._fold_next :]):
                break
            unit = Unit(seq=len(self.units), step=step, windows=len(step.windows), submitted_at=time.monotonic())
            self.units.append(unit)
            unit.future = executor.submit(self._run_unit, unit)
            in_flight[ck] = unit
            self.max_in_flight = max(self.max_in_flight, len(in_flight))

    def _run_unit(self, unit: Unit) -> list[WindowOutcome]:
        if self.stop.is_set():
            return []
        return self.run_step(unit.step, self.stop)

    def _collect(self, unit: Unit) -> None:
        assert unit.future is not None
        unit.finished_at = time.monotonic()
        try:
            unit.outcomes = unit.future.result()
        except Exception as exc:  # the step could not run at all: an infrastructure failure
            unit.error = f"{type(exc).__name__}: {str(exc)[:600]}"
            unit.error_kind = failure_kind(exc)
        if not unit.cancelled:
            self.done_keys.add(unit.step.run_key)

    def _unfolded(self) -> int:
        return len(self.units) - self._fold_next

    def _fold(self) -> list[Unit]:
        """Fold finished units strictly in submission order; returns the units folded."""
        folded: list[Unit] = []
        while self._fold_next < len(self.units):
            unit = self.units[self._fold_next]
            if unit.finished_at is None:
                break
            self._fold_next += 1
            folded.append(unit)
            if self.breaker.fold(unit):
                trip = self.breaker.trip
                assert trip is not None
                later = self.units[unit.seq + 1 :]
                trip.overshoot_steps = [
                    {
                        "step": u.seq,
                        "task": u.step.task,
                        "commit": u.step.commit.split("@")[-1],
                        "windows": list(u.step.windows),
                    }
                    for u in later
                ]
                trip.overshoot_bound = self.workers - 1
                self.stop.set()
        return folded

    def _cancel(self, executor: cf.ThreadPoolExecutor, in_flight: dict[tuple[str, str], Unit]) -> None:
        """Stop everything in flight: every sandbox killed, every worker joined (bounded)."""
        self.stop.set()
        deadline = time.monotonic() + JOIN_SECONDS
        if self.kill_sandboxes is not None:
            self.kill_sandboxes()
        futures = [u.future for u in in_flight.values() if u.future is not None]
        cf.wait(futures, timeout=max(0.0, deadline - time.monotonic()))
        for unit in in_flight.values():
            if unit.future is not None and unit.future.done():
                self._collect(unit)
        if self.kill_sandboxes is not None:
            self.kill_sandboxes()  # a session a worker opened while we were stopping
        executor.shutdown(wait=False, cancel_futures=True)
        for t in list(getattr(executor, "_threads", ())):
            t.join(timeout=max(0.0, deadline - time.monotonic()))

    # -- reporting -------------------------------------------------------------------------

    def outcomes(self) -> list[WindowOutcome]:
        return [o for u in self.units for o in u.outcomes]

    def summary(self) -> dict[str, Any]:
        outs = self.outcomes()
        status: dict[str, int] = {}
        for o in outs:
            status[o.status] = status.get(o.status, 0) + 1
        return {
            "workers": self.workers,
            "packed": self.packed,
            "steps": len(self.units),
            "max_in_flight": self.max_in_flight,
            "windows": status,
            "failed_attempts": sum(len(o.failed_attempts) for o in outs) + sum(1 for u in self.units if u.error),
            "cancelled_windows": [
                {"task": o.key.task, "commit": o.key.commit, "window": o.key.window.name}
                for o in outs
                if o.status == "cancelled"
            ],
            "not_landed": window_accounting(outs),
        }


# -- resume: temporary files a kill left in a local lake --------------------------------------


def _open_paths() -> set[str]:
    """Every file some process on this machine holds open (best effort)."""
    out: set[str] = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        fd_dir = f"/proc/{pid}/fd"
        try:
            for fd in os.listdir(fd_dir):
                try:
                    out.add(os.readlink(f"{fd_dir}/{fd}"))
                except OSError:
                    pass
        except OSError:
            pass
    return out


_TEMP_WRITER = re.compile(r"\.tmp-(\d+)-[0-9a-f]{32}$")


def sweep_orphaned_temp_files(root: str, prefixes: Sequence[str], *, min_age_s: float = 2.0) -> list[str]:
    """Remove ``.<name>.tmp-<id>`` files under ``root/<prefix>`` that a killed writer left.

    A writer holds its temporary file open until it renames it, microseconds later; so a temp
    file no process has open belongs to a writer that died when the writer's pid (in the name:
    ``.tmp-<pid>-<id>``) is no longer alive, or, for names without one, when it has not changed
    for ``min_age_s``. Returns the removed paths."""
    candidates: list[str] = []
    for prefix in prefixes:
        base = os.path.join(root, prefix)
        for dirpath, _, files in os.walk(base):
            candidates += [os.path.join(dirpath, f) for f in files if f.startswith(".") and ".tmp-" in f]
    return _remove_orphans(candidates, min_age_s)


def sweep_temp_file_of(root: str, rel: str, pid: int) -> list[str]:
    """Remove the temporary file ``root/<rel>`` that writer ``pid`` (no longer alive) left, as
    its temp-write record names it, under the same checks as :func:`sweep_orphaned_temp_files`;
    returns it when removed. A record naming anything but a temporary file of that writer inside
    ``root`` removes nothing."""
    path = os.path.normpath(os.path.join(root, rel))
    name = os.path.basename(path)
    # Resolved, so neither ".." nor a symlinked directory leads out of the lake.
    inside = os.path.realpath(path).startswith(os.path.join(os.path.realpath(root), ""))
    if not inside or not name.startswith(".") or f".tmp-{int(pid)}-" not in name or not os.path.exists(path):
        return []
    return _remove_orphans([path], 0.0)


def _remove_orphans(candidates: list[str], min_age_s: float) -> list[str]:
    removed: list[str] = []
    if not candidates:
        return removed
    open_now = _open_paths()
    now = time.time()
    for path in candidates:
        try:
            if path in open_now:
                continue
            writer = _TEMP_WRITER.search(path)
            if writer is not None and pid_alive(int(writer.group(1))):
                continue  # its writer may be between closing and renaming it
            if writer is None and now - os.stat(path).st_mtime < min_age_s:
                continue
            os.unlink(path)
            removed.append(path)
        except OSError:
            pass
    return removed
