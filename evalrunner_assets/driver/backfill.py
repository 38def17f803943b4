"""`evalrunner backfill`: measure a repository's main-branch history as a cohort series.

The command registers the chosen commits as ``main_commits`` partitions of the persistent local
instance (oldest first) and materializes ``cohort_series`` over them through the defined
``cohort_series_job`` as one ranged run — the same asset body a backfill launched from the
Dagster UI runs (there as Dagster's ``__ASSET_JOB``), so the UI shows it, can re-execute it, and
a second backfill of the same range measures nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg

from evalrunner_assets.errors import InputError
from evalrunner_assets.partitions import MAIN_COMMITS, add_partitions, trim_main_commits
from evalrunner_assets.pipeline import series, series_progress
from evalrunner_assets.pipeline.keys import commit_key

# Dagster's run tags for a partition range (what a single-run backfill launched from the UI
# sets); spelled out because the constants live in a private module.
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"
PARTITIONS = MAIN_COMMITS


class BackfillError(InputError, ValueError):
    """The backfill was asked for something it cannot do; the message names the input."""


@dataclass
class BackfillResult:
    repo: str
    branch: str
    commits: list[series.MainCommit]
    points: list[dict[str, Any]]
    runs: int  # Dagster runs made
    measured: int  # points measured by this backfill (the rest were already in the lake)


def register_commits(
    repo: str,
    source: str,
    *,
    branch: str = "main",
    since: str | None = None,
    last: int | None = None,
    every: int | None = None,
    instance: dg.DagsterInstance | None = None,
    resources: dict[str, Any] | None = None,
) -> list[series.MainCommit]:
    """Make the chosen commits of ``branch``'s first-parent history known as ``main_commits``
    partitions (oldest first) without measuring anything, so a range can be selected and
    backfilled from the UI. Returns the commits, oldest first."""
    from evalrunner_assets.assets.recording import local_instance
    from resources import default_resources

    resources = resources or default_resources()
    the_lake = resources["lake"].open()
    resources["repos"].register(the_lake, repo, source)
    chosen = _chosen(resources, the_lake, repo, branch, since=since, last=last, every=every)
    instance = instance or local_instance()
    keys = [commit_key(repo, c.sha) for c in chosen]
    trim_main_commits(instance, keys)
    add_partitions(instance, PARTITIONS, keys)
    return chosen


def _chosen(
    resources: dict[str, Any],
    the_lake: Any,
    repo: str,
    branch: str,
    *,
    since: str | None,
    last: int | None,
    every: int | None,
) -> list[series.MainCommit]:
    src = resources["repos"].source(the_lake, repo)
    src.update()
    history = series.history_of(src.first_parent_history(branch))
    chosen = series.select_commits(history, since=since, last=last, every=every)
    if not chosen:
        raise BackfillError(f"no commit of {repo} {branch} matches the selection")
    return chosen


def run_backfill(
    repo: str,
    source: str,
    *,
    branch: str = "main",
    settings: series.SeriesSettings | None = None,
    since: str | None = None,
    last: int | None = None,
    every: int | None = None,
    instance: dg.DagsterInstance | None = None,
    resources: dict[str, Any] | None = None,
    progress: series_progress.ProgressDisplay | None = None,
) -> BackfillResult:
    """Measure the chosen commits through ``cohort_series_job`` (see the module); ``progress``
    is told the plan, then every window and point as it lands."""
    from evalrunner_assets.assets.recording import local_instance
    from evalrunner_assets.definitions import defs
    from resources import default_resources

    resources = resources or default_resources()
    the_lake = resources["lake"].open()
    resources["repos"].register(the_lake, repo, source)
    settings = settings or series.SeriesSettings()
    series.save_settings(the_lake, repo, branch, settings)
    chosen = _chosen(resources, the_lake, repo, branch, since=since, last=last, every=every)
    before = {
        c.sha
        for c in chosen
        if series.point_matches(series.load_point(the_lake, repo, c.sha), settings, *_runtime(resources))
    }
    instance = instance or local_instance()
    keys = [commit_key(repo, c.sha) for c in chosen]
    trim_main_commits(instance, keys)
    add_partitions(instance, PARTITIONS, keys)
    job = defs.resolve_job_def("cohort_series_job")
    runs = 0
    with contextlib.ExitStack() as stack:
        if progress is not None:
            progress.plan(len(chosen), len(chosen) - len(before))
            stack.enter_context(series_progress.watching(progress))
        for start, end in _ranges(instance.get_dynamic_partitions(PARTITIONS), keys):
            runs += 1
            # raise_on_error: the asset's own exception comes back (the run is still recorded
            # as failed in the instance), so the command line can name the real cause.
            job.execute_in_process(
                instance=instance,
                resources=resources,
                raise_on_error=True,
                tags={RANGE_START_TAG: start, RANGE_END_TAG: end, "evalrunner/backfill": repo},
                run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}},
            )
    points = [p for c in chosen if (p := series.load_point(the_lake, repo, c.sha)) is not None]
    return BackfillResult(
        repo=repo,
        branch=branch,
        commits=chosen,
        points=points,
        runs=runs,
        measured=len([c for c in chosen if c.sha not in before]),
    )


def _runtime(resources: dict[str, Any]) -> tuple[str, str]:
    backend = resources["sandbox"].backend()
    return backend.name, backend.runtime_digest()


def _ranges(order: Sequence[str], keys: Sequence[str]) -> list[tuple[str, str]]:
    """Partition ranges covering ``keys`` (oldest first). One range when the instance lists them
    in that order (the usual case: a backfill adds its commits oldest first); otherwise one run
    per commit, oldest first, so each point is still flagged against the one before it."""
    position = {k: i for i, k in enumerate(order)}
    ordered = [position[k] for k in keys]
    if ordered == sorted(ordered):
        return [(keys[0], keys[-1])]
    return [(k, k) for k in keys]
