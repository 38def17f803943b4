"""The PR sensor: GitHub deliveries from the durable inbox → comparisons to run.

A pull_request delivery opens a comparison for its head (run key ``owner/repo#pr@sha``: a
force-push is a new comparison, a redelivery is not); a push to the default branch adds that
commit's point to the repository's cohort series (``main_commits`` partition, run key
``series:owner/repo@sha``); ``/eval more N`` raises the allowance of the PR's latest comparison, which the sampling
sensor then picks up.

A delivery the sensor cannot handle (unreadable, invalid, or anything raising while it is
handled) is moved to the dead-letter place ``inbox/github-dead/<delivery>.json`` with the reason,
logged on the tick and reported as an observation of the ``github_inbox`` asset; the cursor
moves past it, so one bad delivery never blocks the others. Every check runs before anything is
written, so an invalid delivery leaves no request behind.
"""

import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

import dagster as dg

from evalrunner_assets.assets.inbox import GITHUB_INBOX
from evalrunner_assets.github.inbox import (
    DEFAULT_RETAIN_S,
    EvaluatePR,
    EvaluatePush,
    InboxEntry,
    InboxError,
    MoreSamples,
    archive_passed,
    dead_letter,
    intent_for,
    prune_inbox,
    read_inbox,
)
from evalrunner_assets.github_settings import github_settings
from evalrunner_assets.jobs import cohort_series_job, comparison_job, comparison_run_request, eval_manifest_job
from evalrunner_assets.partitions import COMMITS, COMPARISONS, MAIN_COMMITS, comparison_commit_keys, trim_main_commits
from evalrunner_assets.pipeline import series
from evalrunner_assets.pipeline.keys import commit_key
from evalrunner_assets.pipeline.open_index import mark_open
from evalrunner_assets.pipeline.scheduler import sweep_orphaned_temp_files
from evalrunner_assets.pipeline.spec import (
    ComparisonRequest,
    latest_request,
    open_comparison,
    save_request,
)
from evalrunner_assets.pipeline.windows import retire_failures
from lake import LAYOUT, Lake
from resources import GitHubResource, LakeResource, RepoResource


def git_base_url() -> str:
    """The Git host a repository the sensor first hears about is cloned from
    (``$EVALRUNNER_GIT_BASE_URL``, default https://github.com), read when the sensor evaluates."""
    return github_settings().git_base_url


# The inbox keeps one claim per delivery for good, so walking it is not free: sweep it for dead
# writers' temp files on the first tick and then at most this often (the receiver sweeps on start).
SWEEP_INTERVAL_S = 600.0
_last_sweep: dict[str, float] = {}
# Moving a passed queue entry costs a read, a write and a delete: a backlog (an inbox from before
# entries were moved) drains over several ticks.
ARCHIVE_PER_TICK = 500
# Claims and done entries older than this are removed at the sweep interval (GitHub redelivers
# for a few days at most); at most PRUNE_PER_SWEEP per pass, so a large backlog drains gradually.
INBOX_RETAIN_DAYS_ENV = "EVALRUNNER_INBOX_RETAIN_DAYS"
PRUNE_PER_SWEEP = 2000


def inbox_retention_s() -> float:
    """Seconds claims and done entries are kept (``$EVALRUNNER_INBOX_RETAIN_DAYS``, default 14)."""
    raw = os.environ.get(INBOX_RETAIN_DAYS_ENV, "").strip()
    if not raw:
        return DEFAULT_RETAIN_S
    try:
        days = float(raw)
    except ValueError:
        days = -1.0
    if not days > 0:
        raise InboxError(f"{INBOX_RETAIN_DAYS_ENV}={raw!r}: expected a positive number of days")
    return days * 24 * 3600


def _ensure_source(the_lake: Lake, repos: RepoResource, repo: str) -> None:
    # A repository registered before (`evalrunner repos add`, a local mirror in tests or
    # air-gapped setups) keeps its source; otherwise it is cloned from the Git host.
    if not the_lake.exists(LAYOUT.repo_source(repo)):
        repos.register(the_lake, repo, f"{git_base_url().rstrip('/')}/{repo}.git")


@dataclass
class _Work:
    """What one tick asks Dagster for."""

    runs: list[dg.RunRequest] = field(default_factory=list)
    commits: set[str] = field(default_factory=set)
    comparisons: set[str] = field(default_factory=set)
    main_commits: list[str] = field(default_factory=list)  # in delivery order (first-parent order)
    events: list[dg.AssetObservation] = field(default_factory=list)


