"""The PR comment: what a reviewer reads at a glance, from one comparison document."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evalrunner_assets.documents.comparison import ComparisonDocument, NewTaskResult
    from evalrunner_assets.report.links import WebLinks

MARKER = "<!-- evalrunner:pr-report -->"

_ICON = {
    "IMPROVED": "🟢",
    "UNCHANGED": "⚪",
    "INCONCLUSIVE": "🟡",
    "REGRESSED": "🔴",
    "BROKEN": "⛔",
    "RUNNING": "⏳",
}
_LABEL = {
    "improved": "improved",
    "regressed": "**regressed**",
    "unchanged": "unchanged",
    "continue": "running",
    "inconclusive": "inconclusive",
    "broken": "**broken**",
}
# Ends that are not a verdict, as the comment's first line names them.
_ENDED_EARLY = {"stopped": "Could not evaluate", "budget_spent": "Budget spent"}
BAR_CELLS = 21  # odd, so zero sits in the middle cell
BAR_SCALE = 0.5  # the bar spans Δ in [-0.5, +0.5]; intervals beyond are clipped with an arrow


def _fmt_rate(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def _fmt_delta(x: float | None) -> str:
    return "–" if x is None else f"{x:+.2f}"


def format_usd(x: float | None) -> str:
    """A dollar amount as every report shows it (terminal, comment, check run, stop reasons)."""
    if x is None:
        return "unknown"
    return f"${x:,.2f}" if x >= 0.01 else f"${x:,.4f}"


_fmt_money = format_usd


def _cell(text: object) -> str:
    """Text safe inside a GFM table cell: ``|`` escaped (also inside code spans, where GFM needs
    it too), line breaks folded, so a cell never splits or ends its row."""
    return " ".join(str(text).splitlines()).replace("|", "\\|")


def _code(text: object) -> str:
    """``text`` as an inline code span, fenced with more backticks than it contains."""
    text = " ".join(str(text).splitlines())
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def ci_bar(lo: float | None, hi: float | None, est: float | None) -> str:
    """A one-line picture of the interval against zero: ``·····│··━━●━━····``."""
    if lo is None or hi is None:
        return ""

    def cell(x: float) -> int:
        x = max(-BAR_SCALE, min(BAR_SCALE, x))
        return round((x + BAR_SCALE) / (2 * BAR_SCALE) * (BAR_CELLS - 1))

    zero = cell(0.0)
    a, b = cell(lo), cell(hi)
    chars = ["·"] * BAR_CELLS
    chars[zero] = "│"
    for i in range(a, b + 1):
        chars[i] = "━"
    if est is not None:
        chars[cell(est)] = "●"
    if lo < -BAR_SCALE:
        chars[0] = "◀"
    if hi > BAR_SCALE:
        chars[-1] = "▶"
    return "".join(chars)


def headline(result: ComparisonDocument) -> str:
    head7 = result.head_sha[:7]
    head = f"{_code(result.head_ref)} @ `{head7}`" if result.head_ref else f"`{head7}`"
    base = result.base_ref or result.base_sha[:7]
    p, note = result.final_verdict.p_improvement, result.final_verdict.p_improvement_note
    prob = f"P(improvement) = {p:.2f}" if p is not None else "P(improvement) = –" + (f" ({note})" if note else "")
    return f"{head} vs {_code(base)} · {prob}"


def render_comment(
    result: ComparisonDocument,
    *,
    marker: str = MARKER,
    why_regressed: Sequence[tuple[str, str, str]] = (),
    links: WebLinks | None = None,
) -> str:
    """The whole comment body (Markdown), with the hidden marker that makes it updatable.
    ``why_regressed``: (task, evidence, pattern) the trajectory miner found for regressed tasks;
    the pattern names the repository's tools, so it is shown as code, never as Markdown.
    ``links``: where the web pages are (``EVALRUNNER_WEB_URL``); each eval then links to its
    trajectories and the comment to the comparison's page. Without them the comment has no links."""
    verdict = result.verdict
    tasks = result.tasks
    lines = [marker, f"## {_ICON.get(verdict, '')} evalrunner: {verdict}", "", headline(result), ""]
    head_model, base_model = result.arm_models.get("head"), result.arm_models.get("base")
    if (
        head_model
        and base_model
        and (head_model.model, head_model.model_args) != (base_model.model, base_model.model_args)
    ):
        # A model change (e.g. a fine-tune's activation PR): say which model each side ran, and why.
        lines += [
            f"Models: base ran {_code(base_model.model)} ({base_model.source}), "
            f"this PR runs {_code(head_model.model)} ({head_model.source}).",
            "",
        ]
    reasons = [r for r in result.final_verdict.reasons if r]
    if result.status in _ENDED_EARLY and result.stopped_reason:
        lines += [f"> **{_ENDED_EARLY[result.status]}:** {' '.join(result.stopped_reason.split())}", ""]
    if verdict != "RUNNING" and reasons:
        lines += [f"> {r}" for r in reasons] + [""]

    if not tasks and verdict == "RUNNING":
        lines += ["_Discovering the evals at both commits…_", ""]
    if tasks:
        level = None
        lines += [
            "| eval | base | this PR | Δ (CI†) | vs 0 | label | samples |",
            "|---|---:|---:|---|---|---|---:|",
        ]
        for task, doc in result.ordered_tasks():
            d = doc.decision
            ci = d.anytime_interval
            level = level or ci.level
            lo, hi = ci.lo, ci.hi
            interval = "" if lo is None or hi is None else f" ({lo:+.2f}, {hi:+.2f})"
            samples = doc.head.samples + doc.base.samples
            label = _LABEL.get(d.label, d.label)
            if doc.failures:
                label += " ⚠"
            name = _code(task)
            if links is not None:
                name = f"[{name}]({links.trajectories(result.repo, result.head_sha, task, result.base_sha)})"
            lines.append(
                _row(
                    name,
                    _fmt_rate(d.base_mean),
                    _fmt_rate(d.head_mean),
                    f"{_fmt_delta(d.delta)}{interval}",
                    f"`{ci_bar(lo, hi, d.delta)}`",
                    label,
                    samples,
                )
            )
        lines.append("")
        margin = result.params.margin if result.params else None
        note = (
            f"† anytime-valid {100 * level:.1f}% interval on the paired difference (valid however often "
            f"we look; α split over {len(tasks)} task(s)), cut at 0 once a directional test (exact sign "
            f"tests at the window ends) settled the sign; “unchanged” means the whole interval lies "
            f"within ±{margin}. Bars span Δ ∈ [−{BAR_SCALE}, +{BAR_SCALE}], │ marks zero."
            if level
            else ""
        )
        if note:
            lines += [f"<sub>{note}</sub>", ""]

    for names, title in _task_lists(result):
        if names:
            lines.append(f"**{title}:** " + ", ".join(_code(t) for t in names))
    new = new_task_lines(result)
    if new:
        lines.append("")
        lines.append("**New on this PR** (run on this PR alone up to the cap; not paired, not part of the verdict):")
        lines += [f"- {_code(t)}: {text}" for t, text in new]
    raised = agent_errors(result)
    if raised:
        lines.append("")
        lines.append("**Errors raised by this repository's code** (scored as failures of that arm):")
        lines += [f"- {_code(t)} {arm}: {cause}" for t, arm, cause in raised]
    if why_regressed:
        lines.append("")
        lines.append(
            "**Why it regressed** (the trajectory miner, on the inputs this PR fails and the base passes; "
            "patterns significant at a 5% false discovery rate):"
        )
        lines += [
            f"- {_code(t)}: {_cell(evidence)}" + (f": {_code(pattern)}" if pattern else "")
            for t, evidence, pattern in why_regressed
        ]
    changed = {t: doc.decision.pairing.changed_inputs for t, doc in tasks.items() if doc.decision.pairing}
    changed = {t: n for t, n in changed.items() if n}
    if changed:
        lines.append("")
        lines.append("**Changed inputs** (the same sample id ran a different input on head and base; not paired):")
        lines += [f"- {_code(t)}: {n} sample id(s)" for t, n in changed.items()]
    failures = {t: doc.failures for t, doc in tasks.items() if doc.failures}
    if failures:
        lines.append("")
        lines.append("**Infrastructure failures** (not agent failures):")
        for t, f in failures.items():
            for arm, cause in f.items():
                lines.append(f"- {_code(t)} on {arm}: {' '.join(str(cause)[:300].splitlines())}")

    hints = [(t, doc.more_samples_hint) for t, doc in tasks.items() if doc.more_samples_hint]
    lines += ["", _footer(result)]
    if links is not None:
        page = links.pull_request(result.repo, result.pr, result.head_sha)
        lines += [
            "",
            f"[Open this comparison]({page}): the chart, spend, and each sample's trajectory, head beside base.",
        ]
    if hints and verdict in ("INCONCLUSIVE", "RUNNING"):
        lines.append("")
        for t, hint in hints:
            n = tasks[t].decision.more_pairs_needed
            lines.append(f"- {_code(t)}: {hint} — comment `/eval more {n}` to run them")

    if tasks:
        lines += ["", "<details><summary>Per-eval details</summary>", "", _details(result), "", "</details>"]
    return "\n".join(lines).rstrip() + "\n"


