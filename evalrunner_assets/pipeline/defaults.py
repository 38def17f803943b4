"""What a ``task_samples`` materialization runs when it is given no run config (launched or
backfilled from the Dagster UI): its settings and windows, taken from the lake.

The comparison is the newest one that judges this commit (head or base) and compares this
task, open ones first; its request fixes model, seed and epochs (the model is the one the commit's
agent config names unless the request sets one: ``assess.run_settings``), and its assessment says which
windows of this task come next. A commit no comparison judges runs the default settings with the model
its agent config names, if any. With nothing planned, the first
window is asked for: it is reused when it has landed, so a materialization never runs a window
twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from evalrunner_assets.discovery import AgentModel
from evalrunner_assets.pipeline import assess as assess_mod
from evalrunner_assets.pipeline.keys import parse_comparison_key
from evalrunner_assets.pipeline.open_index import open_comparison_keys
from evalrunner_assets.pipeline.spec import DEFAULT_MODEL, ComparisonRequest, ComparisonRequestError, load_request
from lake import LAYOUT, Lake, Window
from lake.batch import RunSettings


@dataclass(frozen=True)
class SamplesDefaults:
    settings: RunSettings
    windows: list[Window]
    comparison: str  # the comparison they come from ('' when none judges the commit)
    why: str  # for the run's log
    budget_usd: float | None = None  # that comparison's model budget


def comparisons_of_commit(lake: Lake, repo: str, sha: str) -> list[ComparisonRequest]:
    """The comparisons of ``repo`` that judge ``sha``, open ones first, newest first."""
    open_keys = set(open_comparison_keys(lake))
    found = []
    for rel in lake.glob(LAYOUT.all_comparison_requests_glob(repo)):
        try:
            request = ComparisonRequest.from_json(lake.read_bytes(rel), lake.url(rel))
        except ComparisonRequestError:
            continue  # a bad request is reported where it is driven (the sampling sensor)
        if sha in (request.head_sha, request.base_sha):
            found.append(request)
    return sorted(found, key=lambda r: (r.key in open_keys, r.requested_at, r.head_sha), reverse=True)


def samples_defaults(
    lake: Lake,
    repo: str,
    sha: str,
    task: str,
    n_samples: int,
    *,
    comparison: str = "",
    backend_name: str,
    runtime_digest: str,
    agent: AgentModel | None = None,
) -> SamplesDefaults:
    """Settings and windows for (``sha``, ``task``, which lists ``n_samples`` samples): from
    ``comparison`` when given, else from the newest comparison judging the commit, else the
    defaults. ``agent``: the model the commit's agent config names (``CommitFacts.agent_model``)."""
    alone = RunSettings(model=agent.model, model_args=agent.model_args) if agent else RunSettings(model=DEFAULT_MODEL)
    if comparison:
        requests = [load_request(lake, *parse_comparison_key(comparison))]
    else:
        requests = comparisons_of_commit(lake, repo, sha)
    if not requests:
        return SamplesDefaults(
            alone,
            [assess_mod.window_bounds(0, n_samples)],
            "",
            "no comparison judges this commit: the default settings, first window",
        )
    for request in requests:
        assessment = assess_mod.assess(
            lake, request, backend_name=backend_name, runtime_digest=runtime_digest, detail=False
        )
        if task not in assessment.result.tasks and not comparison:
            continue  # this comparison does not compare the task (max_tasks, prune, new task)
        planned = [w.window for w in assessment.next_windows if w.commit == sha and w.task == task]
        if planned:
            return SamplesDefaults(
                assess_mod.run_settings(request, agent),
                planned,
                request.key,
                "the next windows it plans",
                request.budget_usd,
            )
        return SamplesDefaults(
            assess_mod.run_settings(request, agent),
            [assess_mod.window_bounds(0, min(n_samples, request.cap + request.extra_samples))],
            request.key,
            "it plans nothing more here: its first window (reused when landed)",
            request.budget_usd,
        )
    return SamplesDefaults(
        alone,
        [assess_mod.window_bounds(0, n_samples)],
        "",
        "no comparison of this commit compares the task: the default settings, first window",
    )
