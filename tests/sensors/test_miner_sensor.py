"""``miner_sensor`` on a real Dagster instance: a REGRESSED comparison's materialization asks for
its ``miner_findings``; any other verdict, or a retired partition, does not."""

from __future__ import annotations

import dagster as dg

from evalrunner_assets.definitions import defs
from evalrunner_assets.partitions import COMPARISONS
from sensors.miner import miner_sensor

KEY = "example/support-agent#103@" + "a" * 40


def tick(instance: dg.DagsterInstance, cursor: str | None = None) -> dg.SensorExecutionData:
    context = dg.build_sensor_context(instance=instance, definitions=defs, cursor=cursor)
    with dg.partition_loading_context(dynamic_partitions_store=instance):
        return miner_sensor.evaluate_tick(context)


def comparison_event(instance: dg.DagsterInstance, verdict: str, samples: int, key: str = KEY) -> None:
    instance.report_runless_asset_event(
        dg.AssetMaterialization("comparison", partition=key, metadata={"verdict": verdict, "samples_run": samples})
    )


def test_a_regressed_comparison_is_mined_once_per_state():
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(COMPARISONS, [KEY])
        comparison_event(instance, "REGRESSED", 96)
        first = tick(instance)
        (request,) = first.run_requests or []
        assert request.partition_key == KEY and request.run_key == f"{KEY}:96"
        assert request.job_name in (None, "miner_findings_job")
        # Nothing new: nothing asked; more samples and still REGRESSED: mined again.
        assert not tick(instance, first.cursor).run_requests
        comparison_event(instance, "REGRESSED", 160)
        (again,) = tick(instance, first.cursor).run_requests or []
        assert again.run_key == f"{KEY}:160"


def test_other_verdicts_and_retired_partitions_are_skipped():
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(COMPARISONS, [KEY])
        comparison_event(instance, "IMPROVED", 64)
        skipped = tick(instance)
        assert not skipped.run_requests and "IMPROVED" in (skipped.skip_message or "")
        gone = "example/support-agent#104@" + "b" * 40
        comparison_event(instance, "REGRESSED", 64, key=gone)
        retired = tick(instance, skipped.cursor)
        assert not retired.run_requests and "retired" in (retired.skip_message or "")
