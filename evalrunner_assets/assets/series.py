"""The main-branch cohort series: one partition per main commit of a repository.

The asset body reads the repository's series settings from the lake (written by the first
``evalrunner backfill``; defaults otherwise), so a backfill launched from the UI over any range
of ``main_commits`` needs no run config. The measuring, reuse and flagging live in
``evalrunner_assets.pipeline.series`` (plain Python).
"""

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import dagster as dg

from evalrunner_assets.assets.run_worker import record_run_worker
from evalrunner_assets.execution import RepoExport
from evalrunner_assets.partitions import main_commits_partitions
from evalrunner_assets.pipeline import series, series_progress
from evalrunner_assets.pipeline.keys import commit_key, parse_commit_key
from evalrunner_assets.report.panel import markdown_image
from evalrunner_assets.report.series_chart import render_series_panel
from evalrunner_assets.report.series_markdown import render_point_table, render_series_summary
from lake import LAYOUT, Lake
from resources import GitHubResource, LakeResource, RepoResource, SandboxResource

GROUP = "series"


NO_REGRESSION_CHECK = "no_cohort_regression"
_SEVERITY = {"error": dg.AssetCheckSeverity.ERROR, "warn": dg.AssetCheckSeverity.WARN}


@dg.asset(
    partitions_def=main_commits_partitions,
    group_name=GROUP,
    kinds={"inspect", "duckdb", "altair"},
    owners=["team:evals"],
    tags={"evalrunner/noun": "cohort-series"},
    # One run for a whole backfill range: points are measured oldest first in one process, so
    # each is flagged against the point before it (not against whichever finished first), the
    # warm sandboxes and the Inspect start-up are paid once per run instead of once per commit,
    # and a repeated backfill costs one run that finds every point already measured.
    backfill_policy=dg.BackfillPolicy.single_run(),
    # Each point is its partition's own materialization, yielded as it lands (the backfill page
    # counts it, its metadata is that point's); there is no run-wide output at the end.
    output_required=False,
)
def cohort_series(
    context: dg.AssetExecutionContext,
    lake: LakeResource,
    sandbox: SandboxResource,
    repos: RepoResource,
    github: GitHubResource,
) -> Iterator[dg.AssetMaterialization | dg.AssetCheckEvaluation]:
    """One partition is one commit on a repository's series branch (``owner/repo@sha``): per
    task the mean score with an anytime-valid interval, per cohort and for all tasks a pooled
    Wilson interval, and a paired comparison with the previous point that flags a cohort whose
    task really dropped (its ``no_cohort_regression`` check fails). Cohorts added at a commit are
    annotated, never flagged."""
    record_run_worker(context)
    the_lake = lake.open()
    wanted: dict[str, set[str]] = defaultdict(set)
    for key in context.partition_keys:
        repo, sha = parse_commit_key(key)
        wanted[repo].add(sha)
    backend = sandbox.backend(context)
    backend.preflight()
    for repo, shas in sorted(wanted.items()):
        branch, settings = series.load_settings(the_lake, repo)
        source = repos.source(the_lake, repo)
        source.update()
        history = series.history_of(source.first_parent_history(branch))
        chosen = [c for c in history if c.sha in shas]
        missing = sorted(shas - {c.sha for c in chosen})
        if missing:
            raise dg.Failure(
                f"{repo}: {', '.join(s[:12] for s in missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not on {branch}'s first-parent history"
            )

        def export_for(sha: str, repo: str = repo) -> RepoExport:
            return repos.export(the_lake, repo, sha)

        run = series.SeriesRun(points=[])
        points_run = series.iter_series(
            the_lake,
            backend,
            repo,
            export_for,
            history,
            chosen,
            settings,
            run,
            branch=branch,
            pool=sandbox.warm_pool(),
            workers=sandbox.worker_count(),
            on_window=series_progress.notify_window,
        )
        newest = max(c.position for c in chosen)
        for point, fresh in points_run:
            context.log.info(
                f"{repo}@{point['commit'][:12]} ({'measured' if fresh else 'reused'}): "
                + "; ".join(series.reading(point))
            )
            if point.get("flagged") and fresh and github.is_configured():
                _post_flag(context, github, point)
            points = None
            if point["position"] == newest:
                points = series.load_series(the_lake, repo, branch)
                _save_chart(the_lake, repo, branch, points)
            partition = commit_key(repo, point["commit"])
            yield dg.AssetMaterialization(
                asset_key=context.asset_key,
                partition=partition,
                metadata=point_metadata(the_lake, point, fresh, points),
            )
            verdict = series.regression_check(point)
            yield dg.AssetCheckEvaluation(
                asset_key=context.asset_key,
                check_name=NO_REGRESSION_CHECK,
                partition=partition,
                passed=verdict.passed,
                severity=_SEVERITY[verdict.severity],
                description=verdict.description,
                metadata=_check_metadata(verdict),
            )
            series_progress.notify_point(point, fresh)
        context.log.info(
            f"{repo}: {len(run.measured)} point(s) measured, {len(run.reused)} reused, {run.windows_run} window(s) run"
        )


