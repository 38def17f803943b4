"""What the web pages show, read from the lake: plain Python, no Dagster, no HTTP.

Comparison documents (``comparisons/<repo>/<pr>/<head>.json``) give the pull-request pages;
the ``samples``, ``events`` and ``annotations`` views give the trajectory pages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evalrunner_assets.documents.codec import parse_document
from evalrunner_assets.documents.comparison import ComparisonDocument
from lake import duck
from lake.integrity import task_records
from lake.layout import LAYOUT, LakePathError
from lake.storage import Lake

# A status colour per verdict and per task label (the palette's good / bad / warn / neutral /
# pending); verdicts are upper case, labels lower case.
_TONE = {
    "IMPROVED": "good",
    "REGRESSED": "bad",
    "BROKEN": "bad",
    "INCONCLUSIVE": "warn",
    "UNCHANGED": "neutral",
    "RUNNING": "pending",
    "CONTINUE": "pending",
}


def tone(verdict_or_label: object) -> str:
    return _TONE.get(str(verdict_or_label).upper(), "neutral")


@dataclass(frozen=True)
class ComparisonRow:
    repo: str
    pr: str
    head_sha: str
    base_sha: str
    head_ref: str
    verdict: str
    status: str
    samples: int
    tasks: int


def comparisons(lake: Lake) -> list[ComparisonRow]:
    """Every comparison document in the lake, newest head first within a PR."""
    rows = []
    for rel in lake.glob(LAYOUT.all_comparisons_glob()):
        try:
            LAYOUT.parse_comparison(rel)
        except LakePathError:  # an artifact beside a document: .request.json, .check.json, …
            continue
        doc = parse_document(ComparisonDocument, lake.read_bytes(rel), rel)
        rows.append(
            ComparisonRow(
                doc.repo,
                doc.pr,
                doc.head_sha,
                doc.base_sha,
                doc.head_ref,
                doc.verdict,
                doc.status,
                doc.samples_run,
                len(doc.tasks),
            )  # fmt: skip
        )
    return sorted(rows, key=lambda r: (r.repo, r.pr, r.head_sha))


def comparison(lake: Lake, repo: str, pr: str, head: str) -> ComparisonDocument:
    rel = LAYOUT.comparison(repo, pr, head)
    return parse_document(ComparisonDocument, lake.read_bytes(rel), rel)


@dataclass
class TrajectoryRow:
    sample_id: str
    epoch: int
    score: float | None
    error: str | None
    turns: int
    tool_calls: int
    total_tokens: int | None
    total_time_s: float | None
    raw_log: str | None = None  # the lake path of the Inspect log the sample is in

    @property
    def passed(self) -> bool:
        return self.error is None and self.score is not None and self.score >= 1.0


@dataclass
class EventRow:
    seq: int
    kind: str  # user, assistant, tool call, tool result, error, score
    text: str
    tool: str | None = None
    arguments: str | None = None
    error: str | None = None
    failing: bool = False  # the turn the trajectory went wrong at
    notes: list[str] = field(default_factory=list)


def _connect(lake: Lake, repo: str, commit: str, task: str) -> Any:
    records = task_records(lake, repo, commit, task)
    if not records:
        return None
    return duck.connect(lake, records=records, views=("samples_view", "events_view", "annotations"))


def trajectories(lake: Lake, repo: str, commit: str, task: str) -> list[TrajectoryRow]:
    records = task_records(lake, repo, commit, task)
    if not records:
        return []
    con = duck.connect(lake, records=records, views=("samples_view", "events_view"))
    try:
        rows = duck.query(con, "web_trajectory_list", {"repo": repo, "commit": commit, "task": task}).to_pylist()
    finally:
        con.close()
    raw_logs = {r.batch: r.raw_path for r in records}
    found = []
    for row in rows:
        batch = row.pop("batch")
        found.append(TrajectoryRow(**row, raw_log=raw_logs.get(batch)))
    return found


def trajectory(
    lake: Lake, repo: str, commit: str, task: str, sample_id: str, epoch: int, *, failed: bool = False
) -> list[EventRow]:
    """One trajectory's events as typed rows, the notes attached and, when it ``failed``, the
    failing turn marked: the first event with an error, else the first a note is on, else the
    final answer (or, with no model turn, the score)."""
    con = _connect(lake, repo, commit, task)
    if con is None:
        return []
    params = {"repo": repo, "commit": commit, "task": task, "sample_id": sample_id, "epoch": epoch}
    try:
        events = duck.query(con, "web_trajectory_events", params).to_pylist()
        notes = [(n["seq"], n["note"]) for n in duck.query(con, "web_trajectory_notes", params).to_pylist()]
    finally:
        con.close()
    rows = [_event_row(e) for e in events]
    by_seq: dict[int | None, list[str]] = {}
    for seq, note in notes:
        by_seq.setdefault(seq, []).append(note)
    for row in rows:
        row.notes = by_seq.get(row.seq, [])
    if failed:
        failing = next((r for r in rows if r.error), None) or next((r for r in rows if r.notes), None)
        if failing is None:
            failing = next((r for r in reversed(rows) if r.kind == "assistant"), None) or next(
                (r for r in reversed(rows) if r.kind == "score"), None
            )
        if failing is not None:
            failing.failing = True
    if rows and None in by_seq:
        rows[0].notes = [*by_seq[None], *rows[0].notes]
    return rows


def _event_row(e: dict[str, Any]) -> EventRow:
    kind = {
        "sample_init": "user",
        "model": "tool call" if e["tool_function"] else "assistant",
        "tool": "tool result",
        "error": "error",
        "score": "score",
    }.get(e["event"], e["event"])
    text = e["text"] or ""
    if e["text_truncated"]:
        text += " …"
    return EventRow(int(e["seq"]), kind, text, e["tool_function"], e["tool_arguments"], e["error"])


# -- "How many samples until we know?" ------------------------------------------------------------


@dataclass(frozen=True)
class BudgetTask:
    task: str
    label: str
    pairs: int
    pairs_limit: int
    decided_at: int | None
    more_pairs_needed: int | None
    hint: str | None
    lo: float | None
    hi: float | None
    looks: int  # windows the interval was looked at after

    @property
    def width(self) -> float | None:
        return None if self.lo is None or self.hi is None else self.hi - self.lo

    @property
    def share(self) -> float:
        """Pairs run as a share of the pairs the cap allows (the bar on the page)."""
        return 0.0 if self.pairs_limit <= 0 else min(1.0, self.pairs / self.pairs_limit)


@dataclass(frozen=True)
class Budget:
    """What sequential sampling spent against a fixed-n run of every input the cap allows, on
    both arms: samples from the document, dollars at the cost per sample it observed."""

    adaptive_samples: int
    fixed_samples: int
    adaptive_usd: float | None
    cost_per_sample_usd: float | None
    margin: float
    alpha: float | None
    tasks: list[BudgetTask]

    @property
    def fixed_usd(self) -> float | None:
        return None if self.cost_per_sample_usd is None else self.cost_per_sample_usd * self.fixed_samples

    @property
    def saved(self) -> float | None:
        """The share of the fixed-n samples sequential sampling did not run."""
        if self.fixed_samples <= 0:
            return None
        return max(0.0, 1.0 - self.adaptive_samples / self.fixed_samples)


def budget(doc: ComparisonDocument) -> Budget:
    spend = doc.spend_usd if doc.spend_known else None
    per_sample = None if spend is None or doc.samples_run <= 0 else spend / doc.samples_run
    tasks = []
    for name in doc.task_order or sorted(doc.tasks):
        t = doc.tasks[name]
        d = t.decision
        tasks.append(
            BudgetTask(
                name,
                d.label,
                d.pairs,
                t.pairs_limit,
                d.decided_at,
                d.more_pairs_needed,
                t.more_samples_hint,
                d.anytime_interval.lo,
                d.anytime_interval.hi,
                len(t.path),
            )  # fmt: skip
        )
    return Budget(
        adaptive_samples=doc.samples_run,
        fixed_samples=max(doc.samples_possible, doc.samples_run),
        adaptive_usd=spend,
        cost_per_sample_usd=per_sample,
        margin=doc.params.margin if doc.params else 0.0,
        alpha=doc.params.alpha if doc.params else None,
        tasks=tasks,
    )


# -- cohorts: the main-branch series -----------------------------------------------------------------


@dataclass(frozen=True)
class SeriesSummary:
    repo: str
    branch: str
    points: int
    flagged: int
    latest_commit: str
    latest_at: str


@dataclass(frozen=True)
class SeriesPointRow:
    position: int
    commit: str
    committed_at: str
    subject: str
    mean: float | None
    lo: float | None
    hi: float | None
    inputs: int
    flagged: bool
    flagged_tasks: list[str]
    cohorts: list[tuple[str, str]]  # (cohort, its status at this point)
    annotations: list[str]
    not_measured: str | None


def _all_points(lake: Lake) -> dict[str, list[dict[str, Any]]]:
    from evalrunner_assets.pipeline.series import load_series

    repos = sorted({LAYOUT.series_repo(rel) for rel in lake.glob(LAYOUT.every_series_points_glob())})
    return {repo: load_series(lake, repo) for repo in repos}


def series_list(lake: Lake) -> list[SeriesSummary]:
    """Every repository's series, one row per branch."""
    out = []
    for repo, points in _all_points(lake).items():
        for branch in sorted({p["branch"] for p in points}):
            mine = [p for p in points if p["branch"] == branch]
            out.append(
                SeriesSummary(
                    repo,
                    branch,
                    len(mine),
                    sum(1 for p in mine if p.get("flagged")),
                    mine[-1]["commit"],
                    mine[-1]["committed_at"],
                )  # fmt: skip
            )
    return out


