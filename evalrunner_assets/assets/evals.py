"""The comparison pipeline's assets: manifest → samples → comparison → PR report.

Each asset body is a short narrative; the steps live in ``evalrunner_assets.pipeline``,
``lake`` and ``report`` (plain Python).
"""

import base64
from collections import Counter
from collections.abc import Mapping
from typing import Any

import dagster as dg

from evalrunner_assets.gateway import start_gateway, with_gateway
from evalrunner_assets.partitions import (
    add_partitions,
    commit_task_partitions,
    commits_partitions,
    comparisons_partitions,
)
from evalrunner_assets.pipeline import assess as assess_mod
from evalrunner_assets.pipeline.facts import facts_summary, learn_commit, load_facts
from evalrunner_assets.pipeline.keys import parse_commit_key, parse_comparison_key
from evalrunner_assets.pipeline.publish import SavedComparison, WrittenReport, save_comparison, write_report
from evalrunner_assets.pipeline.spec import DEFAULT_MODEL, load_request
from evalrunner_assets.pipeline.windows import batch_state, run_task_windows
from evalrunner_assets.report import render_comment
from lake import LAYOUT, Window
from lake.integrity import LakeIntegrityError, load_record, quarantine, verify_record
from lake.schema import BatchRecord
from resources import GitHubResource, LakeResource, RepoResource, SandboxResource

GROUP = "evals"

REPRODUCIBILITY_CHECK = "reproducibility_fields_present"
ERROR_LOG_CHECK = "no_error_logs"
INTEGRITY_CHECK = "lake_files_match_records"


@dg.asset(
    partitions_def=commits_partitions,
    group_name=GROUP,
    kinds={"inspect", "bubblewrap"},
    backfill_policy=dg.BackfillPolicy.multi_run(1),
)
def eval_manifest(
    context: dg.AssetExecutionContext, lake: LakeResource, sandbox: SandboxResource, repos: RepoResource
) -> dg.MaterializeResult:
    """One partition is one commit (``owner/repo@sha``): its `.evals/list` manifest (or Inspect's
    own task listing) and each task's sample ids, learnt in the sandbox from a read-only export."""
    repo, sha = parse_commit_key(context.partition_key)
    the_lake = lake.open()
    export = repos.export(the_lake, repo, sha)
    facts = learn_commit(the_lake, sandbox.backend(context), export, model=DEFAULT_MODEL)
    add_partitions(context.instance, "tasks", sorted(facts.tasks))
    return dg.MaterializeResult(metadata=manifest_metadata(the_lake, repo, sha, facts))


def manifest_metadata(the_lake, repo: str, sha: str, facts) -> dict[str, Any]:
    """What an ``eval_manifest`` materialization shows of one learnt commit."""
    summary = facts_summary(facts)
    return {
        "tasks": dg.MetadataValue.int(summary["tasks"]),
        "samples": dg.MetadataValue.int(summary["samples"]),
        "discovery": dg.MetadataValue.text(summary["discovery_source"]),
        "listing_failures": dg.MetadataValue.int(summary["listing_failures"]),
        # The repository environment its sandboxes mount (digest), or none.
        "environment": dg.MetadataValue.text(summary["environment"] or "none"),
        "manifest": dg.MetadataValue.path(the_lake.url(LAYOUT.manifest(repo, sha))),
        "task_ids": dg.MetadataValue.md("\n".join(f"- `{t}`" for t in sorted(facts.tasks))),
    }


class TaskSamplesConfig(dg.Config):
    """Which windows to run, for which comparison (its request fixes model, seed and epochs)."""

    comparison: str
    windows: list[str] = []


