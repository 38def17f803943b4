"""What to run next in the adaptive loop: a pure function of per-task state and budget."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evalrunner_assets.stats._decide import LABELS
from evalrunner_assets.stats._errors import PlanError
from evalrunner_assets.stats._params import StatsParams

ARMS: tuple[str, str] = ("head", "base")


@dataclass(frozen=True)
class TaskPlanState:
    """What the planner needs to know about one task.

    next_start: positions [0, next_start) of the task's seeded sample order have already been
        requested on both arms (an errored sample still uses its position).
    n_samples: dataset size (positions beyond it do not exist).
    label: the task's current label; only "continue" is sampled further.
    cost_per_sample: estimated dollars per sample per arm, None when unknown.
    """

    next_start: int
    n_samples: int
    label: str = "continue"
    cost_per_sample: float | None = None

    def __post_init__(self) -> None:
        for name in ("next_start", "n_samples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise PlanError(f"{name} must be a non-negative integer, got {value!r}")
        if self.label not in LABELS:
            raise PlanError(f"label must be one of {', '.join(LABELS)}, got {self.label!r}")
        if self.cost_per_sample is not None and (
            not isinstance(self.cost_per_sample, (int, float))
            or not math.isfinite(self.cost_per_sample)
            or self.cost_per_sample < 0
        ):
            raise PlanError(f"cost_per_sample must be a non-negative number or None, got {self.cost_per_sample!r}")


@dataclass(frozen=True)
class Budget:
    """Remaining run budget: samples (each arm's sample counts once) and/or dollars."""

    samples: int | None = None
    dollars: float | None = None

    def __post_init__(self) -> None:
        if self.samples is not None and (
            isinstance(self.samples, bool) or not isinstance(self.samples, int) or self.samples < 0
        ):
            raise PlanError(f"budget samples must be a non-negative integer or None, got {self.samples!r}")
        if self.dollars is not None and (
            not isinstance(self.dollars, (int, float)) or not math.isfinite(self.dollars) or self.dollars < 0
        ):
            raise PlanError(f"budget dollars must be a non-negative number or None, got {self.dollars!r}")


@dataclass(frozen=True)
class WindowPlan:
    """Run positions [start, stop) of ``task``'s seeded sample order on every arm in ``arms``."""

    task: str
    start: int
    stop: int
    arms: tuple[str, ...] = ARMS
    estimated_cost: float | None = None

    @property
    def size(self) -> int:
        return self.stop - self.start

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "start": self.start,
            "stop": self.stop,
            "arms": list(self.arms),
            "estimated_cost": None if self.estimated_cost is None else round(self.estimated_cost, 6),
        }


def plan_next_windows(
    states: Mapping[str, TaskPlanState],
    *,
    params: StatsParams,
    budget_remaining: Budget | None = None,
    affinity_order: Sequence[str] | None = None,
) -> list[WindowPlan]:
    """The next window for every undecided task, both arms, within dataset, cap and budget.

    Tasks are served in ``affinity_order`` (e.g. tasks sharing a warm sandbox first), then by
    task id. A task's window is ``batch_size`` positions (enough to reach ``min_pairs`` on its
    first window), shortened at the dataset end, the cap, or the budget. A dollar budget cannot
    bound a task whose cost is unknown: such windows are planned with ``estimated_cost=None``.
    """
    if not isinstance(params, StatsParams):
        raise PlanError(f"params must be StatsParams, got {type(params).__name__}")
    for task, state in states.items():
        if not isinstance(state, TaskPlanState):
            raise PlanError(f"state for task {task!r} must be a TaskPlanState, got {type(state).__name__}")
    first = [t for t in dict.fromkeys(affinity_order or ()) if t in states]
    order = first + sorted(t for t in states if t not in set(first))
    samples_left = None if budget_remaining is None else budget_remaining.samples
    dollars_left = None if budget_remaining is None else budget_remaining.dollars
    arms = len(ARMS)
    plans: list[WindowPlan] = []
    for task in order:
        state = states[task]
        if state.label != "continue":
            continue
        limit = min(state.n_samples, params.cap)
        size = min(max(params.batch_size, params.min_pairs - state.next_start), limit - state.next_start)
        if samples_left is not None:
            size = min(size, samples_left // arms)
        cps = state.cost_per_sample if state.cost_per_sample else None
        if dollars_left is not None and cps is not None:
            size = min(size, int(math.floor(dollars_left / (arms * cps) + 1e-9)))
        if size <= 0:
            continue
        cost = None if cps is None else size * arms * cps
        if samples_left is not None:
            samples_left -= size * arms
        if dollars_left is not None and cost is not None:
            dollars_left -= cost
        plans.append(WindowPlan(task=task, start=state.next_start, stop=state.next_start + size, estimated_cost=cost))
    return plans
