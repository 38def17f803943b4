"""SWE-style runs through the daemon's run queue, and the gold-patch cadence.

``POST /v1/runs`` records a run in the lake and leaves a request beside it
(``swe/run-requests/<run id>.json``, naming which launch of the run it asks for) and returns at
once. ``swe_run_sensor`` turns each request into a ``swe_run_job`` run (partition = run id, tag
``evalrunner/swe-run``, run key = run id, plus ``:launch-N`` for the N-th relaunch after a
failed or cancelled run); the run coordinator queues it and the run launcher starts it in a
process of its own (a run worker locally, a Kubernetes Job in deploy/), never in the process
serving the API. Dagster launches a run key once, so a request the sensor sees twice, or two
API servers writing the same request, make one run. Once the run exists the request is removed.

A run whose run worker was lost (killed, out of memory: the run-worker reaper of
``sensors/run_workers.py`` failed it and tagged it ``evalrunner/worker-lost``) is relaunched here
as a resubmission would (its next ``:launch-N``; attempts already landed are kept), at most
``MAX_WORKER_LOSS_RELAUNCHES`` times in all, so a run that kills its worker every time stops.

Every registered task set's gold patches run again each day (new flakes show up without anyone
asking); registration runs the same check once at once.
"""

from collections.abc import Iterator, Sequence

import dagster as dg

from evalrunner_assets.jobs import SWE_RUN_TAG, swe_gold_job, swe_run_job, swe_run_key, swe_run_request
from evalrunner_assets.partitions import (
    SWE_RUNS,
    SWE_RUNS_KEPT,
    SWE_TASK_SETS,
    add_partitions,
    trim_swe_runs,
)
from evalrunner_assets.pipeline.run_workers import WORKER_LOST_TAG
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

# Relaunches of one SWE run after its run worker was lost, in all.
MAX_WORKER_LOSS_RELAUNCHES = 2
# Runs failed for a lost worker that a tick looks at (newest first; older ones were handled).
LOST_WORKER_RUNS_READ = 50


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
    add_partitions(instance, SWE_RUNS, ids)
    return [swe_run_request(r["id"], r["launch"]) for r in waiting]


def worker_loss_relaunch(instance: dg.DagsterInstance, run_id: str, this_run_counts: bool = False) -> tuple[bool, str]:
    """(whether SWE run ``run_id`` is relaunched after losing its run worker, what happens, in
    words). ``this_run_counts``: its newest Dagster run is about to be tagged lost (the reaper
    asks before tagging)."""
    return _relaunch_decision(
        instance.get_runs(filters=dg.RunsFilter(tags={SWE_RUN_TAG: run_id})), run_id, this_run_counts
    )


def _relaunch_decision(runs: Sequence[dg.DagsterRun], run_id: str, this_run_counts: bool = False) -> tuple[bool, str]:
    """:func:`worker_loss_relaunch` given every Dagster run of the SWE run."""
    lost = sum(1 for r in runs if r.tags.get(WORKER_LOST_TAG) == "true") + (1 if this_run_counts else 0)
    if lost <= MAX_WORKER_LOSS_RELAUNCHES:
        return True, (
            f"swe_run_sensor relaunches SWE run {run_id} as {swe_run_key(run_id, len(runs))} "
            f"(lost worker {lost} of at most {MAX_WORKER_LOSS_RELAUNCHES} relaunched; landed attempts are kept)"
        )
    return False, (
        f"SWE run {run_id} lost its run worker {lost} times and is not relaunched again; "
        "submit it again (POST /v1/runs) to retry"
    )


def relaunch_lost_workers(instance: dg.DagsterInstance, store: SweStore) -> list[str]:
    """Queue the next launch of every SWE run whose newest Dagster run failed for a lost run
    worker (within ``MAX_WORKER_LOSS_RELAUNCHES``); returns their run ids."""
    lost = instance.get_runs(
        filters=dg.RunsFilter(
            job_name=swe_run_job.name, statuses=[dg.DagsterRunStatus.FAILURE], tags={WORKER_LOST_TAG: "true"}
        ),
        limit=LOST_WORKER_RUNS_READ,
    )
    queued = []
    for run in lost:
        run_id = run.tags.get(SWE_RUN_TAG)
        if run_id is None or store.queued_run(run_id) is not None:
            continue
        runs = instance.get_runs(filters=dg.RunsFilter(tags={SWE_RUN_TAG: run_id}))  # newest first
        if not runs or runs[0].run_id != run.run_id:
            continue  # relaunched already (or submitted again)
        if _relaunch_decision(runs, run_id)[0]:
            # Launch N follows N ended runs, as a resubmission counts them (the same run key).
            store.queue_run(run_id, launch=len(runs))
            queued.append(run_id)
    return queued


@dg.sensor(
    jobs=[swe_run_job],
    minimum_interval_seconds=5,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Launches a swe_run_job run for each SWE run submitted through the API (POST /v1/runs), and "
    "relaunches runs whose run worker was lost.",
)
def swe_run_sensor(context: dg.SensorEvaluationContext, lake: LakeResource) -> dg.SensorResult:
    """Requests the Dagster run of every SWE run submitted through the API and not launched yet,
    and relaunches runs whose run worker was lost."""
    store = SweStore(lake.open())
    relaunched = relaunch_lost_workers(context.instance, store)
    if relaunched:
        context.log.info(f"relaunching {len(relaunched)} SWE run(s) whose run worker was lost: {', '.join(relaunched)}")
    requests = queued_run_requests(context.instance, store)
    if requests:
        context.log.info(f"requesting {len(requests)} SWE run(s): {', '.join(r.run_key or '' for r in requests)}")
    return dg.SensorResult(run_requests=requests)


@dg.schedule(
    job=swe_gold_job,
    cron_schedule="0 3 * * *",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Daily at 03:00: one gold-check run per registered SWE task set (gold patches must pass).",
)
def swe_gold_schedule(context: dg.ScheduleEvaluationContext) -> Iterator[dg.RunRequest]:
    """One gold-check run per registered task set, keyed by task set and day."""
    day = context.scheduled_execution_time.strftime("%Y-%m-%d")
    names = context.instance.get_dynamic_partitions(SWE_TASK_SETS)
    for name in names:
        yield dg.RunRequest(run_key=f"swe-gold:{name}:{day}", partition_key=name)
