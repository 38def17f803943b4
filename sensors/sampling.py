"""The sampling sensor: drives every open comparison's adaptive loop from the lake's state.

Each tick lists the open comparisons (the lake's index, ``pipeline.open_index``: not every PR
ever), reads each one's request and state (the lake alone), asks the same ``next_steps`` the CLI
uses, and requests those runs. Run keys make it idempotent, and since the lake holds all the
state, it survives a daemon restart. Between ticks in one code-server process, each open
comparison keeps an ``AssessCache`` (immutable lake facts only: a restart merely starts it cold),
so a tick costs the tasks whose batches changed.

A decided comparison whose report has been materialized is retired once it is older than the
retention (``EVALRUNNER_RETAIN_DECIDED_SECONDS``, default an hour): its Dagster partitions are
deleted (``partitions.retire_comparison``) and it leaves the index, so partition sets hold the
open work only. Its materializations stay in the event log, its files in the lake.
"""

import os
import time

import dagster as dg

from evalrunner_assets.assets import evals as eval_assets
from evalrunner_assets.jobs import comparison_job, comparison_run_tags, eval_manifest_job, task_samples_job
from evalrunner_assets.partitions import add_partitions, comparison_commit_keys, retire_comparison
from evalrunner_assets.pipeline import assess as assess_mod
from evalrunner_assets.pipeline import open_index
from evalrunner_assets.pipeline.comparison_document import ComparisonDocument
from evalrunner_assets.pipeline.keys import parse_comparison_key
from evalrunner_assets.pipeline.loop import Step, next_steps
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


def step_run_request(step: Step, comparison: str) -> dg.RunRequest:
    if step.kind == "manifest":
        return dg.RunRequest(run_key=step.run_key, job_name=eval_manifest_job.name, partition_key=step.commit)
    if step.kind == "samples":
        return dg.RunRequest(
            run_key=step.run_key,
            job_name=task_samples_job.name,
            partition_key=dg.MultiPartitionKey({"commit": step.commit, "task": step.task}),
            run_config={"ops": {"task_samples": {"config": {"comparison": comparison, "windows": list(step.windows)}}}},
            tags={"evalrunner/comparison": comparison},
        )
    return dg.RunRequest(
        run_key=step.run_key,
        job_name=comparison_job.name,
        partition_key=comparison,
        tags=comparison_run_tags(comparison),
    )


def retain_decided_s() -> float:
    """How long a decided comparison keeps its partitions after its report (seconds)."""
    text = os.environ.get(RETAIN_DECIDED_ENV, "")
    try:
        return max(0.0, float(text)) if text else DEFAULT_RETAIN_DECIDED_S
    except ValueError:
        return DEFAULT_RETAIN_DECIDED_S


def is_decided(request: ComparisonRequest, saved: ComparisonDocument | None) -> bool:
    """The comparison reached its end for the allowance in force (``/eval more`` reopens it)."""
    return (
        saved is not None
        and saved.status == "complete"
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
    for key in instance.get_dynamic_partitions("comparisons"):
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
            add_partitions(instance, "commits", comparison_commit_keys(again))
            add_partitions(instance, "comparisons", [again.key])
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
        "commits": {ck for r in open_requests for ck in comparison_commit_keys(r)},
        "comparisons": {r.key for r in open_requests},
    }
    out = []
    for name, keys in wanted.items():
        missing = sorted(keys - set(instance.get_dynamic_partitions(name))) if keys else []
        if missing:
            out.append(dg.AddDynamicPartitionsRequest(name, missing))
    return out


@dg.sensor(
    jobs=[eval_manifest_job, task_samples_job, comparison_job],
    minimum_interval_seconds=15,
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def sampling_sensor(
    context: dg.SensorEvaluationContext, lake: LakeResource, sandbox: SandboxResource
) -> dg.SensorResult:
    """Requests the next sample windows (both arms) for undecided tasks, until every task is
    decided, capped or out of budget; then the final comparison and report. Retires decided
    comparisons' partitions once reported."""
    the_lake = lake.open()
    if context.cursor != INDEXED_CURSOR:
        indexed = index_partitioned_comparisons(context.instance, the_lake)
        if indexed:
            context.log.info(f"listed {indexed} comparison partition(s) made before the open index")
    backend = sandbox.backend()
    runtime = backend.runtime_digest()
    requests: list[dg.RunRequest] = []
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
        assessment = assess_mod.assess(
            the_lake,
            request,
            backend_name=backend.name,
            runtime_digest=runtime,
            detail=False,
            cache=_ASSESS_CACHES.setdefault(key, assess_mod.AssessCache()),
        )
        requests += [step_run_request(s, key) for s in next_steps(assessment, saved)]
    if decided:
        retire_reported(context, the_lake, decided, open_requests)
    for key in set(_ASSESS_CACHES) - {r.key for r in open_requests}:
        del _ASSESS_CACHES[key]  # finished or gone: nothing more to plan
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=missing_partitions(context.instance, open_requests),
        cursor=INDEXED_CURSOR,
    )
