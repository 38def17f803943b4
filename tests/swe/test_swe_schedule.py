"""The gold-patch cadence: the daily schedule asks for one gold check per registered task set."""

from datetime import UTC, datetime

import dagster as dg

from evalrunner_assets.definitions import defs
from evalrunner_assets.partitions import add_partitions
from sensors.swe import swe_gold_schedule


def test_gold_schedule_requests_one_run_per_task_set_per_day():
    with dg.instance_for_test() as instance:
        add_partitions(instance, "swe_task_sets", ["tinystats-bugs", "other-set"])
        when = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
        ctx = dg.build_schedule_context(
            instance=instance, scheduled_execution_time=when, repository_def=defs.get_repository_def()
        )
        requests = swe_gold_schedule.evaluate_tick(ctx).run_requests or []
    assert sorted((r.partition_key, r.run_key) for r in requests) == [
        ("other-set", "swe-gold:other-set:2026-12-01"),
        ("tinystats-bugs", "swe-gold:tinystats-bugs:2026-12-01"),
    ]
