"""The packed scheduler without sandboxes: steps are stand-ins that sleep and return outcomes,
so folding order, the breaker, its overshoot bound, packing and cancellation are exercised on
the real scheduler code with controlled timing."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from evalrunner_assets.pipeline.loop import Step
from evalrunner_assets.pipeline.scheduler import BreakerTrip, OutageBreaker, PackedScheduler, SchedulerError, Unit
from evalrunner_assets.pipeline.windows import WindowOutcome
from lake import Window


def outcome(step: Step, status: str, kind: str = "sandbox_crashed") -> WindowOutcome:
    key = SimpleNamespace(task=step.task, commit=step.commit, window=Window(0, 16))
    failed = [(kind, "it broke")] if status == "failed" else []
    return WindowOutcome(key, status, attempts=0 if status == "reused" else 1, failed_attempts=failed)  # type: ignore[arg-type]


class Script:
    """A queue of steps, each with a duration and a result; a step is planned until it ran."""

    def __init__(self, plan: list[tuple[str, float, str]]) -> None:
        self.steps = {
            name: (
                Step("samples", f"samples:{name}", commit="c@" + "0" * 40, task=name, windows=("w000000-000016",)),
                dur,
                res,
            )
            for name, dur, res in plan
        }
        self.order = [name for name, _, _ in plan]
        self.ran: list[str] = []
        self.finished: set[str] = set()
        self.lock = threading.Lock()

    def plan(self) -> list[Step]:
        return [self.steps[n][0] for n in self.order if n not in self.finished]

    def run_step(self, step: Step, stop: threading.Event) -> list[WindowOutcome]:
        _, dur, res = self.steps[step.task]
        with self.lock:
            self.ran.append(step.task)
        end = time.monotonic() + dur
        while time.monotonic() < end:
            if stop.is_set():
                return [outcome(step, "cancelled")]
            time.sleep(0.005)
        with self.lock:
            self.finished.add(step.task)
        return [outcome(step, res)]


def run(script: Script, workers: int, packed: bool = True, threshold: int = 5) -> PackedScheduler:
    s = PackedScheduler(
        plan=script.plan, run_step=script.run_step, workers=workers, packed=packed, breaker_threshold=threshold
    )
    s.run()
    return s


def test_breaker_trips_on_the_same_step_whatever_order_steps_complete_in() -> None:
    trips = set()
    for durations in (
        [0.01] * 10,
        [0.2, 0.01, 0.01, 0.15, 0.01, 0.3, 0.01, 0.01, 0.01, 0.01],
        [0.01, 0.3, 0.2, 0.1, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01],
    ):
        results = ["landed", "failed", "landed", "failed", "failed", "failed", "failed", "failed", "landed", "failed"]
        script = Script([(f"t{i}", d, r) for i, (d, r) in enumerate(zip(durations, results))])
        s = run(script, workers=3)
        assert s.breaker.trip is not None
        trips.add((s.breaker.trip.tripped_at_seq, tuple(f["task"] for f in s.breaker.trip.failures)))
    assert trips == {(7, ("t3", "t4", "t5", "t6", "t7"))}


def test_overshoot_stays_within_workers_minus_one_even_behind_a_slow_step() -> None:
    for workers in (2, 3, 4):
        # A slow healthy step first, then a run of fast failures: folding waits for the slow one.
        script = Script([("slow", 0.5, "landed")] + [(f"f{i}", 0.01, "failed") for i in range(20)])
        s = run(script, workers=workers)
        trip = s.breaker.trip
        assert trip is not None and trip.tripped_at_seq == 5
        assert len(trip.overshoot_steps) <= workers - 1 == trip.overshoot_bound
        assert len(s.units) <= trip.tripped_at_seq + workers


def test_a_success_resets_the_streak_and_reused_or_cancelled_windows_do_not_count() -> None:
    b = OutageBreaker(3)
    step = Step("samples", "k", commit="c@x", task="t", windows=("w000000-000016",))
    for status in ("failed", "failed", "landed", "failed", "reused", "cancelled", "failed"):
        assert not b.fold(Unit(0, step, 1, outcomes=[outcome(step, status)]))
    assert b.fold(Unit(1, step, 1, outcomes=[outcome(step, "failed")]))
    assert [f["kind"] for f in b.trip.failures] == ["sandbox_crashed"] * 3  # type: ignore[union-attr]


def test_agent_failures_never_reach_the_breaker() -> None:
    # A window whose samples all scored wrong (or errored inside the sample) still landed.
    script = Script([(f"t{i}", 0.01, "landed") for i in range(12)])
    s = run(script, workers=2, threshold=1)
    assert s.breaker.trip is None and len(script.finished) == 12


class SlowFirst(Script):
    """``slow`` and then ``fast`` quick steps; ``slow`` lasts until every fast step has finished
    or ``slow_s`` has passed, and records how many fast steps finished while it ran. Packing is
    seen in what ran alongside the slow step, not in wall-clock totals (which a loaded machine
    blurs)."""

    def __init__(self, fast: int, slow_s: float) -> None:
        super().__init__([("slow", slow_s, "landed")] + [(f"t{i}", 0.02, "landed") for i in range(fast)])
        self.fast = fast
        self.all_fast_done = threading.Event()
        self.fast_done_during_slow: int | None = None

    def run_step(self, step: Step, stop: threading.Event) -> list[WindowOutcome]:
        if step.task != "slow":
            result = super().run_step(step, stop)
            with self.lock:
                if len(self.finished - {"slow"}) == self.fast:
                    self.all_fast_done.set()
            return result
        with self.lock:
            self.ran.append("slow")
        end = time.monotonic() + self.steps["slow"][1]
        while not self.all_fast_done.is_set() and time.monotonic() < end:
            if stop.is_set():
                return [outcome(step, "cancelled")]
            time.sleep(0.005)
        with self.lock:
            self.fast_done_during_slow = len(self.finished)
            self.finished.add("slow")
        return [outcome(step, "landed")]


def test_packed_scheduling_keeps_workers_busy_past_a_slow_step() -> None:
    # Packed: the second worker runs every fast step while the slow one is still running (the
    # slow step only ends early because of that; 30 s bounds a failure, it is not a wait).
    packed = SlowFirst(fast=7, slow_s=30.0)
    s = run(packed, workers=2, packed=True)
    assert s.max_in_flight == 2
    assert packed.fast_done_during_slow == 7, packed.fast_done_during_slow
    # A barrier per round: only the slow step's round-mate can finish while it runs.
    barrier = SlowFirst(fast=7, slow_s=0.6)
    run(barrier, workers=2, packed=False)
    assert barrier.fast_done_during_slow is not None and barrier.fast_done_during_slow <= 1
    assert barrier.finished == set(barrier.order)


def test_stop_cancels_in_flight_steps_and_joins_workers_quickly() -> None:
    script = Script([(f"t{i}", 30.0, "landed") for i in range(4)])
    stop = threading.Event()
    s = PackedScheduler(plan=script.plan, run_step=script.run_step, workers=2, stop=stop)
    stopped_at: list[float] = []

    def stop_once_both_workers_run() -> None:  # not after a fixed delay: a loaded machine starts late
        deadline = time.monotonic() + 20
        while len(script.ran) < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
        stopped_at.append(time.monotonic())
        stop.set()

    threading.Thread(target=stop_once_both_workers_run, daemon=True).start()
    s.run()
    assert time.monotonic() - stopped_at[0] < 3
    assert [o.status for o in s.outcomes()] == ["cancelled", "cancelled"]
    assert not [t for t in threading.enumerate() if t.name.startswith("evalrunner-window") and t.is_alive()]


def test_never_runs_a_step_twice_or_two_steps_of_one_task_at_once() -> None:
    script = Script([(f"t{i}", 0.02, "landed") for i in range(6)])
    s = run(script, workers=4)
    assert sorted(script.ran) == sorted(set(script.ran)) and len(s.units) == 6


def test_a_worker_count_below_one_is_refused() -> None:
    with pytest.raises(SchedulerError, match="workers must be at least 1"):
        PackedScheduler(plan=list, run_step=lambda s, e: [], workers=0)


def test_sweep_removes_a_dead_writers_temp_file_at_once_and_spares_live_ones(tmp_path) -> None:
    import os
    import subprocess
    import sys
    import time

    from evalrunner_assets.pipeline.scheduler import sweep_orphaned_temp_files

    d = tmp_path / "raw"
    d.mkdir()
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(done.stdout)  # that process has exited
    dead = d / f".a.json.tmp-{dead_pid}-{'0' * 32}"
    live = d / f".b.json.tmp-{os.getpid()}-{'1' * 32}"  # this process: a writer about to rename
    old_style = d / ".c.json.tmp-abc"  # no pid: only the age rule applies
    for p in (dead, live, old_style):
        p.write_bytes(b"partial")
    removed = sweep_orphaned_temp_files(str(tmp_path), ["raw"], min_age_s=60)
    assert removed == [str(dead)]
    assert live.exists() and old_style.exists()
    os.utime(old_style, (time.time() - 120, time.time() - 120))
    assert sweep_orphaned_temp_files(str(tmp_path), ["raw"], min_age_s=60) == [str(old_style)]
    assert live.exists()


def test_a_trip_on_one_unknown_model_is_the_requests_mistake_and_a_mixed_one_an_outage():
    unknown = "warm worker reported: ValueError: Model API nosuch of model 'nosuch/v1' not recognized.; no Inspect log"
    failure = {"kind": "no_log", "task": "t", "commit": "a" * 40, "window": "w0"}
    same = BreakerTrip(5, [{**failure, "cause": unknown} for _ in range(5)], 5)
    what, hint = same.configuration_error() or ("", "")
    assert "the model 'nosuch/v1' is not known to Inspect" in what and "5 windows failed the same way" in what
    assert same.describe() == what and "--model" in hint
    mixed = BreakerTrip(5, [{**failure, "cause": unknown}] * 4 + [{**failure, "cause": "sandbox died"}], 5)
    assert mixed.configuration_error() is None and mixed.describe().startswith("outage breaker tripped")