def agent_errors(result: ComparisonDocument) -> list[tuple[str, str, str]]:
    """(task, arm, cause) for every arm whose task code could not be loaded or whose samples
    raised in the repository's code."""
    out: list[tuple[str, str, str]] = []
    for task, doc in result.ordered_tasks():
        for arm, error in doc.load_errors.items():
            out.append((task, arm, f"cannot be loaded: {error}"))
        pairing = doc.decision.pairing
        if pairing is None:
            continue
        for arm, cause in (("head", pairing.error_head), ("base", pairing.error_base)):
            if cause:
                out.append((task, arm, cause))
    return out


def new_task_text(r: NewTaskResult, *, markdown: bool = True) -> str:
    """ "0.81 (0.70, 0.90), 64 samples" for a new task's measurement, or what stopped it."""
    noun = "sample" if r.head.samples == 1 else "samples"
    if r.status == "broken":
        cause = r.error_cause or f"cannot be loaded: {r.failure}"
        return f"**broken** — {cause}" if markdown else f"broken — {cause}"
    if r.status == "failed":
        return f"not measured — infrastructure failure: {' '.join(str(r.failure)[:300].splitlines())}"
    if r.mean is None:
        return "measuring…" if r.status == "measuring" else f"not measured ({r.head.samples} {noun})"
    interval = f" ({r.interval[0]:.2f}, {r.interval[1]:.2f})" if r.interval else ""
    text = f"{r.mean:.2f}{interval}, {r.head.samples} {noun}"
    if r.errored:
        text += f"; {r.error_cause}"
    if r.unscored:
        text += f"; {r.unscored} with no score in [0, 1] (left out)"
    if r.status == "measuring":
        text += " (still measuring)"
    elif r.status == "budget_spent":
        text += " (run budget spent)"
    return text


