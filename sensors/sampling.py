"""The sampling sensor: drives every open comparison's adaptive loop from the lake's state.

Each tick reads each comparison's request and state (the lake alone), asks the same
``next_steps`` the CLI uses, and requests those runs. Run keys make it idempotent, and since
the lake holds all the state, it survives a daemon restart. Between ticks in one code-server
process, each open comparison keeps an ``AssessCache`` (immutable lake facts only: a restart
merely starts it cold), so a tick costs the tasks whose batches changed.
"""

import dagster as dg

from evalrunner_assets.jobs import comparison_job, comparison_run_tags, eval_manifest_job, task_samples_job
from evalrunner_assets.pipeline import assess as assess_mod
from evalrunner_assets.pipeline.keys import parse_comparison_key
from evalrunner_assets.pipeline.loop import Step, next_steps
from evalrunner_assets.pipeline.spec import ComparisonRequestError, load_request
from resources import LakeResource, SandboxResource

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


@dg.sensor(
    jobs=[eval_manifest_job, task_samples_job, comparison_job],
    minimum_interval_seconds=15,
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def sampling_sensor(
    context: dg.SensorEvaluationContext, lake: LakeResource, sandbox: SandboxResource
) -> dg.SensorResult:
    """Requests the next sample windows (both arms) for undecided tasks, until every task is
    decided, capped or out of budget; then the final comparison and report."""
    the_lake = lake.open()
    backend = sandbox.backend()
    runtime = backend.runtime_digest()
    requests: list[dg.RunRequest] = []
    open_comparisons: set[str] = set()
    for key in context.instance.get_dynamic_partitions("comparisons"):
        repo, pr, head = parse_comparison_key(key)
        try:
            request = load_request(the_lake, repo, pr, head)
        except ComparisonRequestError as exc:
            context.log.warning(f"skipping {key}: {exc}")
            continue
        saved = assess_mod.load_result(the_lake, repo, pr, head)
        if (
            saved
            and saved.get("status") == "complete"
            and saved.get("params", {}).get("cap") == (request.cap + request.extra_samples)
        ):
            continue
        open_comparisons.add(key)
        assessment = assess_mod.assess(
            the_lake,
            request,
            backend_name=backend.name,
            runtime_digest=runtime,
            detail=False,
            cache=_ASSESS_CACHES.setdefault(key, assess_mod.AssessCache()),
        )
        requests += [step_run_request(s, key) for s in next_steps(assessment, saved)]
    for key in set(_ASSESS_CACHES) - open_comparisons:
        del _ASSESS_CACHES[key]  # finished or gone: nothing more to plan
    return dg.SensorResult(run_requests=requests)
