"""The trajectory miner: failure patterns with evidence counts, and notes on the trajectories.

Plain Python over the lake (no Dagster): ``features`` turns trajectories into boolean features,
``miner`` contrasts failing against passing ones (Fisher exact, Benjamini–Hochberg), and
``lake_findings`` reads a task's or a comparison's trajectories and writes what was found.
"""

from evalrunner_assets.mining.features import Feature, Trajectory, feature_matrix
from evalrunner_assets.mining.lake_findings import (
    Mined,
    TaskMining,
    mine_comparison,
    mine_document,
    mine_task,
    trajectories,
)
from evalrunner_assets.mining.miner import Contrast, Finding, NothingToContrast, contrast

__all__ = [
    "Contrast",
    "Feature",
    "Finding",
    "Mined",
    "NothingToContrast",
    "TaskMining",
    "Trajectory",
    "contrast",
    "feature_matrix",
    "mine_comparison",
    "mine_document",
    "mine_task",
    "trajectories",
]
