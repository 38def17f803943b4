"""``evalrunner backfill`` (measure a branch's history as a cohort series) and ``evalrunner
series register`` (make its commits known as partitions, measuring nothing)."""

from __future__ import annotations

import argparse
import os
import sys

from evalrunner_assets import home
from evalrunner_assets.cli.common import check_repo_id, repo_id_of
from evalrunner_assets.cli.options import (
    Add,
    add_backend,
    add_cap,
    add_commit_selection,
    add_epochs,
    add_seed,
    add_workers,
    half_width,
    sandbox_override,
)


def cmd_backfill(args: argparse.Namespace) -> int:
    from evalrunner_assets.driver.backfill import run_backfill
    from evalrunner_assets.pipeline import series
    from evalrunner_assets.pipeline.series_progress import ProgressDisplay, SeriesProgress
    from evalrunner_assets.report.series_markdown import render_point_table
    from lake import LAYOUT, open_lake

    repo_id = repo_id_of(args.repo, args.repo_id)
    settings = series.SeriesSettings(
        model=args.model or series.DEFAULT_MODEL,
        model_override=args.model is not None,
        seed=args.seed,
        epochs=args.epochs,
        half_width=args.half_width,
        cap=args.cap,
    )
    resources = None
    sandbox = sandbox_override(args)
    if sandbox is not None:
        from resources import default_resources

        resources = default_resources(sandbox=sandbox)
    print(
        f"backfilling the cohort series of {repo_id} {args.branch} (±{args.half_width:g} or "
        f"{args.cap} inputs per eval and point)",
        flush=True,
    )
    # A duplicate of stdout: while the Dagster run executes, its compute-log capture redirects
    # file descriptor 1, and the progress line would land in the run's log instead.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    display = ProgressDisplay(SeriesProgress(0, 0), out, tty=sys.stdout.isatty())
    try:
        result = run_backfill(
            repo_id,
            args.repo,
            branch=args.branch,
            settings=settings,
            since=args.since,
            last=args.last,
            every=args.every,
            resources=resources,
            progress=display,
        )
    finally:
        display.finish()
        out.close()
    print(
        f"{len(result.commits)} commit(s), {result.measured} measured now, "
        f"{len(result.commits) - result.measured} already measured; {result.runs} Dagster run(s)"
    )
    print()
    print(render_point_table(result.points))
    if result.points:
        print("latest: " + " · ".join(series.reading(result.points[-1])))
    the_lake = open_lake(home.lake_root())
    print(f"chart: {the_lake.url(LAYOUT.series_chart(repo_id, args.branch, 'png'))}")
    print('SQL  : evalrunner sql "select * from cohort_series"')
    return 0


def cmd_series_register(args: argparse.Namespace) -> int:
    from evalrunner_assets.driver.backfill import register_commits

    repo_id = repo_id_of(args.repo, args.repo_id)
    check_repo_id(repo_id, args.repo)
    commits = register_commits(
        repo_id, args.repo, branch=args.branch, since=args.since, last=args.last, every=args.every
    )
    print(
        f"{len(commits)} commit(s) of {repo_id} {args.branch} are main_commits partitions "
        f"({commits[0].sha[:7]} … {commits[-1].sha[:7]}), none measured: select a range of the "
        "cohort_series asset's partitions in the Dagster UI (`evalrunner serve`) and backfill it, "
        "or run `evalrunner backfill` with the same selection"
    )
    return 0


def add_parsers(add: Add) -> None:
    p = add("backfill", help="measure a branch's history as a cohort series (one point per commit)")
    add_commit_selection(p)
    p.add_argument(
        "--model",
        default=None,
        help="Inspect model every point runs (default: the one each commit's agent config names, else "
        "simagent/support-agent)",
    )
    add_seed(p)
    add_epochs(p)
    p.add_argument(
        "--half-width",
        type=half_width,
        default=0.05,
        help="stop sampling an eval once its interval is within ± this (default: %(default)s)",
    )
    add_cap(p, minimum=1, help="most inputs per eval and point (default: %(default)s)")
    add_workers(p)
    add_backend(p)
    p.set_defaults(func=cmd_backfill)

    p = add("series", help="the cohort series' commits: register a branch's history without measuring it")
    series_sub = p.add_subparsers(dest="series_command", required=True)
    q = series_sub.add_parser(
        "register",
        help="make a branch's first-parent commits known as main_commits partitions, measuring nothing",
        description="Register the chosen commits as partitions of cohort_series (oldest first) so a range "
        "can be selected and backfilled from the Dagster UI; nothing runs.",
    )
    add_commit_selection(q)
    q.set_defaults(func=cmd_series_register)
