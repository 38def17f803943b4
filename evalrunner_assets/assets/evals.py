"""The comparison pipeline's assets: manifest → samples → comparison → PR report.

Each asset body is a short narrative; the steps live in ``evalrunner_assets.pipeline``,
``lake`` and ``report`` (plain Python).
"""

from collections.abc import Iterator, Mapping
from typing import Any

import dagster as dg

from evalrunner_assets.assets.manifest import GROUP, NOUN_TAG, OWNERS, eval_manifest
from evalrunner_assets.assets.metadata import (
    ERROR_LOG_CHECK,
    INTEGRITY_CHECK,
    REPRODUCIBILITY_CHECK,
    baselines_metadata,
    comparison_metadata,
    report_metadata,
    sample_scores_metadata,
    samples_metadata,
    trajectories_metadata,
)
from evalrunner_assets.assets.recording import RunRecorder
from evalrunner_assets.assets.run_worker import record_run_worker
from evalrunner_assets.gateway import start_gateway, with_gateway
from evalrunner_assets.partitions import (
    commit_task_partitions,
    comparisons_partitions,
)
from evalrunner_assets.pipeline import assess as assess_mod
from evalrunner_assets.pipeline import engine, nouns
from evalrunner_assets.pipeline.capabilities import EngineOptions, EngineResources
from evalrunner_assets.pipeline.defaults import samples_defaults
from evalrunner_assets.pipeline.facts import load_facts
from evalrunner_assets.pipeline.keys import parse_commit_key, parse_comparison_key
from evalrunner_assets.pipeline.lease import ComparisonBusy
from evalrunner_assets.pipeline.publish import SavedComparison, save_comparison, write_report
from evalrunner_assets.pipeline.spec import load_request
from evalrunner_assets.pipeline.windows import run_task_windows
from lake import Window
from resources import GitHubResource, LakeResource, RepoResource, SandboxResource


class TaskSamplesConfig(dg.Config):
    """Which windows to run, for which comparison (its request fixes model, seed and epochs).
    Both may be left out (a materialization or backfill launched from the UI): the newest
    comparison judging the commit and the windows it plans next are taken from the lake."""

    comparison: str = ""  # 'owner/repo#pr@head'; empty: the newest comparison judging this commit
    windows: list[str] = []  # window names, e.g. w000008-000016; empty: what that comparison plans next


TASK_SAMPLES = dg.AssetKey("task_samples")
SAMPLE_SCORES = dg.AssetKey("sample_scores")
TRAJECTORIES = dg.AssetKey("trajectories")


