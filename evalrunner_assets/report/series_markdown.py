"""The cohort series in words: a table of points and the summary of one flagged point."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _cell(text: Any) -> str:
    # A pipe inside a cell would split it (GitHub-flavoured tables); newlines would end the row.
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _interval(pool: Mapping[str, Any]) -> str:
    if pool.get("not_measured"):
        return f"not measured: {pool['not_measured']}"
    if pool.get("mean") is None:
        return "n/a"
    iv = pool.get("interval")
    shown = f"{pool['mean']:.2f}"
    return f"{shown} ({iv[0]:.2f}–{iv[1]:.2f})" if iv else shown


def _errored(pool: Mapping[str, Any]) -> str:
    """Inputs that raised of those run ("0" when none did)."""
    errored = pool.get("errored") or 0
    return f"{errored}/{pool.get('ran', 0)}" if errored else "0"


# --- a point in words (the engine's series reads these too) ---------------------------------


def task_cause(task: Mapping[str, Any]) -> str | None:
    """Why a task has no mean: what its samples raised, or why it did not run."""
    if task["mean"] is not None:
        return None
    return task.get("not_measured") or task.get("failure") or "no input was scored"


def not_measured_note(pool: Mapping[str, Any]) -> str | None:
    """``not measured: <cause>`` for a task, cohort or combined pool over the error cap (or
    with nothing measured); None for one that was measured."""
    cause = pool.get("not_measured")
    return f"not measured: {cause}" if cause else None


def _errored_note(pool: Mapping[str, Any]) -> str:
    errored = pool.get("errored") or 0
    return f" · {errored}/{pool.get('ran', 0)} inputs raised" if errored else ""


def reading(point: Mapping[str, Any]) -> list[str]:
    """The point in words, one line per cohort and one for all tasks, e.g.
    ``default 0.86 · no regression`` … ``combined 0.81``; a pool whose samples mostly raised
    reads ``default not measured: <cause>``."""
    lines = []
    for cohort, pool in point["cohorts"].items():
        status = point.get("cohort_status", {}).get(cohort, "measured")
        if pool.get("not_measured"):
            lines.append(f"{cohort} {not_measured_note(pool)}")
            continue
        mean = "n/a" if pool["mean"] is None else f"{pool['mean']:.2f}"
        lines.append(f"{cohort} {mean} · {status}{_errored_note(pool)}")
    pool = point["combined"]
    if pool.get("not_measured"):
        lines.append(f"combined {not_measured_note(pool)}")
    else:
        mean = "n/a" if pool["mean"] is None else f"{pool['mean']:.2f}"
        lines.append(f"combined {mean}{_errored_note(pool)}")
    return lines


def render_point_table(points: Sequence[Mapping[str, Any]]) -> str:
    """One row per point (oldest first): commit, date, each cohort, all tasks, the inputs that
    raised, and notes. A pool whose samples mostly raised reads "not measured: <cause>"."""
    cohorts = sorted({c for p in points for c in p["cohorts"]})
    header = ["commit", "date", *cohorts, "combined", "errored", "notes"]
    lines = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    for p in points:
        notes = [a["text"] for a in p.get("annotations", [])]
        cells = [f"`{p['commit'][:7]}`", p["committed_at"][:10]]
        for c in cohorts:
            pool = p["cohorts"].get(c)
            if pool is None:
                cells.append("")
                continue
            status = (p.get("cohort_status") or {}).get(c, "")
            unmeasured = [] if pool.get("not_measured") else pool.get("unmeasured_tasks") or []
            part = f" · {len(unmeasured)} of {len(pool['tasks'])} evals not measured" if unmeasured else ""
            cells.append(_interval(pool) + part + (" ⚠" if status.startswith("regression flagged") else ""))
            notes += [f"{t} not measured: {task_cause(p['tasks'][t]) or ''}" for t in unmeasured]
        cells.append(_interval(p["combined"]))
        cells.append(_errored(p["combined"]))
        cells.append("; ".join(notes))
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def render_series_summary(point: Mapping[str, Any]) -> str:
    """The check-run text of a flagged main commit."""
    lines = [
        f"Main-branch point `{point['commit'][:7]}` compared with `{(point.get('previous') or '')[:7]}` "
        "on the inputs both measured (anytime-valid, α split over the shared evals).",
        "",
    ]
    lines += [f"- {line}" for line in reading(point)]
    lines += ["", "| eval | cohort | label | Δ (interval) | pairs | vs |", "|---|---|---|---|---|---|"]
    for task, flag in sorted((point.get("task_flags") or {}).items()):
        iv = flag.get("interval") or (None, None)
        delta = "n/a" if flag.get("delta") is None else f"{flag['delta']:+.2f} ({iv[0]:+.2f}, {iv[1]:+.2f})"
        # an eval not measured at the previous point is compared with the last that measured it
        versus = f"`{(flag.get('compared_with') or point.get('previous') or '')[:7]}`"
        cells = (task, flag["cohort"], flag["label"], delta, flag["pairs"], versus)
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"
