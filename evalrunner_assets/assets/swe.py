"""SWE-style task sets: a run's attempts and a task set's gold-patch check.

``swe_attempts`` has one partition per submitted run (``r-<hex>``, the run id the API derives
from the request): materializing it runs every attempt of that run not yet in the lake, within
its budget. ``swe_gold_check`` has one partition per task set: it runs each gold patch several
times and lands per-test flake rates. The work is ``evalrunner_assets.swe`` (plain Python); the
run's request comes from the lake, so a materialization from the UI needs no config.
"""

import os
import socket
from collections.abc import Iterator

import dagster as dg

from evalrunner_assets import home
from evalrunner_assets.assets.run_worker import record_run_worker
from evalrunner_assets.partitions import swe_runs_partitions, swe_task_sets_partitions
from evalrunner_assets.swe import RunSpec, SweStore
from evalrunner_assets.swe.model import GOLD_RUNS_MIN, REPRO_FIELDS
from evalrunner_assets.swe.runner import execute_run, local_context, run_gold_check
from resources import LakeResource, SandboxResource
from resources.sandbox import configured_backend_name

GROUP = "swe"
REPRO_CHECK = "rows_have_reproducibility_fields"
GOLD_CHECK = "gold_passes_on_every_task"


class GoldCheckConfig(dg.Config):
    runs: int = GOLD_RUNS_MIN


@dg.asset(
    partitions_def=swe_runs_partitions,
    group_name=GROUP,
    kinds={configured_backend_name(), "parquet"},
    owners=["team:evals"],
    tags={"evalrunner/noun": "swe-attempts"},
    check_specs=[dg.AssetCheckSpec(REPRO_CHECK, asset="swe_attempts")],
)
def swe_attempts(
    context: dg.AssetExecutionContext, lake: LakeResource, sandbox: SandboxResource
) -> Iterator[dg.MaterializeResult]:
    """One partition is one submitted run (agent version × task set × samples); one row per
    attempt (agent version, task, sample index), each graded by hidden tests in a fresh sandbox
    after the cheat policy."""
    record_run_worker(context)
    store = SweStore(lake.open())
    run_id = context.partition_key
    spec = RunSpec.model_validate(store.run(run_id)["spec"])
    backend = sandbox.backend(context)
    backend.preflight()
    ctx = local_context(store, backend, home.home())
    # Which process executes it (the daemon's run worker, a Kubernetes Job's pod, the CLI).
    worker = {"pid": os.getpid(), "host": socket.gethostname()}
    store.update_run(run_id, status="running", dagster_run_id=context.run.run_id, worker=worker)
    try:
        outcome = execute_run(ctx, spec, workers=sandbox.worker_count())
    finally:
        ctx.close()  # on Kubernetes: the pool's ready workspace pods are deleted
    pool_stats = ctx.pool.stats()
    store.update_run(run_id, status=outcome.status, outcome=outcome.to_dict(), pool=pool_stats)
    rows = store.attempts(
        task_ids=[t.id for t in store.task_set(spec.task_set).tasks], agent_version=spec.agent_version
    )
    missing = [r["id"] for r in rows if any(r.get(f) in (None, "") for f in REPRO_FIELDS)]
    yield dg.MaterializeResult(
        metadata={
            "attempted": dg.MetadataValue.int(outcome.attempted),
            "reused": dg.MetadataValue.int(outcome.reused),
            "budget_stopped": dg.MetadataValue.int(len(outcome.budget_stopped)),
            "spent_usd": dg.MetadataValue.float(round(outcome.spent_usd, 4)),
            "statuses": dg.MetadataValue.json(outcome.statuses),
            "queue_age_s": dg.MetadataValue.float(float(pool_stats["max_wait_s"])),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name=REPRO_CHECK,
                passed=not missing,
                metadata={"rows_missing_fields": dg.MetadataValue.int(len(missing))},
            )
        ],
    )


@dg.asset(
    partitions_def=swe_task_sets_partitions,
    group_name=GROUP,
    kinds={configured_backend_name(), "parquet"},
    owners=["team:evals"],
    tags={"evalrunner/noun": "swe-gold-check"},
    check_specs=[dg.AssetCheckSpec(GOLD_CHECK, asset="swe_gold_check")],
)
def swe_gold_check(
    context: dg.AssetExecutionContext, config: GoldCheckConfig, lake: LakeResource, sandbox: SandboxResource
) -> dg.MaterializeResult:
    """One partition is one task set; one row per (task, test) with its flake rate over the gold
    runs. Tasks whose gold fails leave the headline; flaky tests are dropped from grading."""
    record_run_worker(context)
    store = SweStore(lake.open())
    backend = sandbox.backend(context)
    backend.preflight()
    ctx = local_context(store, backend, home.home())
    try:
        summary = run_gold_check(ctx, context.partition_key, config.runs)
    finally:
        ctx.close()
    lines = [f"- `{tid}`: {v['status']} — {v['reason']}" for tid, v in sorted(summary["tasks"].items())]
    dropped = sum(len(v) for v in summary["dropped_tests"].values())
    return dg.MaterializeResult(
        metadata={
            "tasks": dg.MetadataValue.int(len(summary["tasks"])),
            "excluded": dg.MetadataValue.int(len(summary["excluded"])),
            "flaky_tests_dropped": dg.MetadataValue.int(dropped),
            "runs": dg.MetadataValue.int(summary["runs"]),
            "verdicts": dg.MetadataValue.md("\n".join(lines)),
        },
        # A task whose gold fails or flakes is data about the harness, not the agent: shown
        # beside the data (WARN), while the leaderboard leaves those tasks out of its headline.
        check_results=[
            dg.AssetCheckResult(
                check_name=GOLD_CHECK,
                passed=not summary["excluded"] and not dropped,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={"excluded_tasks": dg.MetadataValue.json(summary["excluded"])},
            )
        ],
    )


SWE_ASSETS = [swe_attempts, swe_gold_check]
