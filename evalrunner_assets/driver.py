"""Drive one comparison to its verdict in-process, on a persistent local Dagster instance.

The same loop the sensors run: ``assess`` → ``next_steps`` → materialize each step's assets as
a Dagster run, until nothing is left to do. Runs, partitions, checks and lineage are recorded
in the instance at ``$DAGSTER_HOME`` (default ``<EVALRUNNER_HOME>/dagster``), so
``evalrunner serve`` afterwards shows them.
"""

import os
from collections.abc import Callable
from typing import Any

import dagster as dg

from evalrunner_assets import home
from evalrunner_assets.assets.evals import ASSETS, comparison, eval_manifest, pr_report, task_samples
from evalrunner_assets.pipeline import assess as assess_mod
from evalrunner_assets.pipeline.keys import commit_key
from evalrunner_assets.pipeline.loop import Step, next_steps
from evalrunner_assets.pipeline.spec import ComparisonRequest, open_comparison
from resources import GitHubResource, LakeResource, RepoResource, SandboxResource


class ComparisonFailed(RuntimeError):
    """A step of the comparison failed; the message names the step and the cause."""


def local_instance() -> dg.DagsterInstance:
    path = home.dagster_home()
    path.mkdir(parents=True, exist_ok=True)
    os.environ["DAGSTER_HOME"] = str(path)
    return dg.DagsterInstance.get()


def default_resources(**overrides: Any) -> dict[str, Any]:
    res = {
        "lake": LakeResource(),
        "sandbox": SandboxResource(),
        "repos": RepoResource(),
        "github": GitHubResource(),
    }
    res.update(overrides)
    return res


def _materialize(step: Step, comparison_key: str, instance: dg.DagsterInstance, resources: dict) -> None:
    if step.kind == "manifest":
        selection, partition, config = [eval_manifest], step.commit, None
    elif step.kind == "samples":
        selection = [task_samples]
        partition = dg.MultiPartitionKey({"commit": step.commit, "task": step.task})
        config = {"ops": {"task_samples": {"config": {"comparison": comparison_key, "windows": list(step.windows)}}}}
    else:
        selection, partition, config = [comparison, pr_report], comparison_key, None
    result = dg.materialize(
        ASSETS,
        selection=selection,
        partition_key=partition,
        instance=instance,
        resources=resources,
        run_config={**(config or {}), "loggers": {"console": {"config": {"log_level": "WARNING"}}}},
        tags={"evalrunner/comparison": comparison_key, "evalrunner/step": step.run_key[:200]},
        # The CLI prints its own progress; Dagster's per-event console lines stay in the instance.
        raise_on_error=False,
    )
    if not result.success:
        errors = [
            str(e.event_specific_data.error.message).strip()  # type: ignore[union-attr]
            for e in result.all_events
            if e.is_step_failure and e.event_specific_data is not None
        ]
        raise ComparisonFailed(f"{step.kind} step {step.run_key} failed: {'; '.join(errors) or 'see the run logs'}")


def run_comparison(
    request: ComparisonRequest,
    *,
    instance: dg.DagsterInstance | None = None,
    resources: dict[str, Any] | None = None,
    on_step: Callable[[Step, dict[str, Any] | None], None] | None = None,
) -> dict[str, Any]:
    """Run ``request`` to its final verdict; returns the comparison document."""
    instance = instance or local_instance()
    resources = resources or default_resources()
    the_lake = resources["lake"].open()
    resources["repos"].register(the_lake, request.repo, request.source)
    request = open_comparison(the_lake, request)
    instance.add_dynamic_partitions(
        "commits", [commit_key(request.repo, request.base_sha), commit_key(request.repo, request.head_sha)]
    )
    instance.add_dynamic_partitions("comparisons", [request.key])
    backend = resources["sandbox"].backend()
    backend.preflight()
    runtime = backend.runtime_digest()
    pool = resources["sandbox"].warm_pool()
    try:
        while True:
            assessment = assess_mod.assess(the_lake, request, backend_name=backend.name, runtime_digest=runtime)
            saved = assess_mod.load_result(the_lake, request.repo, request.pr, request.head_sha)
            if pool is not None:  # decided tasks give their warm sandboxes back
                pool.retain((w.commit, w.task) for w in assessment.next_windows)
            steps = next_steps(assessment, saved)
            if not steps:
                break
            for step in steps:
                _materialize(step, request.key, instance, resources)
                if on_step is not None:
                    on_step(step, assess_mod.load_result(the_lake, request.repo, request.pr, request.head_sha))
    finally:
        if pool is not None:
            pool.close_all()
    result = assess_mod.load_result(the_lake, request.repo, request.pr, request.head_sha)
    assert result is not None
    return result
