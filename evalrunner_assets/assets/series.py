"""The main-branch cohort series: one partition per main commit of a repository.

The asset body reads the repository's series settings from the lake (written by the first
``evalrunner backfill``; defaults otherwise), so a backfill launched from the UI over any range
of ``main_commits`` needs no run config. The measuring, reuse and flagging live in
``evalrunner_assets.pipeline.series`` (plain Python).
"""

from collections import defaultdict

import dagster as dg

from evalrunner_assets.assets.run_worker import record_run_worker
from evalrunner_assets.execution import RepoExport
from evalrunner_assets.partitions import main_commits_partitions
from evalrunner_assets.pipeline import series
from evalrunner_assets.pipeline.keys import parse_commit_key
from evalrunner_assets.report.panel import markdown_image
from evalrunner_assets.report.series_chart import render_series_panel
from evalrunner_assets.report.series_markdown import render_point_table, render_series_summary
from lake import LAYOUT
from resources import GitHubResource, LakeResource, RepoResource, SandboxResource

GROUP = "series"


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
)
def cohort_series(
    context: dg.AssetExecutionContext,
    lake: LakeResource,
    sandbox: SandboxResource,
    repos: RepoResource,
    github: GitHubResource,
) -> dg.MaterializeResult:
    """One partition is one commit on a repository's series branch (``owner/repo@sha``): per
    task the mean score with an anytime-valid interval, per cohort and for all tasks a pooled
    Wilson interval, and a paired comparison with the previous point that flags a cohort whose
    task really dropped. Cohorts added at a commit are annotated, never flagged."""
    record_run_worker(context)
    the_lake = lake.open()
    wanted: dict[str, set[str]] = defaultdict(set)
    for key in context.partition_keys:
        repo, sha = parse_commit_key(key)
        wanted[repo].add(sha)
    backend = sandbox.backend(context)
    backend.preflight()
    metadata: dict[str, dg.MetadataValue] = {}
    measured = reused = windows_run = 0
    flagged: list[str] = []
    not_measured: list[str] = []
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

        def on_point(point: dict, fresh: bool, repo: str = repo) -> None:
            context.log.info(
                f"{repo}@{point['commit'][:12]} ({'measured' if fresh else 'reused'}): "
                + "; ".join(series.reading(point))
            )

        def export_for(sha: str, repo: str = repo) -> RepoExport:
            return repos.export(the_lake, repo, sha)

        run = series.run_series(
            the_lake,
            backend,
            repo,
            export_for,
            history,
            chosen,
            settings,
            branch=branch,
            pool=sandbox.warm_pool(),
            workers=sandbox.worker_count(),
            on_point=on_point,
        )
        measured += len(run.measured)
        reused += len(run.reused)
        windows_run += run.windows_run
        for point in run.points:
            if point["combined"].get("not_measured"):
                not_measured.append(f"{repo}@{point['commit'][:12]}")
            if point.get("flagged"):
                flagged.append(f"{repo}@{point['commit'][:12]}")
                if point["commit"] in run.measured and github.is_configured():
                    _post_flag(context, github, point)
        points = series.load_series(the_lake, repo, branch)
        _save_chart(the_lake, repo, branch, points)
        # sized for the metadata panel; the full chart is in the lake
        metadata[f"{repo} chart"] = dg.MetadataValue.md(
            markdown_image(f"{repo} cohort series", render_series_panel(points, repo, branch))
        )
        metadata[f"{repo} chart_path"] = dg.MetadataValue.path(the_lake.url(LAYOUT.series_chart(repo, branch, "svg")))
        metadata[f"{repo} points"] = dg.MetadataValue.md(render_point_table(points))
        if run.points:
            metadata[f"{repo} latest"] = dg.MetadataValue.text(" | ".join(series.reading(run.points[-1])))
    metadata.update(
        {
            "points_measured": dg.MetadataValue.int(measured),
            "points_reused": dg.MetadataValue.int(reused),
            "windows_run": dg.MetadataValue.int(windows_run),
            "flagged": dg.MetadataValue.json(flagged),
            # more than half of their inputs raised: no score, no regression test
            "not_measured": dg.MetadataValue.json(not_measured),
        }
    )
    return dg.MaterializeResult(metadata=metadata)


def _save_chart(the_lake, repo: str, branch: str, points: list[dict]) -> dict[str, bytes]:
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