def series_points(lake: Lake, repo: str, branch: str) -> list[dict[str, Any]]:
    from evalrunner_assets.pipeline.series import load_series

    LAYOUT.series_points_glob(repo)  # names a bad repository id
    return load_series(lake, repo, branch)


def series_rows(points: list[dict[str, Any]]) -> list[SeriesPointRow]:
    """The points newest first, each with its combined mean and interval, its cohorts' statuses
    and its notes (evals added or removed, the regression, not measured)."""
    from evalrunner_assets.report.series_markdown import not_measured_note

    rows = []
    for p in reversed(points):
        pool = p["combined"]
        lo, hi = (pool.get("interval") or [None, None])[:2]
        status = p.get("cohort_status") or {}
        rows.append(
            SeriesPointRow(
                position=p["position"],
                commit=p["commit"],
                committed_at=p["committed_at"],
                subject=p.get("subject") or "",
                mean=pool.get("mean"),
                lo=lo,
                hi=hi,
                inputs=pool.get("inputs") or 0,
                flagged=bool(p.get("flagged")),
                flagged_tasks=list(p.get("flagged_tasks") or []),
                cohorts=[(c, status.get(c) or "") for c in sorted(p["cohorts"])],
                annotations=[a["text"] for a in p.get("annotations") or []],
                not_measured=not_measured_note(pool),
            )
        )
    return rows


