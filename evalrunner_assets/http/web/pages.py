"""What the web pages show, read from the lake: plain Python, no Dagster, no HTTP.

Comparison documents (``comparisons/<repo>/<pr>/<head>.json``) give the pull-request pages;
the ``samples``, ``events`` and ``annotations`` views give the trajectory pages; the series
points the cohort pages; the candidates' frontier and measurements the continuum and fine-tune
pages.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from evalrunner_assets.documents.codec import parse_document
from evalrunner_assets.documents.comparison import ComparisonDocument
from evalrunner_assets.errors import InputError
from evalrunner_assets.github.inbox import MAX_PR_NUMBER, web_more_samples_record, write_delivery
from evalrunner_assets.mining.annotated_logs import task_notes
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


def more_samples_pr(doc: ComparisonDocument) -> int | None:
    """The GitHub PR number a comparison can get more samples for from its page, or None: only
    PR comparisons are extended there (the sensors run them); a comparison named by
    ``evalrunner compare --pr NAME`` gets more by running that command again with a higher ``--cap``."""
    pr = str(doc.pr)
    return int(pr) if pr.isascii() and pr.isdigit() and 0 < int(pr) <= MAX_PR_NUMBER else None


class StaleHead(InputError):
    """More samples were asked for on a head the PR has moved on from."""


def ask_for_more_samples(lake: Lake, doc: ComparisonDocument, n: int) -> str:
    """Queue "N more samples per task" for ``doc``'s PR in the webhook inbox, as ``/eval more N``
    would, and return the record's id. The PR sensor raises the allowance of the PR's latest
    comparison, so asking from an older head's page is refused (``StaleHead``) rather than
    extending a head nobody is looking at."""
    from evalrunner_assets.pipeline.spec import latest_request

    pr = more_samples_pr(doc)
    if pr is None:
        raise InputError(
            f"{doc.repo} {doc.pr!r} is not a pull request: "
            "run its `evalrunner compare` again with a higher --cap for more samples"
        )
    latest = latest_request(lake, doc.repo, str(doc.pr))
    if latest is None:
        raise InputError(f"{doc.repo}#{pr} has no comparison request in the lake to extend")
    if latest.head_sha != doc.head_sha:
        raise StaleHead(
            f"{doc.repo}#{pr} has moved on to {latest.head_sha[:7]}; ask for more samples on that head's page"
        )
    record = web_more_samples_record(doc.repo, pr, n)
    write_delivery(lake, record)
    return record.delivery_id


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
    annotated: bool = False  # the log's annotated copy (LAYOUT.annotated_log) carries its notes

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
    noted = {(n["batch"], str(n["sample_id"]), int(n["epoch"])) for n in task_notes(lake, repo, commit, task)}
    copied = {
        b
        for b, raw in raw_logs.items()
        if raw and any(k[0] == b for k in noted) and lake.exists(LAYOUT.annotated_log(raw))
    }
    found = []
    for row in rows:
        batch = row.pop("batch")
        annotated = batch in copied and (batch, str(row["sample_id"]), int(row["epoch"])) in noted
        found.append(TrajectoryRow(**row, raw_log=raw_logs.get(batch), annotated=annotated))
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


def _json_document(lake: Lake, rel: str) -> dict[str, Any]:
    from evalrunner_assets.documents.codec import DocumentError

    try:
        doc = json.loads(lake.read_bytes(rel))
    except json.JSONDecodeError as exc:
        raise DocumentError(f"{lake.url(rel)}: not valid JSON: {exc}", where=lake.url(rel)) from exc
    if not isinstance(doc, dict):
        raise DocumentError(f"{lake.url(rel)}: not a JSON object", where=lake.url(rel))
    return doc


# -- continuum: candidates on the cost/score frontier -------------------------------------------------


@dataclass(frozen=True)
class FrontierSummary:
    repo: str
    reference: str | None
    candidates: int
    on_frontier: int
    promoted: str | None
    decided_at: str


@dataclass(frozen=True)
class CandidatePoint:
    """One measured candidate: its suite score and interval, cost, place on the frontier and
    what the promotion gate said of it (None for the reference, which the gate does not judge)."""

    candidate: str
    model: str
    is_reference: bool
    score: float | None
    lo: float | None
    hi: float | None
    inputs: int
    cost_per_sample: float | None
    p50_latency_s: float | None
    status: str  # frontier, dominated, uncertain, cost unknown
    versus: str | None  # who dominates it, or who it could not be told apart from
    passed_gate: bool | None
    gate_reasons: list[str]


@dataclass(frozen=True)
class FrontierStep:
    lower: str
    upper: str
    score_gain: float
    paired_delta: float | None
    lo: float | None
    hi: float | None
    label: str | None
    extra_cost_per_sample: float
    cost_ratio: float | None


@dataclass(frozen=True)
class Continuum:
    repo: str
    reference: str | None
    points: list[CandidatePoint]
    steps: list[FrontierStep]
    promoted: str | None
    reasons: list[str]
    decided_at: str
    alpha: float | None


def frontier_list(lake: Lake) -> list[FrontierSummary]:
    """Every repository whose candidates have a frontier, with its promotion decision."""
    out = []
    for rel in sorted(lake.glob(LAYOUT.every_frontier_glob())):
        c = continuum(lake, LAYOUT.candidates_repo(rel))
        if c is None:
            continue
        on = sum(1 for p in c.points if p.status == "frontier")
        out.append(FrontierSummary(c.repo, c.reference, len(c.points), on, c.promoted, c.decided_at))
    return out


def continuum_rows(lake: Lake, repo: str) -> list[dict[str, Any]]:
    """The frontier document's rows as ``sql/continuum_frontier.sql`` gave them (the chart's input)."""
    return list(_json_document(lake, LAYOUT.continuum_frontier(repo, "json")).get("rows") or [])


def continuum(lake: Lake, repo: str) -> Continuum | None:
    """``repo``'s frontier document (``candidates/<repo>/frontier/frontier.json``) as the page
    shows it, or None when none is built."""
    rel = LAYOUT.continuum_frontier(repo, "json")
    if not lake.exists(rel):
        return None
    doc = _json_document(lake, rel)
    promotion = doc.get("promotion") or {}
    verdicts = promotion.get("candidates") or {}
    points = []
    for r in doc.get("rows") or []:
        verdict = verdicts.get(r["candidate"])
        points.append(
            CandidatePoint(
                candidate=r["candidate"],
                model=r.get("model") or "",
                is_reference=bool(r.get("is_reference")),
                score=r.get("score"),
                lo=r.get("lo"),
                hi=r.get("hi"),
                inputs=int(r.get("inputs") or 0),
                cost_per_sample=r.get("cost_per_sample"),
                p50_latency_s=r.get("p50_latency_s"),
                status=r.get("status") or "",
                versus=r.get("dominated_by") or r.get("uncertain_against"),
                passed_gate=None if verdict is None else bool(verdict.get("passed")),
                gate_reasons=list((verdict or {}).get("reasons") or []),
            )
        )
    steps = []
    for s in doc.get("steps") or []:
        lo, hi = (s.get("paired_interval") or [None, None])[:2]
        steps.append(
            FrontierStep(
                s["from"],
                s["to"],
                float(s.get("score_gain") or 0.0),
                s.get("paired_delta"),
                lo,
                hi,
                s.get("paired_label"),
                float(s.get("extra_cost_per_sample") or 0.0),
                s.get("cost_ratio"),
            )  # fmt: skip
        )
    settings = promotion.get("settings") or {}
    return Continuum(
        repo=repo,
        reference=doc.get("reference") or promotion.get("reference"),
        points=points,
        steps=steps,
        promoted=promotion.get("promoted"),
        reasons=list(promotion.get("reasons") or []),
        decided_at=str(promotion.get("decided_at") or ""),
        alpha=settings.get("alpha"),
    )


# -- fine-tunes ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FineTuneEval:
    """One eval (or the suite) of a fine-tune against the reference: scores with intervals,
    the paired difference with its interval and label, cost per sample of both."""

    name: str
    current: float | None
    current_lo: float | None
    current_hi: float | None
    tuned: float | None
    tuned_lo: float | None
    tuned_hi: float | None
    delta: float | None
    lo: float | None
    hi: float | None
    label: str | None
    cost_per_sample: float | None
    current_cost_per_sample: float | None


@dataclass(frozen=True)
class FineTuneView:
    repo: str
    name: str
    model: str
    base_model: str
    candidate: str
    reference: str | None
    registered_at: str
    training_rows: int | None
    training_digest: str
    training_cost_usd: float | None
    evals: list[FineTuneEval]
    passed_gate: bool | None
    gate_reasons: list[str]
    issue_url: str | None
    activation_url: str | None  # the activation PR, once opened
    activation_number: int | None
    activation_branch: str


def _mean_interval(part: Any) -> tuple[float | None, float | None, float | None]:
    if not part:
        return None, None, None
    iv = part.get("interval") or [None, None]
    return part.get("mean"), iv[0], iv[1]


def finetunes(lake: Lake) -> list[FineTuneView]:
    """Every registered fine-tune with its measurement against the reference (from the
    candidates' measurements, the same numbers as its notification) and its activation PR."""
    from evalrunner_assets.pipeline import candidates as cands
    from evalrunner_assets.pipeline import finetune as ft

    out = []
    measured: dict[str, dict[str, dict[str, Any]]] = {}
    promotions: dict[str, dict[str, Any]] = {}
    for (repo, _), record in ft.load_finetunes(lake).items():
        if repo not in measured:
            measured[repo] = cands.load_measurements(lake, repo)
            rel = LAYOUT.promotion(repo)
            promotions[repo] = _json_document(lake, rel) if lake.exists(rel) else {}
        docs = measured[repo]
        reference = (record.measurement or {}).get("reference")
        current, tuned = docs.get(reference or ""), docs.get(record.candidate)
        evals = []
        if tuned is not None:
            flags = (tuned.get("vs_reference") or {}).get("tasks") or {}
            tasks = sorted(set(tuned["tasks"]) | set((current or {}).get("tasks") or {}))
            for task in tasks:
                cur, new, flag = (
                    ((current or {}).get("tasks") or {}).get(task),
                    tuned["tasks"].get(task),
                    flags.get(task) or {},
                )
                evals.append(_finetune_eval(task, cur, new, flag.get("delta"), flag.get("interval"), flag.get("label")))
            pair = (record.measurement or {}).get("suite_pair") or {}
            evals.append(
                _finetune_eval(
                    "suite",
                    (current or {}).get("suite"),
                    tuned.get("suite"),
                    pair.get("delta"),
                    [pair.get("lo"), pair.get("hi")],
                    pair.get("label"),
                )  # fmt: skip
            )
        verdict = (promotions[repo].get("candidates") or {}).get(record.candidate)
        activation = record.activation or {}
        out.append(
            FineTuneView(
                repo=repo,
                name=record.name,
                model=record.model,
                base_model=record.base_model,
                candidate=record.candidate,
                reference=reference,
                registered_at=record.registered_at,
                training_rows=(record.training_set or {}).get("rows"),
                training_digest=str((record.training_set or {}).get("digest") or ""),
                training_cost_usd=record.training_cost_usd,
                evals=evals,
                passed_gate=None if verdict is None else bool(verdict.get("passed")),
                gate_reasons=list((verdict or {}).get("reasons") or []),
                issue_url=record.issue_url,
                activation_url=activation.get("url") or None,
                activation_number=activation.get("number"),
                activation_branch=ft.activation_branch(record.name),
            )
        )
    return out


def _finetune_eval(name: str, cur: Any, new: Any, delta: Any, interval: Any, label: Any) -> FineTuneEval:
    c, c_lo, c_hi = _mean_interval(cur)
    t, t_lo, t_hi = _mean_interval(new)
    lo, hi = (interval or [None, None])[:2]
    return FineTuneEval(
        name, c, c_lo, c_hi, t, t_lo, t_hi, delta, lo, hi, label,
        (new or {}).get("cost_per_sample"), (cur or {}).get("cost_per_sample"),
    )  # fmt: skip


# -- leaderboard: SWE task sets ------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskSetSummary:
    name: str
    description: str
    repo: str
    tasks: int


def task_sets(lake: Lake) -> list[TaskSetSummary]:
    """Every registered SWE task set."""
    from evalrunner_assets.swe import SweStore

    return sorted(
        (TaskSetSummary(t.name, t.description, t.repo, len(t.tasks)) for t in SweStore(lake).task_sets()),
        key=lambda t: t.name,
    )


def leaderboard(lake: Lake, task_set: str, reference: str | None = None) -> dict[str, Any]:
    """The task set's board as the run API's ``/v1/leaderboard`` gives it (one computation)."""
    from evalrunner_assets.swe import SweStore
    from evalrunner_assets.swe.leaderboard import leaderboard as board

    return board(SweStore(lake), task_set, reference)


# -- runs: the sandboxes running a comparison's windows now ------------------------------------------


@dataclass(frozen=True)
class LiveView:
    """The running comparison's sandboxes as its live record last said, and how long ago."""

    sandboxes: int
    per_task: dict[str, dict[str, int]]  # task -> arm -> sandboxes running its windows
    age_s: float
    stale: bool  # no word from the run for longer than a live run stays silent


def live(lake: Lake, doc: ComparisonDocument) -> LiveView | None:
    """None unless the document says the comparison is running and its engine wrote a record."""
    from evalrunner_assets.pipeline.live import STALE_AFTER_S, read_live

    if doc.status != "running":
        return None
    record = read_live(lake, doc.repo, doc.pr, doc.head_sha)
    if record is None or record.ended:
        return None
    per_task: dict[str, dict[str, int]] = {}
    for step in record.steps:
        arms = per_task.setdefault(step.task, {"head": 0, "base": 0})
        arms[step.arm] = arms.get(step.arm, 0) + 1
    age = max(0.0, record.age_s())
    return LiveView(len(record.steps), per_task, age, age > STALE_AFTER_S)


# -- bug report: a failure trace becomes an anonymised eval ---------------------------------------------

SCORER_KINDS = {
    "contains": "the final answer contains",
    "regex": "the final answer matches the regular expression",
    "tool": "the agent calls the tool",
    "rubric": "a model grades the answer against the rubric",
}
DEFAULT_GRADER = "openai/gpt-4o"


@dataclass(frozen=True)
class ReportForm:
    """The bug-report form's fields, checked: each bad one is an error naming it."""

    trace: str
    scorer_kind: str
    scorer_value: str
    cohort: str
    repo: str
    grader_model: str = DEFAULT_GRADER

    def hidden_fields(self) -> list[tuple[str, str]]:
        """The form again, for the submit step (the server keeps nothing between the two)."""
        return [
            ("trace", self.trace),
            ("scorer_kind", self.scorer_kind),
            ("scorer_value", self.scorer_value),
            ("cohort", self.cohort),
            ("repo", self.repo),
            ("grader_model", self.grader_model),
        ]


def report_form(fields: dict[str, list[str]]) -> ReportForm:
    from evalrunner_assets.errors import UserError
    from evalrunner_assets.wild import default_cohort
    from lake.layout import check_repo

    def one(name: str, default: str = "") -> str:
        return (fields.get(name) or [default])[0].strip() or default

    trace = (fields.get("trace") or [""])[0]
    if not trace.strip():
        raise UserError("trace: paste the failed conversation (chat JSONL or OpenTelemetry GenAI spans JSON)")
    kind = one("scorer_kind")
    if kind not in SCORER_KINDS:
        raise UserError(f"scorer_kind: {kind!r} is not one of {', '.join(SCORER_KINDS)}")
    value = one("scorer_value")
    if not value:
        raise UserError("scorer_value: say what should have happened (the text, pattern, tool or rubric)")
    repo = one("repo")
    try:
        check_repo(repo)
    except LakePathError as exc:
        raise UserError(f"repo: {exc}") from None
    return ReportForm(trace, kind, value, one("cohort", default_cohort()), repo, one("grader_model", DEFAULT_GRADER))


def report_submission(form: ReportForm) -> Any:
    """Read and redact the pasted trace in memory: the ``wild.Submission`` (nothing written)."""
    from evalrunner_assets.wild import Check, Rubric, prepare_traces, read_trace_text

    scorer = Rubric(form.scorer_value, form.grader_model) if form.scorer_kind == "rubric" else (
        Check(form.scorer_kind, form.scorer_value)
    )  # fmt: skip
    return prepare_traces(read_trace_text(form.trace, "pasted trace"), scorer=scorer, cohort=form.cohort)


def registered_repos(lake: Lake) -> list[str]:
    """Repositories the lake knows where to fetch from (the bug report's targets)."""
    found = []
    for rel in lake.glob(LAYOUT.repo_sources_glob()):
        try:
            repo = json.loads(lake.read_bytes(rel)).get("repo")
        except ValueError:
            continue
        if isinstance(repo, str) and LAYOUT.repo_source(repo) == rel:
            found.append(repo)
    return sorted(found)