@dg.asset(
    partitions_def=commit_task_partitions,
    group_name=GROUP,
    kinds={"inspect", "parquet"},
    deps=[
        dg.AssetDep(
            eval_manifest,
            partition_mapping=dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name="commit"),
        )
    ],
    check_specs=[
        dg.AssetCheckSpec(
            REPRODUCIBILITY_CHECK,
            asset="task_samples",
            description="Every batch of this materialization records all reproducibility fields.",
        ),
        dg.AssetCheckSpec(
            ERROR_LOG_CHECK,
            asset="task_samples",
            description="No window of this materialization ended in an infrastructure failure "
            "(log status error, no log, sandbox crash).",
        ),
        dg.AssetCheckSpec(
            INTEGRITY_CHECK,
            asset="task_samples",
            description="Every file the batch records of this materialization vouch for has its "
            "recorded size and sha256 (a batch that fails is quarantined and runs again).",
        ),
    ],
)
def task_samples(
    context: dg.AssetExecutionContext,
    config: TaskSamplesConfig,
    lake: LakeResource,
    sandbox: SandboxResource,
    repos: RepoResource,
) -> dg.MaterializeResult:
    """One partition is one task at one commit; each materialization adds sample windows
    (one row per sample × epoch in `samples`, one per trajectory event in `events`),
    idempotently: a window already landed with the same batch key is reused, never re-run."""
    keys: Mapping[str, str] = context.partition_key.keys_by_dimension
    repo, sha = parse_commit_key(keys["commit"])
    task = keys["task"]
    the_lake = lake.open()
    c_repo, pr, head = parse_comparison_key(config.comparison)
    request = load_request(the_lake, c_repo, pr, head)
    facts = load_facts(the_lake, repo, sha)
    if facts is None or task not in facts.tasks:
        raise dg.Failure(
            f"task {task!r} is not in the learnt manifest of {repo}@{sha}; materialize eval_manifest first"
        )
    windows = [Window.parse(w) for w in config.windows]
    backend = sandbox.backend(context)
    export = repos.export(the_lake, repo, sha)
    # Real models: a gateway for this run's windows (keys from this process's environment). Its
    # sandboxes are not pooled: a warm session must not outlive the gateway it reaches.
    gateway = start_gateway(request.settings.model, request.budget_usd)
    try:
        outcomes = run_task_windows(
            the_lake,
            with_gateway(backend, gateway) if gateway is not None else backend,
            export,
            facts.tasks[task],
            assess_mod.run_settings(request),
            windows,
            pool=sandbox.warm_pool() if gateway is None else None,
            on_window=lambda o: context.log.info(f"{task} {o.key.window.name}: {o.status} ({o.samples} samples)"),
        )
    finally:
        if gateway is not None:
            gateway.close()
    metadata, checks = samples_metadata(the_lake, outcomes)
    return dg.MaterializeResult(metadata=metadata, check_results=[dg.AssetCheckResult(**c) for c in checks])


def samples_metadata(the_lake, outcomes) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """What a ``task_samples`` materialization shows of its windows' ``outcomes``, and its asset
    checks' evaluations (keyword arguments of ``AssetCheckResult`` / ``AssetCheckEvaluation``).
    Verifies every file the windows' batch records vouch for (a batch that fails is quarantined)."""
    status = Counter(o.status for o in outcomes)
    failed = [o for o in outcomes if o.status == "failed"]
    missing = sorted({f for o in outcomes for f in o.key.missing_fields})
    records = _records(the_lake, outcomes)
    mismatches = _verify(the_lake, records)
    metadata = {
        "windows": dg.MetadataValue.int(len(outcomes)),
        "windows_run": dg.MetadataValue.int(status["landed"]),
        "windows_reused": dg.MetadataValue.int(status["reused"]),
        "windows_failed": dg.MetadataValue.int(len(failed)),
        "samples": dg.MetadataValue.int(sum(r.sample_rows for r in records)),
        "errors": dg.MetadataValue.int(sum(r.errored_samples for r in records)),
        "batches": dg.MetadataValue.json([o.key.digest for o in outcomes]),
    }
    checks = [
        {
            "check_name": REPRODUCIBILITY_CHECK,
            "passed": not missing,
            "metadata": {"missing_fields": dg.MetadataValue.json(missing)},
            "description": "unpublishable: missing " + ", ".join(missing) if missing else None,
        },
        {
            "check_name": ERROR_LOG_CHECK,
            "passed": not failed,
            "severity": dg.AssetCheckSeverity.ERROR,
            "metadata": {"failures": dg.MetadataValue.json({o.key.window.name: o.failure for o in failed})},
        },
        {
            "check_name": INTEGRITY_CHECK,
            "passed": not mismatches,
            "severity": dg.AssetCheckSeverity.ERROR,
            "metadata": {
                "files_checked": dg.MetadataValue.int(sum(len(r.files()) for r in records)),
                "quarantined": dg.MetadataValue.json(mismatches),
            },
            "description": "; ".join(mismatches)[:1000] if mismatches else None,
        },
    ]
    return metadata, checks


