"""The PR sensor: GitHub deliveries from the durable inbox → comparisons to run.

A pull_request delivery opens a comparison for its head (run key ``owner/repo#pr@sha``: a
force-push is a new comparison, a redelivery is not); a push to the default branch learns that
commit; ``/eval more N`` raises the allowance of the PR's latest comparison, which the sampling
sensor then picks up.
"""


import os
from datetime import datetime, timezone

import dagster as dg

from evalrunner_assets.jobs import comparison_job, eval_manifest_job
from evalrunner_assets.pipeline.keys import commit_key
from evalrunner_assets.pipeline.spec import (
    ComparisonRequest,
    latest_request,
    open_comparison,
    save_request,
)
from evalrunner_assets.pipeline.windows import retire_failures
from lake import LAYOUT
from resources import GitHubResource, LakeResource, RepoResource
from sensors.inbox import EvaluatePR, EvaluatePush, MoreSamples, intent_for, read_inbox

GIT_BASE_URL = os.environ.get("EVALRUNNER_GIT_BASE_URL", "https://github.com")


def _ensure_source(the_lake, repos: RepoResource, repo: str) -> None:
    # A repository registered before (e.g. a local mirror in tests or air-gapped setups) keeps
    # its source; otherwise it is cloned from the Git host.
    if not the_lake.exists(LAYOUT.repo_source(repo)):
        repos.register(the_lake, repo, f"{GIT_BASE_URL.rstrip('/')}/{repo}.git")


@dg.sensor(
    jobs=[comparison_job, eval_manifest_job],
    minimum_interval_seconds=10,
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def pr_sensor(
    context: dg.SensorEvaluationContext, lake: LakeResource, repos: RepoResource, github: GitHubResource
) -> dg.SensorResult:
    """Reads the webhook inbox past its cursor and starts the work each delivery asks for."""
    the_lake = lake.open()
    entries, cursor = read_inbox(the_lake, context.cursor, limit=200)
    runs: list[dg.RunRequest] = []
    commits: set[str] = set()
    comparisons: set[str] = set()
    for entry in entries:
        if entry.error or entry.record is None:
            context.log.warning(f"inbox entry {entry.name} is unreadable: {entry.error}")
            continue
        intent = intent_for(entry.record)
        if isinstance(intent, EvaluatePR):
            _ensure_source(the_lake, repos, intent.repo)
            changed: tuple[str, ...] = ()
            if github.is_configured():
                try:
                    changed = tuple(github.get_client().changed_files(intent.repo, intent.pr, cap=300))
                except Exception as exc:  # reported, never fatal to the sensor
                    context.log.warning(f"changed files of {intent.repo}#{intent.pr} unavailable: {exc}")
            request = open_comparison(the_lake, ComparisonRequest(
                repo=intent.repo, source="", pr=str(intent.pr), base_sha=intent.base_sha,
                head_sha=intent.head_sha, base_ref=intent.base_ref, changed_files=changed,
                affinity="order", requested_at=datetime.now(timezone.utc).isoformat(),
            ))
            # A new evaluation retries windows of these commits that failed on infrastructure.
            retire_failures(the_lake, request.repo, (request.base_sha, request.head_sha))
            commits |= {commit_key(request.repo, request.base_sha), commit_key(request.repo, request.head_sha)}
            comparisons.add(request.key)
            runs.append(dg.RunRequest(run_key=intent.run_key, job_name=comparison_job.name,
                                      partition_key=request.key))
        elif isinstance(intent, EvaluatePush):
            _ensure_source(the_lake, repos, intent.repo)
            key = commit_key(intent.repo, intent.sha)
            commits.add(key)
            runs.append(dg.RunRequest(run_key=f"push:{key}", job_name=eval_manifest_job.name, partition_key=key))
        elif isinstance(intent, MoreSamples):
            latest = latest_request(the_lake, intent.repo, str(intent.pr))
            if latest is None:
                context.log.warning(f"/eval more on {intent.repo}#{intent.pr}: no comparison to extend")
                continue
            save_request(the_lake, latest.with_extra_samples(intent.n))
            retire_failures(the_lake, latest.repo, (latest.base_sha, latest.head_sha))
            context.log.info(f"{latest.key}: allowance raised by {intent.n} samples per task")
    partition_requests = []
    if commits:
        partition_requests.append(dg.AddDynamicPartitionsRequest("commits", sorted(commits)))
    if comparisons:
        partition_requests.append(dg.AddDynamicPartitionsRequest("comparisons", sorted(comparisons)))
    return dg.SensorResult(
        run_requests=runs, dynamic_partitions_requests=partition_requests, cursor=cursor.to_json()
    )
