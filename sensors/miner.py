"""``miner_sensor``: mines every REGRESSED comparison, so its PR comment says why.

It watches the ``comparison`` asset's materializations (a Dagster run's and the runless ones
``evalrunner compare`` records) and requests ``miner_findings`` for the PR head of each one whose
verdict is REGRESSED (and whose partition is not retired yet). The run key is the head's partition with the verdict's samples, so a
comparison that sampled more (``/eval more``) and is still REGRESSED is mined again, and a
daemon restart never mines the same state twice.
"""

from __future__ import annotations

from collections.abc import Mapping

import dagster as dg

from evalrunner_assets.jobs import miner_findings_job
from evalrunner_assets.partitions import COMPARISONS

MINER_INTERVAL_S = 15


def _value(metadata: Mapping[str, object], name: str) -> object:
    entry = metadata.get(name)
    return getattr(entry, "value", entry)


@dg.asset_sensor(
    asset_key=dg.AssetKey("comparison"),
    job=miner_findings_job,
    minimum_interval_seconds=MINER_INTERVAL_S,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Mines each REGRESSED comparison (miner_findings for its PR head), so its PR comment says "
    "why it regressed: the failure pattern and how many failing samples show it.",
)
def miner_sensor(context: dg.SensorEvaluationContext, asset_event: dg.EventLogEntry) -> dg.RunRequest | dg.SkipReason:
    materialization = asset_event.asset_materialization
    if materialization is None or materialization.partition is None:
        return dg.SkipReason("a comparison materialization without a partition")
    metadata = dict(materialization.metadata)
    verdict = _value(metadata, "verdict")
    if verdict != "REGRESSED":
        return dg.SkipReason(f"{materialization.partition}: {verdict}, nothing to mine")
    if not context.instance.has_dynamic_partition(COMPARISONS, materialization.partition):
        return dg.SkipReason(f"{materialization.partition}: retired before it could be mined")
    samples = _value(metadata, "samples_run")
    return dg.RunRequest(run_key=f"{materialization.partition}:{samples}", partition_key=materialization.partition)
