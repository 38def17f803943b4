"""Parameters of the sequential comparison."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from evalrunner_assets.stats._errors import ParamsError


@dataclass(frozen=True)
class StatsParams:
    """Parameters of one run's comparison.

    alpha: family-wise error level of the run. Each of the T tasks gets alpha/T two-sided
        (Bonferroni): alpha/(2T) per direction, 0.9 of it to the group-sequential sign test
        and the rest to the e-process, so a false REGRESSED run verdict has probability
        <= alpha/2 and a false IMPROVED or REGRESSED task label <= alpha/T at any stopping time.
    margin: equivalence margin on the mean paired difference; "unchanged" means the whole
        interval lies inside (-margin, +margin).
    min_pairs: no label before this many pairs.
    cap: per-task pair cap; a task still undecided here is "inconclusive". 256 lets a
        near-deterministic task (all ties) reach "unchanged" at margin 0.05 even with 20 tasks
        in the run (measured in ``bench/stats.py``, see the README), in 23 windows.
    batch_size: pairs per sampling window (both arms run the same window).
    design_cap: the cap fixed before the first look, over which the group-sequential tests
        spend their error (``_groupseq``); None means ``cap``. ``/eval more`` raises ``cap`` but
        not this, so the looks already taken keep their boundaries.
    budget_samples / budget_dollars: optional run budget across tasks and both arms.
    error_cap: candidate-failure cap. Errored samples (raised in the repository's code) score 0;
        when more than this share of an arm's inputs raised, the task stops sampling and is
        labelled by that cause ("regressed" only if the scores already settled it; otherwise
        "inconclusive" with the cause as reason), never improved or unchanged (see the README).
    error_cap_inputs: inputs an arm must have run before its errored share can end the task
        (or fewer at its limit). 16 lets a head that raises on every sample settle "regressed"
        first (8 all-failing pairs are too few at T >= 2 for the e-process to cross).
    """

    alpha: float = 0.05
    margin: float = 0.05
    min_pairs: int = 8
    cap: int = 256
    batch_size: int = 8
    budget_samples: int | None = None
    budget_dollars: float | None = None
    error_cap: float = 0.5
    error_cap_inputs: int = 16
    design_cap: int | None = None

    def __post_init__(self) -> None:
        if (
            isinstance(self.error_cap, bool)
            or not isinstance(self.error_cap, (int, float))
            or not 0.0 <= self.error_cap < 1.0
        ):
            raise ParamsError(f"error_cap must be a share in [0, 1), got {self.error_cap!r}")
        if not (isinstance(self.alpha, (int, float)) and 0.0 < self.alpha < 1.0):
            raise ParamsError(f"alpha must be in (0, 1), got {self.alpha!r}")
        if not (isinstance(self.margin, (int, float)) and 0.0 < self.margin < 1.0):
            raise ParamsError(f"margin must be in (0, 1) on the [-1, 1] difference scale, got {self.margin!r}")
        for name in ("min_pairs", "cap", "batch_size", "error_cap_inputs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ParamsError(f"{name} must be a positive integer, got {value!r}")
        if self.design_cap is not None and (
            isinstance(self.design_cap, bool)
            or not isinstance(self.design_cap, int)
            or not self.min_pairs <= self.design_cap <= self.cap
        ):
            raise ParamsError(
                f"design_cap must be an integer between min_pairs ({self.min_pairs}) and cap ({self.cap}), got {self.design_cap!r}"
            )
        if self.cap < self.min_pairs:
            raise ParamsError(f"cap ({self.cap}) must be at least min_pairs ({self.min_pairs})")
        if self.budget_samples is not None and (
            isinstance(self.budget_samples, bool) or not isinstance(self.budget_samples, int) or self.budget_samples < 0
        ):
            raise ParamsError(f"budget_samples must be a non-negative integer or None, got {self.budget_samples!r}")
        if self.budget_dollars is not None and (
            not isinstance(self.budget_dollars, (int, float))
            or not math.isfinite(self.budget_dollars)
            or self.budget_dollars < 0
        ):
            raise ParamsError(f"budget_dollars must be a non-negative number or None, got {self.budget_dollars!r}")

    def task_alpha(self, n_tasks: int) -> float:
        """Two-sided level of each task's interval: alpha / T."""
        check_n_tasks(n_tasks)
        return self.alpha / n_tasks

    @property
    def horizon_cap(self) -> int:
        """The cap the group-sequential spending is designed for."""
        return self.cap if self.design_cap is None else self.design_cap

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_n_tasks(n_tasks: int) -> int:
    if isinstance(n_tasks, bool) or not isinstance(n_tasks, int) or n_tasks < 1:
        raise ParamsError(f"n_tasks must be a positive integer (the number of tasks in the run), got {n_tasks!r}")
    return n_tasks
