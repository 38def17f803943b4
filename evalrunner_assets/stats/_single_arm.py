"""One arm on its own: a task only the PR's head has (a new eval), measured, never paired.

A new eval has no baseline, so there is nothing to compare and no label; what a reviewer wants
to know is how the agent does on it and whether it runs at all. The score is each input's mean
over its epochs (the pairing rule's arm half, ``sql/input_scores_of.sql``: an errored epoch
scores 0), and the interval is the anytime-valid confidence sequence of that mean
(:func:`mean_sequence_interval`) intersected over the window ends, so it stays valid at every
look the comparison takes. An arm that raised on more than ``error_cap`` of its inputs (once
``error_cap_inputs`` ran, or all there will be) is broken: the PR adds an eval that does not run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from evalrunner_assets.stats._mean import mean_sequence_interval
from evalrunner_assets.stats._pairing import Rows, arm_input_means, pair_task
from evalrunner_assets.stats._params import StatsParams


@dataclass(frozen=True)
class ArmMeasurement:
    """One arm's mean score over its inputs, its interval and what its code raised."""

    inputs: int  # inputs scored (the interval's n)
    mean: float | None
    interval: tuple[float, float] | None
    level: float
    errored: int  # inputs with an errored epoch
    inputs_run: int  # inputs seen, scored or not (the errored share's denominator)
    unscored: int  # inputs left out: no score in [0, 1]
    error_cause: str | None  # "16/16 samples raised RuntimeError('boom') in solver 'x'"
    broken: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "inputs": self.inputs,
            "mean": None if self.mean is None else round(self.mean, 6),
            "interval": None if self.interval is None else [round(self.interval[0], 6), round(self.interval[1], 6)],
            "level": self.level,
            "errored": self.errored,
            "inputs_run": self.inputs_run,
            "unscored": self.unscored,
            "error_cause": self.error_cause,
            "broken": self.broken,
        }


def measure_arm(
    rows: Rows,
    order: Sequence[str],
    params: StatsParams,
    *,
    looks: Sequence[int] = (),
    at_limit: bool = False,
) -> ArmMeasurement:
    """Measure one arm's rows (``order``: the task's seeded sample order; ``looks``: the window
    ends seen so far, as positions in that order)."""
    if not isinstance(rows, pa.Table):
        rows = list(rows)  # read twice below
    means, _ = arm_input_means(rows)
    position = {sid: i for i, sid in enumerate(order)}
    ids = sorted((sid for sid in means if sid in position), key=position.__getitem__)
    values = [means[sid] for sid in ids]
    # The same rule's per-arm counts and causes: paired against nothing, every input is the head's.
    pairing = pair_task(rows, [], list(order))
    inputs_run = pairing.inputs_head
    scored_looks = [sum(1 for sid in ids if position[sid] < end) for end in looks]
    level = 1.0 - params.alpha
    interval = (
        mean_sequence_interval(values, params.alpha, looks=[n for n in scored_looks if n] or None) if values else None
    )
    enough = inputs_run >= max(params.min_pairs, params.error_cap_inputs) or at_limit
    broken = bool(inputs_run) and enough and pairing.error_share("head") > params.error_cap
    return ArmMeasurement(
        inputs=len(values),
        mean=sum(values) / len(values) if values else None,
        interval=interval,
        level=level,
        errored=pairing.errored_head,
        inputs_run=inputs_run,
        unscored=pairing.unscored_head,
        error_cause=pairing.error_cause("head"),
        broken=broken,
    )
