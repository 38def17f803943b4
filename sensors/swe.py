"""The gold-patch cadence: every registered task set's gold patches run again each day (new
flakes show up without anyone asking). Registration runs the same check once at once."""

import dagster as dg

from evalrunner_assets.jobs import swe_gold_job
from evalrunner_assets.partitions import swe_task_sets_partitions


@dg.schedule(job=swe_gold_job, cron_schedule="0 3 * * *", default_status=dg.DefaultScheduleStatus.RUNNING)
def swe_gold_schedule(context: dg.ScheduleEvaluationContext):
    """One gold-check run per registered task set, keyed by task set and day."""
    day = context.scheduled_execution_time.strftime("%Y-%m-%d")
    names = context.instance.get_dynamic_partitions(swe_task_sets_partitions.name or "swe_task_sets")
    for name in names:
        yield dg.RunRequest(run_key=f"swe-gold:{name}:{day}", partition_key=name)
