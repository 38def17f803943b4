"""SWE-style task sets: pinned tasks with hidden tests, sandboxed agent attempts, grading, the
cheat policy, gold-patch flake checks and the leaderboard (no Dagster here)."""

from evalrunner_assets.swe.model import RunSpec, SweError, SweTask, TaskSet, TaskSetSpec
from evalrunner_assets.swe.store import SweStore

__all__ = ["RunSpec", "SweError", "SweStore", "SweTask", "TaskSet", "TaskSetSpec"]
