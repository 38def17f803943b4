"""Run verdict from per-task decisions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from evalrunner_assets.stats._decide import Label, TaskDecision
from evalrunner_assets.stats._errors import StatsError

Verdict = Literal["RUNNING", "IMPROVED", "REGRESSED", "UNCHANGED", "INCONCLUSIVE", "BROKEN"]
# Verdicts that block a merge (the check run fails; `compare` exits non-zero by default).
BLOCKING_VERDICTS: tuple[str, ...] = ("BROKEN", "REGRESSED")


@dataclass(frozen=True)
class RunVerdict:
    """The run's verdict, why, and the headline P(improvement)."""

    verdict: Verdict
    reasons: tuple[str, ...]
    p_improvement: float | None
    labels: dict[str, Label] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    # Why p_improvement is None (it is shown only beside an IMPROVED or REGRESSED verdict).
    p_improvement_note: str | None = None
    # Tasks the PR broke (label "broken"), and tasks broken on both arms (left inconclusive:
    # nothing to compare, and nothing this PR did; someone must fix the task).
    broken: tuple[str, ...] = ()
    broken_on_both: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "p_improvement": None if self.p_improvement is None else round(self.p_improvement, 4),
            "p_improvement_kind": "posterior probability that the mean delta over compared tasks is > 0; reported, never used to stop",
            "p_improvement_note": self.p_improvement_note,
            "labels": dict(self.labels),
            "counts": dict(self.counts),
            "broken": list(self.broken),
            "broken_on_both": list(self.broken_on_both),
        }


def _headline(decisions: Mapping[str, TaskDecision]) -> float | None:
    """P(mean delta over tasks > 0), combining independent per-task posteriors.

    Each task's draws come from the same seeded generator, so they are permuted with a
    per-task seed before averaging to make the tasks' draws independent.
    """
    draws = [
        (task, d.posterior_draws)
        for task, d in sorted(decisions.items())
        if d.posterior_draws is not None and d.pairs > 0
    ]
    if not draws:
        return None
    total = np.zeros(draws[0][1].size)
    for index, (_, values) in enumerate(draws):
        total += np.random.default_rng(1000 + index).permutation(values)
    return float(np.mean(total / len(draws) > 0))


