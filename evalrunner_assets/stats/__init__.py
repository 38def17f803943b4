"""Paired sequential statistics: pairing, anytime-valid decisions, run verdicts, batch planning.

Pure Python (numpy/scipy); the Dagster assets call these functions. See README.md for the
method, its parameters and the simulation evidence from ``python -m bench stats``.
"""

from evalrunner_assets.stats._decide import (
    LABELS,
    Label,
    TaskDecision,
    confidence_path,
    decide_task,
    describe_more_samples,
    estimated_cost,
)
from evalrunner_assets.stats._errors import PairingError, ParamsError, PlanError, StatsError
from evalrunner_assets.stats._mean import mean_sequence_interval, wilson_interval
from evalrunner_assets.stats._pairing import Pairing, arm_input_means, pair_task, pair_tasks, seeded_order
from evalrunner_assets.stats._params import StatsParams
from evalrunner_assets.stats._planner import ARMS, Budget, TaskPlanState, WindowPlan, plan_next_windows
from evalrunner_assets.stats._schedule import WINDOW_GROWTH, WINDOW_MIN, window_schedule, window_size, window_span
from evalrunner_assets.stats._single_arm import ArmMeasurement, measure_arm
from evalrunner_assets.stats._verdict import BLOCKING_VERDICTS, RunVerdict, Verdict, run_verdict

__all__ = [
    "ARMS",
    "BLOCKING_VERDICTS",
    "WINDOW_GROWTH",
    "WINDOW_MIN",
    "LABELS",
    "ArmMeasurement",
    "Budget",
    "Label",
    "Pairing",
    "PairingError",
    "ParamsError",
    "PlanError",
    "RunVerdict",
    "StatsError",
    "StatsParams",
    "TaskDecision",
    "TaskPlanState",
    "Verdict",
    "WindowPlan",
    "arm_input_means",
    "confidence_path",
    "decide_task",
    "describe_more_samples",
    "estimated_cost",
    "mean_sequence_interval",
    "measure_arm",
    "pair_task",
    "pair_tasks",
    "plan_next_windows",
    "run_verdict",
    "seeded_order",
    "wilson_interval",
    "window_schedule",
    "window_size",
    "window_span",
]