# -- runs: where a comparison stands ------------------------------------------------------------------


@dataclass(frozen=True)
class RunTask:
    task: str
    label: str
    windows_done: int  # windows landed on both arms
    windows_to_run: dict[str, int]  # per arm, windows planned next (queued or running)
    pairs: int
    pairs_limit: int
    samples: int  # both arms
    spend_usd: float | None
    failures: dict[str, str]  # per arm (head, base)

    @property
    def state(self) -> str:
        if self.failures:
            return "failed"
        return "running" if any(self.windows_to_run.values()) else "done"


def run_tasks(doc: ComparisonDocument) -> list[RunTask]:
    """Per compared task of a (running or ended) comparison: windows landed and still to run
    per arm, pairs of the cap, samples and spend so far, infrastructure failures."""
    to_run: dict[str, dict[str, int]] = {}
    for w in doc.next_windows:
        arms = to_run.setdefault(w.task, {"head": 0, "base": 0})
        arms[w.arm] = arms.get(w.arm, 0) + 1
    out = []
    for name in doc.task_order or sorted(doc.tasks):
        t = doc.tasks[name]
        costs = [t.head.cost_usd, t.base.cost_usd]
        out.append(
            RunTask(
                name,
                t.decision.label,
                t.windows,
                to_run.get(name, {"head": 0, "base": 0}),
                t.decision.pairs,
                t.pairs_limit,
                t.head.samples + t.base.samples,
                None if any(c is None for c in costs) else sum(c for c in costs if c is not None),
                {str(arm): cause for arm, cause in t.failures.items()},
            )  # fmt: skip
        )
    return out
