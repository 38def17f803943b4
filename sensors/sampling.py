"""The sampling sensor: keeps every open comparison moving until it is decided.

A comparison runs as one Dagster run of ``comparison_job``: its ``comparison`` asset drives the
comparison engine (the one ``evalrunner compare`` drives), which learns the commits, runs every
ready window of both arms on one pool of warm sandboxes, decides and reports. The PR sensor
requests the first run of a head. Each tick here lists the open comparisons (the lake's index,
``pipeline.open_index``: not every PR ever), skips those with a run queued or under way or
held by another engine's live lease (``pipeline.lease``: an ``evalrunner compare`` on the same
lake), reads each other one's request and state (the lake alone) and asks the same ``next_steps`` the engine
uses: when anything is left — a raised allowance (``/eval more``), a run that died (a daemon
restart, a killed run worker) — it requests one more run. Its run key names the comparison's
state (status, samples run, allowance), so the request is idempotent and survives a daemon
restart; a run that ended without moving the state is tried again at most ``MAX_ATTEMPTS`` times
in all (an outage is not retried forever). Between ticks in one code-server
process, each open comparison keeps an ``AssessCache`` (immutable lake facts only: a restart
merely starts it cold), so a tick costs the tasks whose batches changed.

A decided comparison whose report has been materialized is retired once it is older than the
retention (``EVALRUNNER_RETAIN_DECIDED_SECONDS``, default an hour): its Dagster partitions are
deleted (``partitions.retire_comparison``) and it leaves the index, so partition sets hold the
open work only. Its materializations stay in the event log, its files in the lake.

On Kubernetes the tick also runs the retention sweep of repository environment claims, at most
every ``ENV_SWEEP_INTERVAL_S`` (``KubernetesBackend.prune_environments``: claims no pod has
mounted for ``EVALRUNNER_SANDBOX_ENV_RETAIN_DAYS``); a failed sweep is logged, never fatal.
"""

import os
import time

import dagster as dg

from evalrunner_assets.assets import evals as eval_assets
from evalrunner_assets.documents.comparison import ComparisonDocument
from evalrunner_assets.execution.sandbox import SandboxBackend
from evalrunner_assets.jobs import REPORT_LOCK_TAG, comparison_job, comparison_run_request
from evalrunner_assets.partitions import COMMITS, COMPARISONS, add_partitions, comparison_commit_keys, retire_comparison
from evalrunner_assets.pipeline import assess as assess_mod
from evalrunner_assets.pipeline import open_index
from evalrunner_assets.pipeline.keys import parse_comparison_key
from evalrunner_assets.pipeline.lease import live_holder
from evalrunner_assets.pipeline.loop import next_steps
from evalrunner_assets.pipeline.spec import ComparisonRequest, ComparisonRequestError, load_request
from lake import Lake
from resources import LakeResource, SandboxResource

RETAIN_DECIDED_ENV = "EVALRUNNER_RETAIN_DECIDED_SECONDS"
DEFAULT_RETAIN_DECIDED_S = 3600.0
# Retiring costs a few instance writes per comparison: a backlog (e.g. the first tick on an
# instance made before the index existed) is worked off over several ticks.
RETIRE_PER_TICK = 200
# The sensor's cursor once the comparisons made before the open index existed have been indexed.
INDEXED_CURSOR = "open-index-v1"

_ASSESS_CACHES: dict[str, assess_mod.AssessCache] = {}

# Environment claims are kept for days; listing them (and, when one is old, the namespace's
# pods) every 10 minutes is plenty.
ENV_SWEEP_INTERVAL_S = 600.0
_last_env_sweep: dict[str, float] = {}


# A run in these states still owns its comparison: no other run is requested for it meanwhile.
UNFINISHED_RUN_STATUSES = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]


# Runs of one comparison from one state that may end without moving it (failed or cancelled).
MAX_ATTEMPTS = 3
# The state a run of comparison_job started from (the run key of its first attempt).
FROM_STATE_TAG = "evalrunner/from-state"
ENDED_UNFINISHED = [dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]


def state_key(assessment: assess_mod.Assessment) -> str:
    """Where a comparison stands, as the run key of the next run's first attempt."""
    result = assessment.result
    learnt = "learning" if assessment.needs_facts else result.status
    cap = result.params.cap if result.params is not None else None
    return f"evaluate:{assessment.request.key}:{learnt}:{result.samples_run}:{cap}"