def _handle(
    context: dg.SensorEvaluationContext,
    the_lake: Lake,
    repos: RepoResource,
    github: GitHubResource,
    entry: InboxEntry,
    work: _Work,
) -> None:
    """Turn one inbox entry into work; raises for an entry that cannot be handled."""
    if entry.error or entry.record is None:
        raise InboxError(entry.error or f"{entry.name}: no record")
    intent = intent_for(entry.record)  # validates every field before anything is written
    if isinstance(intent, EvaluatePR):
        run_key = intent.run_key
        keys = {commit_key(intent.repo, intent.base_sha), commit_key(intent.repo, intent.head_sha)}
        _ensure_source(the_lake, repos, intent.repo)
        changed: tuple[str, ...] = ()
        if github.is_configured():
            try:
                changed = tuple(github.get_client().changed_files(intent.repo, intent.pr, cap=300))
            except Exception as exc:  # reported, never fatal to the sensor
                context.log.warning(f"changed files of {intent.repo}#{intent.pr} unavailable: {exc}")
        request = open_comparison(
            the_lake,
            ComparisonRequest.build(
                repo=intent.repo,
                source="",
                pr=str(intent.pr),
                base_sha=intent.base_sha,
                head_sha=intent.head_sha,
                base_ref=intent.base_ref,
                head_ref=intent.head_ref,
                changed_files=changed,
                affinity="order",
                requested_at=datetime.now(UTC).isoformat(),
            ),
        )
        # A new evaluation retries windows of these commits that failed on infrastructure.
        retire_failures(the_lake, request.repo, (request.base_sha, request.head_sha))
        work.commits |= keys
        work.comparisons.add(request.key)
        work.runs.append(comparison_run_request(request.key, run_key))
    elif isinstance(intent, EvaluatePush):
        # A push to the default branch is one more point of the repository's cohort series (the
        # point learns the commit itself). The first push fixes the series branch unless a
        # backfill already recorded its settings.
        key = commit_key(intent.repo, intent.sha)
        _ensure_source(the_lake, repos, intent.repo)
        if not the_lake.exists(LAYOUT.series_settings(intent.repo)):
            branch = intent.ref.removeprefix("refs/heads/") or "main"
            series.save_settings(the_lake, intent.repo, branch, series.SeriesSettings())
        work.main_commits.append(key)
        work.runs.append(dg.RunRequest(run_key=f"series:{key}", job_name=cohort_series_job.name, partition_key=key))
    elif isinstance(intent, MoreSamples):
        latest = latest_request(the_lake, intent.repo, str(intent.pr))
        if latest is None:
            context.log.warning(f"/eval more on {intent.repo}#{intent.pr}: no comparison to extend")
            return
        save_request(the_lake, latest.with_extra_samples(intent.n))
        # A decided comparison may have been retired: list it as open again, with its partitions.
        mark_open(the_lake, latest.repo, latest.pr, latest.head_sha)
        work.commits |= set(comparison_commit_keys(latest))
        work.comparisons.add(latest.key)
        retire_failures(the_lake, latest.repo, (latest.base_sha, latest.head_sha))
        context.log.info(f"{latest.key}: allowance raised by {intent.n} samples per task")


@dg.sensor(
    jobs=[comparison_job, eval_manifest_job, cohort_series_job],
    minimum_interval_seconds=5,
    description="Turns GitHub webhook deliveries (the lake's inbox) into work: a comparison_job run per PR "
    "head, a cohort_series_job run per push to the default branch, more samples for `/eval more`; "
    "deliveries it cannot handle become dead letters (github_inbox).",
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def pr_sensor(
    context: dg.SensorEvaluationContext, lake: LakeResource, repos: RepoResource, github: GitHubResource
) -> dg.SensorResult:
    """Reads the webhook inbox past its cursor and starts the work each delivery asks for."""
    the_lake = lake.open()
    root = os.path.abspath(the_lake.root) if the_lake.is_local else the_lake.root
    if time.monotonic() - _last_sweep.get(root, -SWEEP_INTERVAL_S) >= SWEEP_INTERVAL_S:
        _last_sweep[root] = time.monotonic()
        if the_lake.is_local:
            # A receiver killed mid-write leaves a temp file carrying its pid: remove it once it is dead.
            for path in sweep_orphaned_temp_files(root, [LAYOUT.inbox_root()]):
                context.log.info(f"removed {path}: its writer died before renaming it")
        pruned = prune_inbox(the_lake, retain_s=inbox_retention_s(), limit=PRUNE_PER_SWEEP)
        if pruned:
            context.log.info(f"inbox: removed {pruned} claim(s) and done entries past the retention")
    entries, cursor = read_inbox(the_lake, context.cursor, limit=200)
    # Entries the committed cursor has passed for good leave the queue, so the listing above
    # stays a window's worth of deliveries however many PRs came before.
    archive_passed(the_lake, context.cursor, limit=ARCHIVE_PER_TICK)
    work = _Work()
    for entry in entries:
        try:
            _handle(context, the_lake, repos, github, entry, work)
        except Exception as exc:  # one bad delivery must not stop the others
            path = dead_letter(the_lake, entry, exc)
            context.log.error(f"inbox entry {entry.name} moved to {path}: {type(exc).__name__}: {exc}")
            work.events.append(
                dg.AssetObservation(
                    asset_key=GITHUB_INBOX.key,
                    description="a delivery the PR sensor could not handle, moved to the dead-letter place",
                    metadata={
                        "delivery": dg.MetadataValue.text(entry.delivery_id),
                        "reason": dg.MetadataValue.text(f"{type(exc).__name__}: {exc}"[:2000]),
                        "dead_letter": dg.MetadataValue.path(the_lake.url(path)),
                    },
                )
            )
    partition_requests = []
    if work.commits:
        partition_requests.append(dg.AddDynamicPartitionsRequest(COMMITS, sorted(work.commits)))
    if work.main_commits:
        for key in trim_main_commits(context.instance, work.main_commits):
            context.log.info(f"main_commits: retired {key}, the oldest point (its series point stays in the lake)")
        partition_requests.append(dg.AddDynamicPartitionsRequest(MAIN_COMMITS, list(dict.fromkeys(work.main_commits))))
    if work.comparisons:
        partition_requests.append(dg.AddDynamicPartitionsRequest(COMPARISONS, sorted(work.comparisons)))
    return dg.SensorResult(
        run_requests=work.runs,
        dynamic_partitions_requests=partition_requests,
        cursor=cursor.to_json(),
        asset_events=work.events,
    )