def point_metadata(
    the_lake: Any, point: dict, fresh: bool, points: list[dict] | None = None
) -> dict[str, dg.MetadataValue]:
    """A partition's materialization: its own point's reading, flags and execution, and a link
    to the branch's series chart; with ``points`` (the newest point of a run) also the chart's
    panel image — one per run, so a backfill of hundreds of commits stores one image."""
    repo, branch = point["repo"], point.get("branch") or "main"
    execution = point.get("execution") or {}
    metadata: dict[str, dg.MetadataValue] = {
        "reading": dg.MetadataValue.md("\n".join(f"- {line}" for line in series.reading(point))),
        "point": dg.MetadataValue.md(render_point_table([point])),
        "measured_now": dg.MetadataValue.bool(fresh),
        "flagged": dg.MetadataValue.bool(bool(point.get("flagged"))),
        "flagged_tasks": dg.MetadataValue.json(list(point.get("flagged_tasks") or [])),
        "cohort_status": dg.MetadataValue.json(dict(point.get("cohort_status") or {})),
        "previous": dg.MetadataValue.text(str(point.get("previous") or "")),
        "windows_run": dg.MetadataValue.int(int(execution.get("windows_run") or 0) if fresh else 0),
        "windows_reused": dg.MetadataValue.int(int(execution.get("windows_reused") or 0)),
        "chart_path": dg.MetadataValue.path(the_lake.url(LAYOUT.series_chart(repo, branch, "svg"))),
    }
    if point["combined"].get("not_measured"):
        # more than half of its inputs raised: no score, no regression test
        metadata["not_measured"] = dg.MetadataValue.text(str(point["combined"]["not_measured"]))
    if points is not None:
        # sized for the metadata panel; the full chart is in the lake
        metadata["chart"] = dg.MetadataValue.md(
            markdown_image(f"{repo} cohort series", render_series_panel(points, repo, branch))
        )
    return metadata


def _check_metadata(verdict: series.RegressionCheck) -> dict[str, dg.MetadataValue]:
    metadata: dict[str, dg.MetadataValue] = {"regressed_evals": dg.MetadataValue.int(len(verdict.findings))}
    if verdict.findings:
        metadata["regressions"] = dg.MetadataValue.json(verdict.findings)
        first = verdict.findings[0]
        metadata["cohort"] = dg.MetadataValue.text(str(first["cohort"]))
        metadata["eval"] = dg.MetadataValue.text(str(first["eval"]))
        if first["delta"] is not None:
            metadata["delta"] = dg.MetadataValue.float(float(first["delta"]))
    return metadata


@dg.asset_check(
    asset=cohort_series,
    name=NO_REGRESSION_CHECK,
    partitions_def=main_commits_partitions,
    description="Fails (red) on a main commit where a cohort's eval really dropped against the previous point: "
    "the cohort, the eval and Δ with its anytime-valid interval. A backfill evaluates it as each point lands; "
    "run on its own, it reads the partition's saved point.",
)
def no_cohort_regression(context: dg.AssetCheckExecutionContext, lake: LakeResource) -> dg.AssetCheckResult:
    repo, sha = parse_commit_key(context.partition_key)
    point = series.load_point(lake.open(), repo, sha)
    if point is None:
        raise dg.Failure(f"{context.partition_key}: no point in the lake; materialize cohort_series for it first")
    verdict = series.regression_check(point)
    return dg.AssetCheckResult(
        passed=verdict.passed,
        severity=_SEVERITY[verdict.severity],
        description=verdict.description,
        metadata=_check_metadata(verdict),
    )


def _save_chart(the_lake: Lake, repo: str, branch: str, points: list[dict]) -> dict[str, bytes]:
    from evalrunner_assets.report.series_chart import render_series_chart

    chart = render_series_chart(points, repo, branch)
    for ext, data in chart.items():
        the_lake.write_bytes(LAYOUT.series_chart(repo, branch, ext), data)
    return chart


def _post_flag(context: dg.AssetExecutionContext, github: GitHubResource, point: dict) -> None:
    """A failing check run on the main commit where a cohort dropped."""
    from resources.github import GitHubError

    title = "cohort series: " + ", ".join(point.get("flagged_tasks") or []) + " dropped"
    summary = render_series_summary(point)
    try:
        client = github.get_client()
        run_id = client.start_check_run(point["repo"], point["commit"], title=title, summary=summary)
        client.update_check_run(point["repo"], run_id, "completed", "failure", title=title, summary=summary)
    except GitHubError as exc:
        context.log.error(f"posting the flag on {point['commit'][:12]} to GitHub failed: {exc}")


SERIES_ASSETS = [cohort_series]
SERIES_CHECKS = [no_cohort_regression]