def next_run_request(instance: dg.DagsterInstance, assessment: assess_mod.Assessment) -> dg.RunRequest | None:
    """The next run of a comparison from its state, or None once ``MAX_ATTEMPTS`` runs from that
    state failed or were cancelled."""
    state, key = state_key(assessment), assessment.request.key
    ended = instance.get_runs_count(
        dg.RunsFilter(
            job_name=comparison_job.name,
            tags={REPORT_LOCK_TAG: key, FROM_STATE_TAG: state},
            statuses=ENDED_UNFINISHED,
        )
    )
    if ended >= MAX_ATTEMPTS:
        return None
    return comparison_run_request(
        key, state if ended == 0 else f"{state}:attempt-{ended + 1}", tags={FROM_STATE_TAG: state}
    )


def comparisons_in_flight(instance: dg.DagsterInstance) -> set[str]:
    """Comparisons with a ``comparison_job`` run queued or under way (one query per tick)."""
    runs = instance.get_runs(filters=dg.RunsFilter(job_name=comparison_job.name, statuses=UNFINISHED_RUN_STATUSES))
    return {r.tags[REPORT_LOCK_TAG] for r in runs if REPORT_LOCK_TAG in r.tags}


def retain_decided_s() -> float:
    """How long a decided comparison keeps its partitions after its report (seconds)."""
    text = os.environ.get(RETAIN_DECIDED_ENV, "")
    try:
        return max(0.0, float(text)) if text else DEFAULT_RETAIN_DECIDED_S
    except ValueError:
        return DEFAULT_RETAIN_DECIDED_S


def is_decided(request: ComparisonRequest, saved: ComparisonDocument | None) -> bool:
    """The comparison reached its end for the allowance in force (``/eval more`` reopens it):
    every task decided or capped, or the model budget spent (another run would spend it again)."""
    return (
        saved is not None
        and saved.status in ("complete", "budget_spent")
        and saved.params is not None
        and saved.params.cap == request.cap + request.extra_samples
    )


def report_materialized_at(instance: dg.DagsterInstance, key: str) -> float | None:
    """When ``pr_report`` was last materialized for ``key``, if after the last ``comparison``
    materialization (the report shows the final document); else None."""
    reports = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=eval_assets.pr_report.key, asset_partitions=[key]), limit=1
    ).records
    if not reports:
        return None
    compared = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=eval_assets.COMPARISON, asset_partitions=[key]), limit=1
    ).records
    if compared and compared[0].storage_id > reports[0].storage_id:
        return None
    return reports[0].timestamp


def index_partitioned_comparisons(instance: dg.DagsterInstance, the_lake: Lake) -> int:
    """List every ``comparisons`` partition in the lake's open index (those made before the
    index existed); decided ones are then retired like any other. Returns how many were added."""
    added = 0
    for key in instance.get_dynamic_partitions(COMPARISONS):
        if not open_index.is_open(the_lake, key):
            open_index.mark_open_key(the_lake, key)
            added += 1
    return added


def retire_reported(
    context: dg.SensorEvaluationContext,
    the_lake: Lake,
    decided: list[ComparisonRequest],
    open_requests: list[ComparisonRequest],
) -> list[str]:
    """Retire the decided comparisons whose report is older than the retention; returns their keys."""
    instance = context.instance
    retain, now = retain_decided_s(), time.time()
    due: list[ComparisonRequest] = []
    for request in decided:
        if len(due) >= RETIRE_PER_TICK:
            break
        reported = report_materialized_at(instance, request.key)
        if reported is not None and now - reported >= retain:
            due.append(request)
    keys = {r.key for r in due}
    keep = {ck for r in open_requests + decided if r.key not in keys for ck in comparison_commit_keys(r)}
    for request in due:
        retire_comparison(instance, the_lake, request, keep)
        # `/eval more` may have raised the allowance while this tick ran: it then finds the
        # marker gone and writes it again, or is read here and the comparison reopened.
        again = load_request(the_lake, request.repo, request.pr, request.head_sha)
        if not is_decided(again, assess_mod.load_result(the_lake, request.repo, request.pr, request.head_sha)):
            open_index.mark_open(the_lake, again.repo, again.pr, again.head_sha)
            add_partitions(instance, COMMITS, comparison_commit_keys(again))
            add_partitions(instance, COMPARISONS, [again.key])
            keys.discard(request.key)
    if keys:
        context.log.info(f"retired {len(keys)} decided comparison(s): {', '.join(sorted(keys)[:20])}")
    return sorted(keys)


