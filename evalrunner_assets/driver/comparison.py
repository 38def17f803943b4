"""``evalrunner compare``'s comparison: the engine, recorded in the local Dagster instance.

The comparison runs in :mod:`evalrunner_assets.pipeline.engine` (plain Python, the same
decisions the sensors make); what it did is recorded as runless asset events
(:mod:`evalrunner_assets.assets.recording`) in the instance at ``$DAGSTER_HOME`` (default
``<EVALRUNNER_HOME>/dagster``), so ``evalrunner serve`` afterwards shows the partitions,
materializations, checks and lineage.

Why the sandbox work does not run inside concurrent ``dg.materialize`` calls: measured with 6
threads materializing partitions of one asset on a SQLite instance, the runs themselves succeed,
but each run's compute-log capture redirects the *process-wide* stdout/stderr file descriptors
and restores them out of order, leaving this process's fd 1 and 2 pointing into some run's
compute log afterwards. Runless events capture nothing, and cost a few milliseconds each
instead of a run's ~0.4 s.
"""

from collections.abc import Mapping
from typing import Any

import dagster as dg

from evalrunner_assets.assets.recording import DagsterRecorder, local_instance
from evalrunner_assets.documents.comparison import ComparisonDocument
from evalrunner_assets.pipeline import engine
from evalrunner_assets.pipeline.capabilities import PROGRESS_EVERY_S, EngineOptions, EngineResources
from evalrunner_assets.pipeline.engine import (
    ComparisonFailed,
    ComparisonStopped,
    gateway_summary,
)
from evalrunner_assets.pipeline.spec import ComparisonRequest
from resources import default_resources

__all__ = [
    "PROGRESS_EVERY_S",
    "ComparisonFailed",
    "ComparisonStopped",
    "EngineOptions",
    "EngineResources",
    "default_resources",
    "gateway_summary",
    "local_instance",
    "run_comparison",
]


def run_comparison(
    request: ComparisonRequest,
    *,
    instance: dg.DagsterInstance | None = None,
    resources: EngineResources | Mapping[str, object] | None = None,
    options: EngineOptions = EngineOptions(),
) -> ComparisonDocument:
    """Run ``request`` to its final verdict, recorded in ``instance`` (default: the local
    instance); returns the comparison document. ``resources``: the engine's, or the Dagster
    resources by name (default: :func:`resources.default_resources`); ``options``: how it runs
    (:class:`~evalrunner_assets.pipeline.capabilities.EngineOptions`); errors as for
    :func:`evalrunner_assets.pipeline.engine.run_comparison`."""
    if not isinstance(resources, EngineResources):
        resources = EngineResources.from_mapping(resources or default_resources())
    recorder = DagsterRecorder(resources.lake.open(), instance)
    return engine.run_comparison(request, resources=resources, recorder=recorder, options=options)


def _sweep(the_lake: Any, repo: str) -> list[str]:
    """Temporary files that dead writers left anywhere in a local lake (see
    :func:`evalrunner_assets.pipeline.engine.sweep_lake`)."""
    return engine.sweep_lake(the_lake)
