"""Mining what the lake holds: a task's trajectories at a commit, or a comparison's regressions,
and the findings written back as ``miner/`` documents and ``annotations/`` notes.

The miner reads the lake and writes only under ``miner/`` and ``annotations/`` (the notes, and
the annotated copies of the raw logs for Inspect's viewer, ``annotated_logs``); each file is
written whole under its final name (``Lake.write_bytes``: a temporary name, then a rename or one
object), so a reader never sees half a set of notes.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from evalrunner_assets.documents.comparison import ComparisonDocument
from evalrunner_assets.errors import UserError
from evalrunner_assets.mining.annotated_logs import write_annotated_logs
from evalrunner_assets.mining.features import Trajectory
from evalrunner_assets.mining.miner import DEFAULT_FDR, Contrast, NothingToContrast, contrast
from lake import duck
from lake.integrity import task_records
from lake.layout import LAYOUT
from lake.schema import ANNOTATIONS_SCHEMA
from lake.storage import Lake

SOURCE = "trajectory-miner"
# A trajectory passes when its score reaches this (scores are in [0, 1]; partial credit fails).
DEFAULT_PASS_THRESHOLD = 1.0
# Notes are written for this many findings, best first: a note per sample per finding.
ANNOTATED_FINDINGS = 5


@dataclass
class Mined:
    """One mining run: what was contrasted, what was found, where it was written."""

    repo: str
    commit: str
    task: str
    base: str | None  # the comparison's base (head trajectories on regressed inputs vs the base's)
    contrast: Contrast
    findings_path: str = ""
    annotations_path: str = ""
    # The annotated copies of the task's raw logs, for Inspect's viewer (lake-relative paths).
    annotated_logs: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        c = self.contrast
        return {
            "repo": self.repo,
            "commit": self.commit,
            "task": self.task,
            "base": self.base,
            "mode": "comparison" if self.base else "task",
            "failing": c.failing,
            "passing": c.passing,
            "left_out": c.left_out,
            "features_tested": c.tested,
            "fdr": c.fdr,
            "findings": [f.to_json() for f in c.findings],
            "summary": c.summary,
        }


def trajectories(lake: Lake, repo: str, commit: str, task: str) -> list[Trajectory]:
    """Every trajectory the lake holds of ``task`` at ``commit`` (every committed batch)."""
    records = task_records(lake, repo, commit, task)
    if not records:
        return []
    con = duck.connect(lake, records=records, views=("samples_view", "events_view", "trajectory_features"))
    try:
        rows = duck.query(con, "trajectory_features_of", {"repo": repo, "commit": commit, "task": task}).to_pylist()
    finally:
        con.close()
    return [Trajectory.from_row(row) for row in rows]


def system_prompts(lake: Lake, repo: str, commit: str, task: str, samples: Sequence[str], limit: int = 3) -> list[str]:
    """The system messages the agent was given on up to ``limit`` of ``samples``, read from the
    task's raw Inspect logs in the lake (what the fixer uses to tell which skill was loaded)."""
    from inspect_ai.log import read_eval_log_samples

    wanted, found = set(samples), []
    for rel in sorted(lake.glob(f"{LAYOUT.task_raw_prefix(repo, commit, task)}/**/*.eval")):
        for sample in read_eval_log_samples(lake.url(rel), all_samples_required=False):
            if str(sample.id) not in wanted:
                continue
            text = "\n\n".join(m.text for m in sample.messages if m.role == "system")
            if text:
                found.append(text)
                wanted.discard(str(sample.id))
            if len(found) >= limit:
                return found
    return found


def _split(found: Sequence[Trajectory], threshold: float) -> tuple[list[Trajectory], list[Trajectory], int]:
    failing, passing, unknown = [], [], 0
    for t in found:
        outcome = t.passed(threshold)
        if outcome is None:
            unknown += 1
        elif outcome:
            passing.append(t)
        else:
            failing.append(t)
    return failing, passing, unknown


def mine_task(
    lake: Lake,
    repo: str,
    commit: str,
    task: str,
    *,
    fdr: float = DEFAULT_FDR,
    pass_threshold: float = DEFAULT_PASS_THRESHOLD,
    write: bool = True,
) -> Mined:
    """The patterns a task's failing trajectories at ``commit`` share and its passing ones lack."""
    found = trajectories(lake, repo, commit, task)
    failing, passing, unknown = _split(found, pass_threshold)
    what = f"{task} at {commit[:12]}"
    result = contrast(failing, passing, fdr=fdr, what=what, left_out=unknown)
    mined = Mined(repo, commit, task, None, result)
    if write:
        _write(lake, mined)
    return mined