def new_task_lines(result: ComparisonDocument, *, markdown: bool = True) -> list[tuple[str, str]]:
    """(task, text) for each task the PR adds, measured on head alone."""
    return [
        (
            t,
            new_task_text(result.new_task_results[t], markdown=markdown)
            if t in result.new_task_results
            else "not measured",
        )
        for t in result.new_tasks
    ]


def not_landed_note(result: ComparisonDocument) -> str:
    """What windows that landed no samples still used: failed ones (from their logs) and, for a
    stopped or cancelled run, the windows cut short. Empty when there were none."""
    parts = []
    failed = result.failed_windows
    windows, unknown = (failed.windows, failed.unknown_windows) if failed else (0, 0)
    if failed and windows and unknown == windows:
        parts.append(f"{windows} window(s) failed on infrastructure (no readable log: their use is unknown)")
    elif failed and windows:
        used = f"{windows} window(s) failed on infrastructure after using {failed.samples:,} samples"
        if failed.cost_usd is not None:
            parts.append(f"{used}, {_fmt_money(failed.cost_usd)}")
        else:
            parts.append(f"{used} ({unknown} with no readable log or no price: cost unknown)")
    cancelled = (result.execution or {}).get("cancelled_windows") or []
    if cancelled:
        parts.append(f"{len(cancelled)} window(s) cancelled mid-run (their use is unknown; they run again on resume)")
    return "; ".join(parts)


