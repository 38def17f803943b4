"""Check-run mapping: a comparison verdict as a GitHub check run state."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evalrunner_assets.documents.comparison import ComparisonDocument

_VERDICTS = {
    "IMPROVED": ("success", "improved"),
    "UNCHANGED": ("success", "no change"),
    "INCONCLUSIVE": ("neutral", "inconclusive"),
    "REGRESSED": ("failure", "regressed"),
    "BROKEN": ("failure", "broken by this PR"),
}
TITLE_LIMIT = 240  # GitHub shows a check run's title on one line


def check_run_state(
    verdict: Any,
    samples_done: int,
    samples_planned: int,
    *,
    detail: str | None = None,
    action_required: bool = False,
) -> tuple[str, str | None, str]:
    """``(status, conclusion, title)`` of the check run for a comparison's verdict.

    RUNNING → in_progress "running · N of M samples"; IMPROVED/UNCHANGED → success;
    INCONCLUSIVE → neutral, or ``action_required`` when a task is broken on both arms (nothing
    this PR did, but someone must fix the task before it measures anything); REGRESSED and
    BROKEN → failure. ``detail`` (e.g. which task broke and how) joins the title.
    ``verdict`` may be a string or an enum.
    """
    name = str(getattr(verdict, "value", verdict)).upper()
    if name == "RUNNING":
        return "in_progress", None, f"running · {samples_done} of {samples_planned} samples"
    if name not in _VERDICTS:
        raise ValueError(
            f"verdict {verdict!r} has no check-run mapping; expected RUNNING or one of {', '.join(_VERDICTS)}"
        )
    conclusion, word = _VERDICTS[name]
    if name == "INCONCLUSIVE" and action_required:
        conclusion = "action_required"
    title = f"{word}: {detail} · {samples_done} samples" if detail else f"{word} · {samples_done} samples"
    if len(title) > TITLE_LIMIT:
        title = title[: TITLE_LIMIT - 1] + "…"
    return "completed", conclusion, title


def broken_detail(result: ComparisonDocument) -> str | None:
    """For a BROKEN verdict's title: the first task the PR broke and how ("triage/x — 16/16
    samples raised RuntimeError('boom') in solver 'y'"), and how many more; None otherwise."""
    broken = list(result.final_verdict.broken)
    if result.verdict != "BROKEN" or not broken:
        return None
    task = broken[0]
    doc = result.tasks.get(task) or result.new_task_results.get(task)
    how = _broken_cause(doc) if doc is not None else None
    more = f" (+{len(broken) - 1} more)" if len(broken) > 1 else ""
    return f"{task} — {how}{more}" if how else f"{task}{more}"


def _broken_cause(doc: Any) -> str | None:
    """What broke: the head's samples' error, or why its task code could not be loaded."""
    decision = getattr(doc, "decision", None)
    pairing = getattr(decision, "pairing", None)
    if pairing is not None and pairing.error_head:
        return str(pairing.error_head)
    load = (getattr(doc, "load_errors", None) or {}).get("head")
    if load:
        return str(load)
    cause = getattr(doc, "error_cause", None) or getattr(doc, "failure", None)  # a new task's
    return str(cause) if cause else None


def broken_on_both_detail(result: ComparisonDocument) -> str | None:
    """For an INCONCLUSIVE verdict with a task broken on both arms: which, for the title."""
    both = list(result.final_verdict.broken_on_both)
    if result.verdict != "INCONCLUSIVE" or not both:
        return None
    more = f" (+{len(both) - 1} more)" if len(both) > 1 else ""
    return f"{both[0]} is broken on both this PR and its base{more}: fix the task"


def stopped_title(reason: str) -> str:
    """The check run's title for a comparison that stopped without a verdict (the model provider
    down, the outage breaker, the lake): ``could not evaluate: <reason>``."""
    line = " ".join(str(reason).split())
    title = f"could not evaluate: {line}"
    return title if len(title) <= TITLE_LIMIT else title[: TITLE_LIMIT - 1] + "…"