def mine_comparison(
    lake: Lake,
    repo: str,
    head: str,
    base: str,
    task: str,
    *,
    fdr: float = DEFAULT_FDR,
    pass_threshold: float = DEFAULT_PASS_THRESHOLD,
    write: bool = True,
) -> Mined:
    """What the head's trajectories do on the inputs it fails and the base passes, against the
    base's trajectories on those same inputs (inputs pair by sample id; an input passes on an
    arm when every epoch of it that could be told passed)."""
    head_found, base_found = trajectories(lake, repo, head, task), trajectories(lake, repo, base, task)

    def outcomes(found: list[Trajectory]) -> dict[str, bool]:
        by_input: dict[str, list[bool]] = {}
        for t in found:
            outcome = t.passed(pass_threshold)
            if outcome is not None:
                by_input.setdefault(t.sample_id, []).append(outcome)
        return {sample: all(values) for sample, values in by_input.items()}

    head_passed, base_passed = outcomes(head_found), outcomes(base_found)
    regressed = {s for s, ok in head_passed.items() if not ok and base_passed.get(s) is True}
    failing = [t for t in head_found if t.sample_id in regressed and t.passed(pass_threshold) is False]
    passing = [t for t in base_found if t.sample_id in regressed and t.passed(pass_threshold) is True]
    what = f"{task}: {head[:12]} against {base[:12]} ({len(regressed)} inputs the head fails and the base passes)"
    result = contrast(failing, passing, fdr=fdr, what=what)
    mined = Mined(repo, head, task, base, result)
    if write:
        _write(lake, mined)
    return mined


def _write(lake: Lake, mined: Mined) -> None:
    doc = mined.to_json()
    doc["computed_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    mined.findings_path = lake.write_bytes(
        LAYOUT.miner_findings(mined.repo, mined.commit, mined.task, mined.base),
        (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode(),
    )
    table = annotation_rows(mined, created_at=doc["computed_at"])
    buf = io.BytesIO()
    pq.write_table(table, buf)
    mined.annotations_path = lake.write_bytes(
        LAYOUT.annotations(mined.repo, mined.commit, mined.task, SOURCE), buf.getvalue()
    )
    # The same notes where a person reads the trajectory in Inspect's viewer.
    mined.annotated_logs = write_annotated_logs(lake, mined.repo, mined.commit, mined.task).written


def annotation_rows(mined: Mined, *, created_at: str) -> pa.Table:
    """One note per (top finding, failing trajectory that shows it): on the event where the
    pattern shows (the call made without the one that should come first, the failing call) or
    on the whole trajectory (a tool never called)."""
    cols: dict[str, list[Any]] = {f.name: [] for f in ANNOTATIONS_SCHEMA}
    for finding in mined.contrast.findings[:ANNOTATED_FINDINGS]:
        for t in mined.contrast.failing_with(finding):
            for name, value in (
                ("repo", mined.repo),
                ("commit", mined.commit),
                ("task", mined.task),
                ("batch", t.batch),
                ("sample_id", t.sample_id),
                ("epoch", t.epoch),
                ("seq", finding.feature.event_seq(t)),
                ("source", SOURCE),
                ("finding", finding.feature.name),
                ("note", finding.headline),
                ("created_at", created_at),
            ):
                cols[name].append(value)
    return pa.Table.from_pydict(cols, schema=ANNOTATIONS_SCHEMA)


@dataclass
class TaskMining:
    """One task of a comparison, mined or not (``skipped`` says why not)."""

    task: str
    mined: Mined | None = None
    skipped: str = ""


def mine_document(
    lake: Lake, result: ComparisonDocument, *, fdr: float = DEFAULT_FDR, tasks: Sequence[str] | None = None
) -> list[TaskMining]:
    """Mine a comparison: each regressed task on the inputs the head fails and the base passes
    (or the ``tasks`` named, whatever their label). A task with too little to contrast is
    skipped with the counts, never an error: the other tasks are still mined."""
    chosen = (
        list(tasks) if tasks is not None else [t for t, d in result.ordered_tasks() if d.decision.label == "regressed"]
    )
    out = []
    for task in chosen:
        if task not in result.tasks:
            raise UserError(f"task {task!r} is not in the comparison {result.repo}#{result.pr}@{result.head_sha[:12]}")
        try:
            out.append(
                TaskMining(task, mine_comparison(lake, result.repo, result.head_sha, result.base_sha, task, fdr=fdr))
            )
        except NothingToContrast as exc:
            out.append(TaskMining(task, skipped=str(exc)))
    return out