def run_verdict(
    decisions: Mapping[str, TaskDecision],
    failures: Mapping[str, str] | None = None,
    *,
    broken_new: Mapping[str, str] | None = None,
) -> RunVerdict:
    """Combine per-task decisions into the run verdict.

    Rules, in order: RUNNING while any compared task is "continue"; BROKEN if the PR broke any
    task (label "broken": it cannot be loaded on head, or head raised on more than the error cap
    of its inputs, while the base ran it); REGRESSED if any task regressed; INCONCLUSIVE if any
    task is inconclusive (including improved + inconclusive) or failed on head while base
    succeeded (``failures``: task id -> reason, for tasks with no
    decision or in addition to one); IMPROVED if at least one improved and the rest are
    unchanged; UNCHANGED if all are unchanged. Tasks whose base failed while head succeeded
    have no baseline; they are listed in the reasons and left out of the verdict.
    ``broken_new``: tasks the PR adds that are broken (task id -> reason); they make the verdict
    BROKEN like a broken compared task (a new eval is otherwise never part of the verdict).
    """
    failures = dict(failures or {})
    for task, decision in decisions.items():
        if not isinstance(decision, TaskDecision):
            raise StatsError(f"decision for task {task!r} must be a TaskDecision, got {type(decision).__name__}")
    for task, why in failures.items():
        if not isinstance(why, str):
            raise StatsError(f"failure reason for task {task!r} must be a string, got {why!r}")

    compared = {t: d for t, d in decisions.items() if d.comparable and t not in failures and d.label != "broken"}
    broken_new = dict(broken_new or {})
    broken = sorted({t for t, d in decisions.items() if d.label == "broken" and t not in failures} | set(broken_new))
    why_broken = {**{t: decisions[t].reason for t in broken if t in decisions}, **broken_new}
    broken_on_both = sorted(t for t, d in decisions.items() if set(d.broken_arms) == {"head", "base"})
    labels = {t: d.label for t, d in sorted(decisions.items())}
    for task in failures:
        labels[task] = "inconclusive"
    counts: dict[str, int] = {}
    for label in labels.values():
        counts[label] = counts.get(label, 0) + 1

    reasons: list[str] = []
    capped: list[str] = []
    for task, why in sorted(failures.items()):
        capped.append(task)
        reasons.append(f"{task}: failed on head while base succeeded ({why})")
    for task, d in sorted(decisions.items()):
        if task in failures or task in broken:
            continue
        if d.head_failed:
            capped.append(task)
            reasons.append(f"{task}: {d.reason}")
        elif not d.comparable:
            reasons.append(f"{task}: not compared ({d.reason})")

    def named(label: str) -> list[str]:
        return sorted(t for t, d in compared.items() if d.label == label and not d.head_failed)

    running, regressed, inconclusive = named("continue"), named("regressed"), named("inconclusive")
    improved, unchanged = named("improved"), named("unchanged")
    headline = _headline(compared)

    verdict: Verdict
    if running:
        verdict = "RUNNING"
        reasons.insert(0, f"still sampling: {', '.join(running)}")
        settled = [f"already broken by this PR: {', '.join(broken)}"] if broken else []
        settled += [f"already regressed (settled): {', '.join(regressed)}"] if regressed else []
        reasons[1:1] = settled
    elif broken:
        verdict = "BROKEN"
        reasons[0:0] = [f"{t}: {why_broken[t]}" for t in broken]
        if regressed:
            reasons.insert(len(broken), f"regressed: {', '.join(regressed)}")
    elif regressed:
        verdict = "REGRESSED"
        reasons.insert(0, f"regressed: {', '.join(regressed)}")
    elif inconclusive or capped:
        verdict = "INCONCLUSIVE"
        if inconclusive:
            details = [f"{t} ({compared[t].reason})" if compared[t].reason else t for t in inconclusive]
            reasons.insert(0, f"inconclusive: {', '.join(details)}")
        if improved:
            reasons.append(f"improved but capped by the inconclusive tasks: {', '.join(improved)}")
    elif not compared:
        verdict = "INCONCLUSIVE"
        reasons.insert(0, "no task could be compared")
    elif improved:
        verdict = "IMPROVED"
        reasons.insert(
            0, f"improved: {', '.join(improved)}" + (f"; unchanged: {', '.join(unchanged)}" if unchanged else "")
        )
    else:
        verdict = "UNCHANGED"
        reasons.insert(0, f"unchanged within the margin: {', '.join(unchanged)}")
    # What the agent's own code raised, per task and arm, whatever the label, so a reader sees the
    # cause beside the verdict ("head: 16/16 samples raised RuntimeError('boom') in solver 'x'"),
    # and ids whose inputs differ between the arms (counted, never paired). A cause already in an
    # "inconclusive: task (reason)" line is not repeated.
    for task, d in sorted(decisions.items()):
        for arm in ("head", "base"):
            cause = d.pairing.get(f"error_{arm}")
            shown = (task in broken or task in broken_on_both or verdict == "INCONCLUSIVE") and f"{arm}: {cause}" in (
                d.reason or ""
            )
            if cause and not shown:
                reasons.append(f"{task}: {arm}: {cause}")
        changed = d.pairing.get("changed_inputs") or 0
        if changed:
            reasons.append(f"{task}: {changed} sample id(s) ran different inputs on head and base (not paired)")
    # A posterior probability beside an undecided verdict reads as a decision the sequential
    # rule did not make (a near-deterministic task capped at "inconclusive" can show 0.99):
    # it is shown only with a directional verdict, otherwise the note says why not.
    note = None
    if verdict not in ("IMPROVED", "REGRESSED"):
        note = {
            "BROKEN": "not reported for a BROKEN verdict: the PR broke a task's code, no quality change is measured",
            "RUNNING": "not reported while tasks are still sampling",
            "UNCHANGED": "not reported for an UNCHANGED verdict: every task lies within the margin",
            "INCONCLUSIVE": "not reported for an INCONCLUSIVE verdict: the evidence does not settle the direction",
        }[verdict]
        headline = None
    return RunVerdict(
        verdict=verdict,
        reasons=tuple(reasons),
        p_improvement=headline,
        labels=labels,
        counts=counts,
        p_improvement_note=note,
        broken=tuple(broken),
        broken_on_both=tuple(broken_on_both),
    )
