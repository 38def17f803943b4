"""What the card's nouns hold, read from the lake: a (commit, task)'s sample scores and
trajectories, and the baselines a comparison judges its PR against.

``task_samples`` lands both tables; these summaries are what the ``sample_scores``,
``trajectories`` and ``baselines`` assets show of them (counts, previews, where the files are).
They read only committed batches (their records), so they can be materialized again at any time
and always describe what is in the lake.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evalrunner_assets.documents.comparison import ComparisonDocument
from evalrunner_assets.pipeline.spec import ComparisonRequest
from lake import LAYOUT, Lake, duck
from lake.integrity import task_records

PREVIEW_ROWS = 8


def _rows(table: Any) -> list[dict[str, Any]]:
    return list(table.to_pylist())


@dataclass(frozen=True)
class SampleScores:
    """One (commit, task)'s scored rows: one per sample × epoch."""

    repo: str
    commit: str
    task: str
    batches: int
    windows: list[str]
    rows: int
    errored_rows: int
    by_scorer: list[dict[str, Any]]  # scorer, rows, inputs, epochs, mean_score, scored_rows, …
    preview: list[dict[str, Any]]  # the first rows, in window and sample order
    tables_url: str  # where the Parquet files are

    @property
    def inputs(self) -> int:
        return max((s["inputs"] for s in self.by_scorer), default=0)

    @property
    def mean_score(self) -> float | None:
        """The mean over every scored row (all scorers)."""
        scored = sum(s["scored_rows"] for s in self.by_scorer)
        if not scored:
            return None
        return sum((s["mean_score"] or 0.0) * s["scored_rows"] for s in self.by_scorer) / scored


def sample_scores(lake: Lake, repo: str, commit: str, task: str) -> SampleScores:
    records = task_records(lake, repo, commit, task)
    by_scorer: list[dict[str, Any]] = []
    preview: list[dict[str, Any]] = []
    if records:
        params = {"repo": repo, "commit": commit, "task": task}
        con = duck.connect(lake, records=records, views=("samples_view",))
        try:
            by_scorer = _rows(duck.query(con, "sample_scores_by_scorer", params))
            preview = _rows(duck.query(con, "sample_scores_preview", {**params, "n": PREVIEW_ROWS}))
        finally:
            con.close()
    return SampleScores(
        repo=repo,
        commit=commit,
        task=task,
        batches=len(records),
        windows=[r.window for r in records],
        rows=sum(r.sample_rows for r in records),
        errored_rows=sum(r.errored_samples for r in records),
        by_scorer=by_scorer,
        preview=preview,
        tables_url=lake.url(LAYOUT.table_prefix("samples", repo, commit, task)),
    )


@dataclass(frozen=True)
class Trajectories:
    """One (commit, task)'s trajectories: the events of every sample × epoch, and their logs."""

    repo: str
    commit: str
    task: str
    batches: int
    events: int
    trajectories: int
    by_event: list[dict[str, Any]]  # event, events, trajectories, tool_calls_requested, errored
    tools: list[dict[str, Any]]  # tool_function, calls, failed_calls
    logs: list[str] = field(default_factory=list)  # the Inspect logs (lake URLs), in window order
    logs_url: str = ""  # their directory

    @property
    def tool_calls(self) -> int:
        return sum(t["calls"] for t in self.tools)


def trajectories(lake: Lake, repo: str, commit: str, task: str) -> Trajectories:
    records = task_records(lake, repo, commit, task)
    by_event: list[dict[str, Any]] = []
    tools: list[dict[str, Any]] = []
    if records:
        params = {"repo": repo, "commit": commit, "task": task}
        con = duck.connect(lake, records=records, views=("events_view",))
        try:
            by_event = _rows(duck.query(con, "trajectory_events", params))
            tools = _rows(duck.query(con, "trajectory_tools", params))
        finally:
            con.close()
    return Trajectories(
        repo=repo,
        commit=commit,
        task=task,
        batches=len(records),
        events=sum(r.event_rows for r in records),
        trajectories=max((e["trajectories"] for e in by_event), default=0),
        by_event=by_event,
        tools=tools,
        logs=[lake.url(r.raw_path) for r in records],
        logs_url=lake.url(LAYOUT.task_raw_prefix(repo, commit, task)),
    )


@dataclass(frozen=True)
class TaskBaseline:
    """The base side of one compared task: the batches the PR is judged against."""

    task: str
    batches: int
    samples: int
    reused: int  # batches landed before this comparison was requested (by an earlier one)
    landed: int  # batches landed for this comparison


@dataclass(frozen=True)
class Baselines:
    """The base commit's side of one comparison, and how much of it was reused."""

    comparison: str
    repo: str
    base_sha: str
    base_ref: str
    requested_at: str
    tasks: list[TaskBaseline]

    @property
    def batches(self) -> int:
        return sum(t.batches for t in self.tasks)

    @property
    def reused(self) -> int:
        return sum(t.reused for t in self.tasks)

    @property
    def samples(self) -> int:
        return sum(t.samples for t in self.tasks)


def baselines(lake: Lake, request: ComparisonRequest, document: ComparisonDocument) -> Baselines:
    """The base batches ``document`` used, per task. A batch counts as reused when its log was
    completed before ``request`` was made: another comparison on the same base (or an earlier
    run of this one) landed it, and this one did not run it again."""
    tasks = []
    for task, doc in document.ordered_tasks():
        wanted = set(doc.batches.get("base", []))
        records = [r for r in task_records(lake, request.repo, request.base_sha, task) if r.batch in wanted]
        reused = sum(
            1
            for r in records
            if request.requested_at and r.completed_at and _before(r.completed_at, request.requested_at)
        )
        tasks.append(
            TaskBaseline(
                task=task,
                batches=len(records),
                samples=sum(r.sample_rows for r in records),
                reused=reused,
                landed=len(records) - reused,
            )
        )
    return Baselines(
        comparison=request.key,
        repo=request.repo,
        base_sha=request.base_sha,
        base_ref=request.base_ref,
        requested_at=request.requested_at,
        tasks=tasks,
    )


def _before(a: str, b: str) -> bool:
    from datetime import datetime

    try:
        # Log times have whole seconds: a log completed in the second the request was made
        # counts as landed for it, not reused.
        return datetime.fromisoformat(a) < datetime.fromisoformat(b).replace(microsecond=0)
    except (ValueError, TypeError):  # unparsable, or one with a timezone and one without
        return False
