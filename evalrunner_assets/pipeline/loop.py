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
    """Whether the comparison document moved since it was last materialized."""
    if saved is None:
        return True
    return (result.status, result.samples_run, result.verdict, result.params) != (
        saved.status,
        saved.samples_run,
        saved.verdict,
        saved.params,
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
                f"compare:{key}:{result.status}:{result.samples_run}:{result.params.cap if result.params else None}",
            )
        )
    return steps
