"""Batch planning for the adaptive loop: only undecided tasks, both arms, within cap and budget."""

from __future__ import annotations

import pytest

from evalrunner_assets.stats import (
    Budget,
    PlanError,
    StatsParams,
    TaskPlanState,
    plan_next_windows,
    window_schedule,
    window_size,
    window_span,
)
from lake.layout import Window

PARAMS = StatsParams(batch_size=8, min_pairs=8, cap=64)


def test_only_undecided_tasks_get_windows_on_both_arms():
    states = {
        "a": TaskPlanState(next_start=8, n_samples=100),
        "b": TaskPlanState(next_start=16, n_samples=100, label="improved"),
        "c": TaskPlanState(next_start=0, n_samples=100, label="inconclusive"),
        "d": TaskPlanState(next_start=0, n_samples=100),
    }
    plans = plan_next_windows(states, params=PARAMS)
    assert [(p.task, p.start, p.stop) for p in plans] == [("a", 8, 16), ("d", 0, 8)]
    assert all(p.arms == ("head", "base") for p in plans)
    # A plan is plain positions; the caller builds the lake's window from them.
    assert Window(plans[0].start, plans[0].stop).name == "w000008-000016"


def test_windows_stop_at_the_dataset_end_and_the_cap():
    states = {
        "small": TaskPlanState(next_start=8, n_samples=13),
        "capped": TaskPlanState(next_start=60, n_samples=1000),
        "done": TaskPlanState(next_start=64, n_samples=1000),
        "empty": TaskPlanState(next_start=13, n_samples=13),
    }
    plans = {p.task: (p.start, p.stop) for p in plan_next_windows(states, params=PARAMS)}
    assert plans == {"small": (8, 13), "capped": (60, 64)}


def test_first_window_reaches_min_pairs():
    plans = plan_next_windows({"a": TaskPlanState(0, 100)}, params=StatsParams(batch_size=4, min_pairs=10, cap=64))
    assert (plans[0].start, plans[0].stop) == (0, 10)


def test_affinity_order_comes_first_then_task_id():
    states = {t: TaskPlanState(0, 100) for t in ("d", "c", "b", "a")}
    plans = plan_next_windows(states, params=PARAMS, affinity_order=["c", "missing", "a"])
    assert [p.task for p in plans] == ["c", "a", "b", "d"]


def test_sample_budget_shrinks_and_then_stops_windows():
    states = {t: TaskPlanState(0, 100) for t in ("a", "b", "c")}
    plans = plan_next_windows(states, params=PARAMS, budget_remaining=Budget(samples=22))
    # 8 pairs x 2 arms = 16 samples for a, the 6 left give b 3 pairs, c gets nothing.
    assert [(p.task, p.size) for p in plans] == [("a", 8), ("b", 3)]


def test_dollar_budget_uses_cost_estimates_and_reports_them():
    states = {
        "a": TaskPlanState(0, 100, cost_per_sample=0.5),
        "b": TaskPlanState(0, 100, cost_per_sample=0.5),
        "c": TaskPlanState(0, 100),
    }
    plans = plan_next_windows(states, params=PARAMS, budget_remaining=Budget(dollars=10.0))
    assert [(p.task, p.size, p.estimated_cost) for p in plans] == [("a", 8, 8.0), ("b", 2, 2.0), ("c", 8, None)]


def test_bad_state_is_named():
    with pytest.raises(PlanError, match="next_start"):
        TaskPlanState(next_start=-1, n_samples=3)
    with pytest.raises(PlanError, match="label"):
        TaskPlanState(next_start=0, n_samples=3, label="done")
    with pytest.raises(PlanError, match="'a'"):
        plan_next_windows({"a": object()}, params=PARAMS)  # type: ignore[dict-item]


def test_window_schedule_is_small_first_then_grows_by_at_most_an_eighth():
    ends = [stop for _, stop in window_schedule(256)]
    assert ends[:9] == [8, 16, 24, 32, 40, 48, 56, 64, 72]
    assert ends[-1] == 256 and ends == sorted(set(ends))
    spans = window_schedule(4096)
    assert all(b == c for (_, b), (c, _) in zip(spans, spans[1:]))  # contiguous from 0
    # After the first 64 pairs a window is at most 1/8 of the pairs before it: a label that
    # settles inside a window costs at most 12.5% more pairs than it needed.
    assert all((stop - start) * 8 <= start for start, stop in spans if start >= 64)
    assert len(spans) < 60  # and still few windows for `/eval more 4000`
    # A window depends only on where it starts: a smaller limit cuts, never moves, it.
    assert window_span(120, 124) == (120, 124) and window_span(120, 4096) == window_span(120, 256)
    with pytest.raises(PlanError, match="window start"):
        window_size(-1)