def _verify(the_lake, records: list[BatchRecord]) -> list[str]:
    """Full sha256 check of every file of ``records``; a batch that fails is quarantined."""
    problems = []
    for record in records:
        try:
            verify_record(the_lake, record, always=True)
        except LakeIntegrityError as exc:
            problems.append(str(exc))
            if exc.record is not None:
                quarantine(the_lake, exc.record, str(exc))
    return problems


def _records(the_lake, outcomes) -> list[BatchRecord]:
    out = []
    for o in outcomes:
        k = o.key
        rel = LAYOUT.batch_record(k.repo, k.commit, k.task, k.window, k.digest)
        if batch_state(the_lake, k) == "committed":
            out.append(load_record(the_lake, rel))
    return out


@dg.asset(
    partitions_def=comparisons_partitions,
    group_name=GROUP,
    kinds={"duckdb", "altair"},
    deps=[dg.AssetDep(task_samples, partition_mapping=dg.AllPartitionMapping())],
)
def comparison(context: dg.AssetExecutionContext, lake: LakeResource, sandbox: SandboxResource) -> dg.MaterializeResult:
    """One partition is one PR head (``owner/repo#pr@head``) judged against its base: per-task
    paired deltas with anytime-valid intervals, labels, the run verdict and P(improvement)."""
    repo, pr, head = parse_comparison_key(context.partition_key)
    the_lake = lake.open()
    request = load_request(the_lake, repo, pr, head)
    backend = sandbox.backend()
    assessment = assess_mod.assess(
        the_lake, request, backend_name=backend.name, runtime_digest=backend.runtime_digest()
    )
    saved = save_comparison(the_lake, assessment.result)
    return dg.MaterializeResult(metadata=comparison_metadata(saved))


def comparison_metadata(saved: SavedComparison) -> dict[str, Any]:
    """What a ``comparison`` materialization shows of one saved comparison document."""
    result = saved.result
    metadata: dict[str, Any] = {
        "verdict": dg.MetadataValue.text(result.verdict),
        "p_improvement": result.final_verdict.p_improvement,
        "pairs": dg.MetadataValue.int(sum(t.decision.pairs for t in result.tasks.values())),
        "labels": dg.MetadataValue.json({t: d.decision.label for t, d in result.tasks.items()}),
        "samples_run": dg.MetadataValue.int(result.samples_run),
        "spend_usd": result.spend_usd,
        "comparison_json": dg.MetadataValue.path(saved.url),
        "summary": dg.MetadataValue.md(render_comment(result)),
    }
    if saved.chart_png is not None:
        png = base64.b64encode(saved.chart_png).decode()
        metadata["chart"] = dg.MetadataValue.md(f"![how many samples until we know](data:image/png;base64,{png})")
    return metadata


@dg.asset(
    partitions_def=comparisons_partitions,
    group_name=GROUP,
    kinds={"github"},
    deps=[comparison],
)
def pr_report(context: dg.AssetExecutionContext, lake: LakeResource, github: GitHubResource) -> dg.MaterializeResult:
    """One partition is one PR head: the PR comment (one, edited in place) and the check run
    `evalrunner / evals`. Without GitHub configured both are written to the lake and printed."""
    repo, pr, head = parse_comparison_key(context.partition_key)
    the_lake = lake.open()
    result = assess_mod.load_result(the_lake, repo, pr, head)
    if result is None:
        raise dg.Failure(f"no comparison for {context.partition_key} yet; materialize comparison first")
    report = write_report(the_lake, result, github)
    if report.github_error is not None:
        context.log.error(f"posting to GitHub failed: {report.github_error}")
    elif not report.posted:
        context.log.info(f"GitHub not configured: comment written to {report.comment_url}\n{report.body}")
    return dg.MaterializeResult(metadata=report_metadata(report))


def report_metadata(report: WrittenReport) -> dict[str, Any]:
    """What a ``pr_report`` materialization shows of one written report."""
    metadata: dict[str, Any] = {
        "check_run": dg.MetadataValue.json(report.check),
        "comment_file": dg.MetadataValue.path(report.comment_url),
        "comment": dg.MetadataValue.md(report.body),
    }
    for name in ("github_comment_id", "github_check_run_id"):
        if name in report.posted:
            metadata[name] = dg.MetadataValue.int(report.posted[name])
    if report.github_error is not None:
        # A permanent GitHub error is reported on the materialization, never hidden.
        metadata["github_error"] = dg.MetadataValue.text(report.github_error)
    return metadata


ASSETS = [eval_manifest, task_samples, comparison, pr_report]
