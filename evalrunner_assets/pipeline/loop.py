"""The adaptive loop's steps: what to materialize next for one comparison.

Both the sampling sensor and the CLI turn an :class:`~evalrunner_assets.pipeline.assess.Assessment`
into steps with :func:`next_steps`; run keys make every step idempotent (a step that was already
requested is not requested again, and a restarted daemon computes the same keys).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from evalrunner_assets.documents.comparison import ComparisonDocument
from evalrunner_assets.pipeline.assess import Assessment
from evalrunner_assets.pipeline.keys import commit_key


@dataclass(frozen=True)
class Step:
    kind: str  # "manifest" | "samples" | "compare"
    run_key: str
    commit: str = ""  # commits partition key (manifest, samples)
    task: str = ""  # samples only
    windows: tuple[str, ...] = ()  # samples only


def result_changed(result: ComparisonDocument, saved: ComparisonDocument | None) -> bool:
    """Whether the comparison document moved since it was last materialized: its verdict and
    samples, and also what failed. A window that fails after the last save lands no sample and
    moves no verdict, yet the document must name it and count what it spent."""
    if saved is None:
        return True
    return _what_moves(result) != _what_moves(saved)


def _what_moves(doc: ComparisonDocument) -> tuple[object, ...]:
    return (
        doc.status,
        doc.samples_run,
        doc.verdict,
        doc.params,
        doc.failed_windows,
        {task: dict(t.failures) for task, t in doc.tasks.items()},
        {task: (r.status, r.failure) for task, r in doc.new_task_results.items()},
    )


def next_steps(assessment: Assessment, saved: ComparisonDocument | None) -> list[Step]:
    """Manifests first, then every planned window grouped by (commit, task), then a comparison
    re-materialization whenever the document changed (progress for the check run)."""
    request = assessment.request
    key = request.key
    if assessment.needs_facts:
        return [
            Step("manifest", f"manifest:{commit_key(request.repo, c)}", commit=commit_key(request.repo, c))
            for c in assessment.needs_facts
        ]
    steps: list[Step] = []
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for w in assessment.next_windows:
        # Head and base may be one commit (a PR compared with its own base): one run serves both.
        if w.window.name not in groups[(w.commit, w.task)]:
            groups[(w.commit, w.task)].append(w.window.name)
    for (commit, task), windows in groups.items():
        ck = commit_key(request.repo, commit)
        steps.append(
            Step(
                "samples",
                f"samples:{key}:{ck}:{task}:{','.join(windows)}",
                commit=ck,
                task=task,
                windows=tuple(windows),
            )
        )
    result = assessment.result
    if result_changed(result, saved):
        steps.append(
            Step(
                "compare",
                f"compare:{key}:{result.status}:{result.samples_run}:"
                f"{result.failed_windows.windows if result.failed_windows else 0}:"
                f"{result.params.cap if result.params else None}",
            )
        )
    return steps