@dg.multi_asset(
    name="task_samples",
    partitions_def=commit_task_partitions,
    can_subset=True,
    specs=[
        dg.AssetSpec(
            TASK_SAMPLES,
            description="One partition is one task at one commit; each materialization adds sample windows "
            "(one row per sample × epoch in `samples`, one per trajectory event in `events`), idempotently: "
            "a window already landed with the same batch key is reused, never re-run.",
            group_name=GROUP,
            kinds={"inspect", "parquet"},
            owners=OWNERS,
            tags={NOUN_TAG: "task-samples"},
            deps=[
                dg.AssetDep(
                    eval_manifest,
                    partition_mapping=dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name="commit"),
                )
            ],
            skippable=True,
        ),
        dg.AssetSpec(
            SAMPLE_SCORES,
            description="One partition is one task at one commit: its scored samples, one row per sample × epoch "
            "of the lake's `samples` table (score in [0, 1], raw value, scorer, error, tokens, cost, time). "
            "Shown whenever `task_samples` lands windows; materialized alone, it reads what is landed.",
            group_name=GROUP,
            kinds={"duckdb", "parquet"},
            owners=OWNERS,
            tags={NOUN_TAG: "sample-scores"},
            deps=[TASK_SAMPLES],
            skippable=True,
        ),
        dg.AssetSpec(
            TRAJECTORIES,
            description="One partition is one task at one commit: the trajectory of every sample × epoch (model "
            "calls, tool calls, messages, scores, errors: one row per event of the lake's `events` table) and "
            "the Inspect logs they come from. Shown whenever `task_samples` lands windows; materialized alone, "
            "it reads what is landed.",
            group_name=GROUP,
            kinds={"duckdb", "inspect"},
            owners=OWNERS,
            tags={NOUN_TAG: "trajectories"},
            deps=[TASK_SAMPLES],
            skippable=True,
        ),
    ],
    check_specs=[
        dg.AssetCheckSpec(
            REPRODUCIBILITY_CHECK,
            asset=TASK_SAMPLES,
            description="Every batch of this materialization records all reproducibility fields.",
        ),
        dg.AssetCheckSpec(
            ERROR_LOG_CHECK,
            asset=TASK_SAMPLES,
            description="No window of this materialization ended in an infrastructure failure "
            "(log status error, no log, sandbox crash).",
        ),
        dg.AssetCheckSpec(
            INTEGRITY_CHECK,
            asset=TASK_SAMPLES,
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
) -> Iterator[dg.MaterializeResult]:
    """Land sample windows of one (commit, task) (``task_samples``), then show what the lake
    holds of it as ``sample_scores`` and ``trajectories``: one step, so the nouns cost no extra
    run process; each may be materialized alone (the last two only read the lake)."""
    record_run_worker(context)
    keys: Mapping[str, str] = context.partition_key.keys_by_dimension
    repo, sha = parse_commit_key(keys["commit"])
    task = keys["task"]
    the_lake = lake.open()
    selected = context.selected_asset_keys
    if TASK_SAMPLES in selected:
        metadata, checks = land_task_windows(context, config, the_lake, sandbox, repos, repo, sha, task)
        yield dg.MaterializeResult(
            asset_key=TASK_SAMPLES, metadata=metadata, check_results=[dg.AssetCheckResult(**c) for c in checks]
        )
    if SAMPLE_SCORES in selected:
        scores = nouns.sample_scores(the_lake, repo, sha, task)
        yield dg.MaterializeResult(asset_key=SAMPLE_SCORES, metadata=sample_scores_metadata(scores))
    if TRAJECTORIES in selected:
        found = nouns.trajectories(the_lake, repo, sha, task)
        yield dg.MaterializeResult(asset_key=TRAJECTORIES, metadata=trajectories_metadata(found))


def land_task_windows(
    context: dg.AssetExecutionContext,
    config: TaskSamplesConfig,
    the_lake: Any,
    sandbox: SandboxResource,
    repos: RepoResource,
    repo: str,
    sha: str,
    task: str,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run (or reuse) the windows ``config`` names — or, without config, those the lake says
    come next — and land them; the ``task_samples`` metadata and check evaluations."""
    facts = load_facts(the_lake, repo, sha)
    if facts is None or task not in facts.tasks:
        raise dg.Failure(
            f"task {task!r} is not in the learnt manifest of {repo}@{sha}; materialize eval_manifest first"
        )
    backend = sandbox.backend(context)
    if config.comparison and config.windows:  # what the sampling sensor asks for
        request = load_request(the_lake, *parse_comparison_key(config.comparison))
        # The model this commit runs: its agent config's, unless the request sets one.
        settings, budget_usd = assess_mod.run_settings(request, facts.agent_model), request.budget_usd
        windows = [Window.parse(w) for w in config.windows]
    else:  # launched from the UI: the lake says what comes next
        defaults = samples_defaults(
            the_lake,
            repo,
            sha,
            task,
            len(facts.tasks[task].sample_ids),
            comparison=config.comparison,
            backend_name=backend.name,
            runtime_digest=backend.runtime_digest(),
            agent=facts.agent_model,
        )
        windows = [Window.parse(w) for w in config.windows] or defaults.windows
        context.log.info(
            f"{defaults.comparison or 'no comparison'}: windows {[w.name for w in windows]}; {defaults.why}"
        )
        settings, budget_usd = defaults.settings, defaults.budget_usd
    export = repos.export(the_lake, repo, sha)
    # Real models: a gateway for this run's windows (keys from this process's environment). Its
    # sandboxes are not pooled: a warm session must not outlive the gateway it reaches.
    gateway = start_gateway(settings.model, budget_usd)
    try:
        outcomes = run_task_windows(
            the_lake,
            with_gateway(backend, gateway) if gateway is not None else backend,
            export,
            facts.tasks[task],
            settings,
            windows,
            pool=sandbox.warm_pool() if gateway is None else None,
            on_window=lambda o: context.log.info(f"{task} {o.key.window.name}: {o.status} ({o.samples} samples)"),
        )
    finally:
        if gateway is not None:
            gateway.close()
    return samples_metadata(the_lake, outcomes)


BASELINES = dg.AssetKey("baselines")
COMPARISON = dg.AssetKey("comparison")


@dg.multi_asset(
    name="comparison",
    partitions_def=comparisons_partitions,
    can_subset=True,
    specs=[
        dg.AssetSpec(
            BASELINES,
            description="One partition is one PR head: the base side it is judged against — per task, the base "
            "commit's batches its comparison pairs with, and how many were reused (landed before this "
            "comparison was asked for, by another PR on the same base or an earlier run) rather than run for it.",
            group_name=GROUP,
            kinds={"duckdb", "parquet"},
            owners=OWNERS,
            tags={NOUN_TAG: "baselines"},
            deps=[dg.AssetDep(TASK_SAMPLES, partition_mapping=dg.AllPartitionMapping())],
            skippable=True,
        ),
        dg.AssetSpec(
            COMPARISON,
            description="One partition is one PR head (``owner/repo#pr@head``) judged against its base: per-task "
            "paired deltas with anytime-valid intervals, labels, the run verdict and P(improvement).",
            group_name=GROUP,
            kinds={"duckdb", "altair"},
            owners=OWNERS,
            tags={NOUN_TAG: "comparison"},
            deps=[dg.AssetDep(TASK_SAMPLES, partition_mapping=dg.AllPartitionMapping()), BASELINES],
            skippable=True,
        ),
    ],
)
def comparison(
    context: dg.AssetExecutionContext,
    lake: LakeResource,
    sandbox: SandboxResource,
    repos: RepoResource,
    github: GitHubResource,
) -> Iterator[dg.MaterializeResult]:
    """One partition is one PR head (``owner/repo#pr@head``) judged against its base: per-task
    paired deltas with anytime-valid intervals, labels, the run verdict and P(improvement), with
    the base side it used (``baselines``).

    Materializing ``comparison`` runs what the comparison still needs, through the comparison
    engine (the one ``evalrunner compare`` drives): the commits' evals, then every ready sample
    window of both arms packed on one pool of warm sandboxes, until each task is decided, capped
    or out of budget. The check run shows progress meanwhile. The commits and windows it landed
    are reported as ``eval_manifest`` / ``task_samples`` / ``sample_scores`` / ``trajectories``
    materializations of this run. A decided comparison runs nothing: its document is computed
    again from the lake. ``baselines`` alone reads the saved document."""
    record_run_worker(context)
    repo, pr, head = parse_comparison_key(context.partition_key)
    the_lake = lake.open()
    request = load_request(the_lake, repo, pr, head)
    selected = context.selected_asset_keys
    saved: SavedComparison | None = None
    if COMPARISON in selected:
        recorder = RunRecorder(the_lake, context.instance)
        resources = EngineResources(lake=lake, sandbox=sandbox, repos=repos, github=github)
        try:
            engine.run_comparison(
                request,
                resources=resources,
                recorder=recorder,
                options=EngineOptions(
                    # Failures were retired when the evaluation was asked for (a delivery, `/eval
                    # more`): a window that failed in an earlier run of this comparison stays failed.
                    retry_failed=False,
                    report_at_start=True,
                    sandbox_context=context,
                    lease_owner=f"comparison_job run {context.run_id}",
                    lease_wait=False,  # a run slot is not held waiting: the sensor asks again later
                ),
            )
        except engine.ComparisonStopped as exc:
            raise dg.Failure(f"the comparison stopped: {exc}") from exc
        except ComparisonBusy as exc:
            # Another engine (e.g. `evalrunner compare`) is on it; the sampling sensor asks again
            # once that holder is gone, if anything is still left.
            raise dg.Failure(str(exc)) from exc
        finally:
            for event in recorder.take_events():
                context.log_event(event)
        saved = recorder.saved
    document = saved.result if saved is not None else assess_mod.load_result(the_lake, repo, pr, head)
    if document is None or (saved is None and COMPARISON in selected):
        # Nothing moved (or nothing saved yet): the document is computed again, as last saved.
        backend = sandbox.backend(context)
        assessment = assess_mod.assess(
            the_lake, request, backend_name=backend.name, runtime_digest=backend.runtime_digest()
        )
        document = assessment.result
        if COMPARISON in selected:
            saved = save_comparison(the_lake, document)
    if BASELINES in selected:
        yield dg.MaterializeResult(
            asset_key=BASELINES, metadata=baselines_metadata(nouns.baselines(the_lake, request, document))
        )
    if saved is not None:
        yield dg.MaterializeResult(asset_key=COMPARISON, metadata=comparison_metadata(saved))


@dg.asset(
    partitions_def=comparisons_partitions,
    group_name=GROUP,
    kinds={"github"},
    owners=OWNERS,
    tags={NOUN_TAG: "pr-report"},
    deps=[COMPARISON],
)
def pr_report(context: dg.AssetExecutionContext, lake: LakeResource, github: GitHubResource) -> dg.MaterializeResult:
    """One partition is one PR head: the PR comment (one, edited in place) and the check run
    `evalrunner / evals`. Without GitHub configured both are written to the lake and printed."""
    record_run_worker(context)
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


ASSETS = [eval_manifest, task_samples, comparison, pr_report]