def missing_partitions(
    instance: dg.DagsterInstance, open_requests: list[ComparisonRequest]
) -> list[dg.AddDynamicPartitionsRequest]:
    """Partitions an open comparison needs but the instance lacks (a commit retired by another
    comparison while this one was being opened): added before this tick's runs are launched."""
    wanted = {
        COMMITS: {ck for r in open_requests for ck in comparison_commit_keys(r)},
        COMPARISONS: {r.key for r in open_requests},
    }
    out = []
    for name, keys in wanted.items():
        missing = sorted(keys - set(instance.get_dynamic_partitions(name))) if keys else []
        if missing:
            out.append(dg.AddDynamicPartitionsRequest(name, missing))
    return out


def sweep_environments(context: dg.SensorEvaluationContext, backend: SandboxBackend) -> None:
    """Deletes environment claims past their retention (a backend that keeps environments on a
    cluster only), at most every ``ENV_SWEEP_INTERVAL_S`` per namespace."""
    prune = getattr(backend, "prune_environments", None)
    if prune is None:
        return
    key = getattr(getattr(backend, "config", None), "namespace", "")
    if time.monotonic() - _last_env_sweep.get(key, -ENV_SWEEP_INTERVAL_S) < ENV_SWEEP_INTERVAL_S:
        return
    _last_env_sweep[key] = time.monotonic()
    try:
        decisions = prune()
    except Exception as exc:  # the cluster's problem: the comparisons go on
        context.log.warning(f"environment claims: the retention sweep failed: {type(exc).__name__}: {exc}")
        return
    for d in decisions:
        if d.deleted:
            context.log.info(f"environment claims: deleted {d.claim}: {d.reason}")


@dg.sensor(
    jobs=[comparison_job],
    minimum_interval_seconds=15,
    description="The adaptive loop: requests another comparison_job run for an undecided comparison with "
    "work left and no run in flight (after `/eval more`, or a run that died), at most three times from one "
    "state; retires decided and reported comparisons' partitions.",
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def sampling_sensor(
    context: dg.SensorEvaluationContext, lake: LakeResource, sandbox: SandboxResource
) -> dg.SensorResult:
    """Requests a run of each undecided comparison that has none queued or under way and has
    something left to run or record (its windows, both arms, until every task is decided,
    capped or out of budget; then the final comparison and report). Retires decided
    comparisons' partitions once reported."""
    the_lake = lake.open()
    if context.cursor != INDEXED_CURSOR:
        indexed = index_partitioned_comparisons(context.instance, the_lake)
        if indexed:
            context.log.info(f"listed {indexed} comparison partition(s) made before the open index")
    backend = sandbox.backend()
    sweep_environments(context, backend)
    runtime = backend.runtime_digest()
    requests: list[dg.RunRequest] = []
    in_flight = comparisons_in_flight(context.instance)
    open_requests: list[ComparisonRequest] = []
    decided: list[ComparisonRequest] = []
    for key in open_index.open_comparison_keys(the_lake):
        repo, pr, head = parse_comparison_key(key)
        try:
            request = load_request(the_lake, repo, pr, head)
        except ComparisonRequestError as exc:
            context.log.warning(f"skipping {key}: {exc}")
            continue
        saved = assess_mod.load_result(the_lake, repo, pr, head)
        if is_decided(request, saved):
            decided.append(request)
            continue
        open_requests.append(request)
        if key in in_flight:
            continue  # its run is working on it (or queued behind the one that is)
        if live_holder(the_lake, request) is not None:
            continue  # an engine outside this instance's runs (`evalrunner compare`) is on it
        assessment = assess_mod.assess(
            the_lake,
            request,
            backend_name=backend.name,
            runtime_digest=runtime,
            detail=False,
            cache=_ASSESS_CACHES.setdefault(key, assess_mod.AssessCache()),
        )
        if next_steps(assessment, saved):
            run = next_run_request(context.instance, assessment)
            if run is None:
                context.log.warning(f"{key}: {MAX_ATTEMPTS} runs from {state_key(assessment)} ended unfinished")
            else:
                requests.append(run)
    if decided:
        retire_reported(context, the_lake, decided, open_requests)
    for key in set(_ASSESS_CACHES) - {r.key for r in open_requests}:
        del _ASSESS_CACHES[key]  # finished or gone: nothing more to plan
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=missing_partitions(context.instance, open_requests),
        cursor=INDEXED_CURSOR,
    )