def _spend(result: ComparisonDocument) -> str:
    return _fmt_money(result.spend_usd) if result.spend_known else "unknown"


def _footer(result: ComparisonDocument) -> str:
    traj = result.trajectories.get("head", "")
    extra = not_landed_note(result)
    return (
        f"Samples run: {result.samples_run:,} of {result.samples_possible:,} possible · "
        f"spend {_spend(result)}{f' · not landed: {extra}' if extra else ''} · "
        f"paired against base commit `{result.base_sha}` · "
        f"trajectories: `{traj}` (open with `evalrunner view`)"
    )


def _row(*cells: object) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _details(result: ComparisonDocument) -> str:
    rows = [
        _row(
            "eval",
            "pairs",
            "head better / base better / ties",
            "classical 95% CI‡",
            "e-value",
            "P(Δ>m) · P(|Δ|<m) · P(Δ<−m)",
            "cost/sample Δ",
            "p50 latency Δ",
        ),
        "|---|---:|---|---|---|---|---|---|",
    ]
    for task, doc in result.ordered_tasks():
        d = doc.decision
        cl = d.classical_interval
        classical = "–" if cl is None or cl.lo is None or cl.hi is None else f"({cl.lo:+.2f}, {cl.hi:+.2f})"
        ev = [v for v in d.e_values.values() if v is not None]
        e_best = max(ev) if ev else None
        cps = doc.cost_per_sample_delta_usd
        lat = doc.latency_p50_delta_s
        rows.append(
            _row(
                _code(task),
                d.pairs,
                f"{d.head_better} / {d.base_better} / {d.ties}",
                classical,
                "–" if e_best is None else f"{e_best:.3g}",
                f"{d.p_above_margin or 0:.2f} · {d.p_within_margin or 0:.2f} · {d.p_below_margin or 0:.2f}",
                "unknown" if cps is None else f"{cps:+.5f}",
                "–" if lat is None else f"{lat:+.3f}s",
            )
        )
    rows.append("")
    rows.append("<sub>‡ fixed-n reference only: not valid under repeated looks, never used to decide.</sub>")
    return "\n".join(rows)


def _task_lists(result: ComparisonDocument) -> tuple[tuple[list[str], str], ...]:
    """Tasks outside the verdict table, with what each list means (comment and summary)."""
    return (
        (result.skipped_tasks, "Skipped (no changed file matches their paths)"),
        (result.removed_tasks, "Removed on this PR"),
    )


def render_summary(result: ComparisonDocument) -> str:
    """A short plain-text summary for terminals and check-run summaries."""
    out = [f"{result.verdict}: {headline(result)}"]
    for task, doc in result.ordered_tasks():
        d = doc.decision
        ci = d.anytime_interval
        interval = "" if ci.lo is None or ci.hi is None else f" ({ci.lo:+.2f}, {ci.hi:+.2f})"
        out.append(
            f"  {task:<32} base {_fmt_rate(d.base_mean)}  head {_fmt_rate(d.head_mean)}  "
            f"Δ {_fmt_delta(d.delta)}{interval}  {d.label:<12} pairs {d.pairs}"
        )
    out.append(f"  samples {result.samples_run} of {result.samples_possible} possible · spend " + _spend(result))
    extra = not_landed_note(result)
    if extra:
        out.append(f"  not landed: {extra}")
    # A task the PR added or removed (or affinity skipped) is in no row above: say so.
    out += [f"  {title[0].lower()}{title[1:]}: {', '.join(names)}" for names, title in _task_lists(result) if names]
    if result.status in _ENDED_EARLY and result.stopped_reason:
        out.append(f"  {_ENDED_EARLY[result.status].lower()}: {' '.join(result.stopped_reason.split())}")
    out += [f"  new: {t} {text}" for t, text in new_task_lines(result, markdown=False)]
    if result.verdict != "RUNNING":
        # Why, in the same words as the PR comment: limits, failures and errors the agent raised.
        out += [f"  why: {r}" for r in result.final_verdict.reasons if r]
    return "\n".join(out)
