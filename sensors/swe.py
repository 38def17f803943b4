"""SWE-style runs through the daemon's run queue, and the gold-patch cadence.

``POST /v1/runs`` records a run in the lake and leaves a request beside it
(``swe/run-requests/<run id>.json``, naming which launch of the run it asks for) and returns at
once. ``swe_run_sensor`` turns each request into a ``swe_run_job`` run (partition = run id, tag
``evalrunner/swe-run``, run key = run id, plus ``:launch-N`` for the N-th relaunch after a
failed or cancelled run); the run coordinator queues it and the run launcher starts it in a
process of its own (a run worker locally, a Kubernetes Job in deploy/), never in the process
serving the API. Dagster launches a run key once, so a request the sensor sees twice, or two
API servers writing the same request, make one run. Once the run exists the request is removed.

Every registered task set's gold patches run again each day (new flakes show up without anyone
asking); registration runs the same check once at once.
"""

import dagster as dg

from evalrunner_assets.jobs import SWE_RUN_TAG, swe_gold_job, swe_run_job, swe_run_key, swe_run_request
from evalrunner_assets.partitions import (
    SWE_RUNS_KEPT,
    add_partitions,
    swe_runs_partitions,
    swe_task_sets_partitions,
    trim_swe_runs,
)
from evalrunner_assets.swe import SweStore
from resources import LakeResource

# The tag Dagster gives a run launched for a run key.
RUN_KEY_TAG = "dagster/run_key"
# A SWE run in these states still needs its swe_runs key.
UNFINISHED_RUN_STATUSES = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]


def swe_runs_in_flight(instance: dg.DagsterInstance) -> set[str]:
    """Run ids with a ``swe_run_job`` run queued or under way (one query)."""
    runs = instance.get_runs(filters=dg.RunsFilter(job_name=swe_run_job.name, statuses=UNFINISHED_RUN_STATUSES))
    return {r.tags[SWE_RUN_TAG] for r in runs if SWE_RUN_TAG in r.tags}


def launched(instance: dg.DagsterInstance, run_id: str, launch: int) -> bool:
    """Whether this launch of the run has its Dagster run already."""
    tags = {SWE_RUN_TAG: run_id, RUN_KEY_TAG: swe_run_key(run_id, launch)}
    return instance.get_runs_count(dg.RunsFilter(tags=tags)) > 0


def queued_run_requests(
    instance: dg.DagsterInstance, store: SweStore, keep: int = SWE_RUNS_KEPT
) -> list[dg.RunRequest]:
    """The runs the lake's waiting requests ask for, their ``swe_runs`` keys added (the oldest
    keys trimmed to ``keep``, never one of a run waiting, queued or running). A request whose
    run exists already is removed instead."""
    waiting = []
    for request in store.queued_runs():
        if launched(instance, request["id"], request["launch"]):
            store.dequeue_run(request["id"])
        else:
            waiting.append(request)
    if not waiting:
        return []
    ids = [r["id"] for r in waiting]
    trim_swe_runs(instance, ids, keep, frozenset(swe_runs_in_flight(instance)) | frozenset(ids))
    add_partitions(instance, swe_runs_partitions.name or "swe_runs", ids)
    return [swe_run_request(r["id"], r["launch"]) for r in waiting]


@dg.sensor(jobs=[swe_run_job], minimum_interval_seconds=5, default_status=dg.DefaultSensorStatus.RUNNING)
def swe_run_sensor(context: dg.SensorEvaluationContext, lake: LakeResource) -> dg.SensorResult:
    """Requests the Dagster run of every SWE run submitted through the API and not launched yet."""
    requests = queued_run_requests(context.instance, SweStore(lake.open()))
    if requests:
        context.log.info(f"requesting {len(requests)} SWE run(s): {', '.join(r.run_key or '' for r in requests)}")
    return dg.SensorResult(run_requests=requests)


@dg.schedule(job=swe_gold_job, cron_schedule="0 3 * * *", default_status=dg.DefaultScheduleStatus.RUNNING)
def swe_gold_schedule(context: dg.ScheduleEvaluationContext):
    """One gold-check run per registered task set, keyed by task set and day."""
    day = context.scheduled_execution_time.strftime("%Y-%m-%d")
    names = context.instance.get_dynamic_partitions(swe_task_sets_partitions.name or "swe_task_sets")
    for name in names:
        yield dg.RunRequest(run_key=f"swe-gold:{name}:{day}", partition_key=name)
