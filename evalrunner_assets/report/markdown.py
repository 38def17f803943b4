"""The PR comment: what a reviewer reads at a glance, from one comparison document."""

from __future__ import annotations

import re
from typing import Any

MARKER = "<!-- evalrunner:pr-report -->"

_ICON = {
    "IMPROVED": "🟢",
    "UNCHANGED": "⚪",
    "INCONCLUSIVE": "🟡",
    "REGRESSED": "🔴",
    "RUNNING": "⏳",
}
_LABEL = {
    "improved": "improved",
    "regressed": "**regressed**",
    "unchanged": "unchanged",
    "continue": "running",
    "inconclusive": "inconclusive",
}
BAR_CELLS = 21  # odd, so zero sits in the middle cell
BAR_SCALE = 0.5  # the bar spans Δ in [-0.5, +0.5]; intervals beyond are clipped with an arrow


def _fmt_rate(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def _fmt_delta(x: float | None) -> str:
    return "–" if x is None else f"{x:+.2f}"


def _fmt_money(x: float | None) -> str:
    if x is None:
        return "unknown"
    return f"${x:,.2f}" if x >= 0.01 else f"${x:,.4f}"


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


def headline(result: dict[str, Any]) -> str:
    head7 = result["head_sha"][:7]
    head = f"{_code(result['head_ref'])} @ `{head7}`" if result.get("head_ref") else f"`{head7}`"
    base = result.get("base_ref") or result["base_sha"][:7]
    final = result.get("final_verdict") or {}
    p, note = final.get("p_improvement"), final.get("p_improvement_note")
    prob = f"P(improvement) = {p:.2f}" if p is not None else "P(improvement) = –" + (f" ({note})" if note else "")
    return f"{head} vs {_code(base)} · {prob}"


def render_comment(result: dict[str, Any], *, marker: str = MARKER) -> str:
    """The whole comment body (Markdown), with the hidden marker that makes it updatable."""
    verdict = result["verdict"]
    params = result.get("params") or {}
    tasks: dict[str, Any] = result.get("tasks") or {}
    lines = [marker, f"## {_ICON.get(verdict, '')} evalrunner: {verdict}", "", headline(result), ""]
    reasons = [r for r in (result.get("final_verdict") or {}).get("reasons", []) if r]
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
        for task in result.get("task_order") or sorted(tasks):
            doc = tasks[task]
            d = doc["decision"]
            ci = d.get("anytime_interval") or {}
            level = level or ci.get("level")
            lo, hi = ci.get("lo"), ci.get("hi")
            interval = "" if lo is None else f" ({lo:+.2f}, {hi:+.2f})"
            samples = doc["head"]["samples"] + doc["base"]["samples"]
            label = _LABEL.get(d["label"], d["label"])
            if doc.get("failures"):
                label += " ⚠"
            lines.append(
                _row(
                    _code(task),
                    _fmt_rate(d.get("base_mean")),
                    _fmt_rate(d.get("head_mean")),
                    f"{_fmt_delta(d.get('delta'))}{interval}",
                    f"`{ci_bar(lo, hi, d.get('delta'))}`",
                    label,
                    samples,
                )
            )
        lines.append("")
        margin = params.get("margin")
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

    for kind, title in (
        ("skipped_tasks", "Skipped (no changed file matches their paths)"),
        ("new_tasks", "New on this PR (no baseline yet)"),
        ("removed_tasks", "Removed on this PR"),
    ):
        if result.get(kind):
            lines.append(f"**{title}:** " + ", ".join(_code(t) for t in result[kind]))
    raised = agent_errors(result)
    if raised:
        lines.append("")
        lines.append("**Errors raised by this repository's code** (scored as failures of that arm):")
        lines += [f"- {_code(t)} {arm}: {cause}" for t, arm, cause in raised]
    changed = {t: doc["decision"].get("pairing", {}).get("changed_inputs") for t, doc in tasks.items()}
    changed = {t: n for t, n in changed.items() if n}
    if changed:
        lines.append("")
        lines.append("**Changed inputs** (the same sample id ran a different input on head and base; not paired):")
        lines += [f"- {_code(t)}: {n} sample id(s)" for t, n in changed.items()]
    failures = {t: doc["failures"] for t, doc in tasks.items() if doc.get("failures")}
    if failures:
        lines.append("")
        lines.append("**Infrastructure failures** (not agent failures):")
        for t, f in failures.items():
            for arm, cause in f.items():
                lines.append(f"- {_code(t)} on {arm}: {' '.join(str(cause)[:300].splitlines())}")

    hints = [(t, doc["more_samples_hint"]) for t, doc in tasks.items() if doc.get("more_samples_hint")]
    lines += ["", _footer(result)]
    if hints and verdict in ("INCONCLUSIVE", "RUNNING"):
        lines.append("")
        for t, hint in hints:
            n = tasks[t]["decision"].get("more_pairs_needed")
            lines.append(f"- {_code(t)}: {hint} — comment `/eval more {n}` to run them")

    if tasks:
        lines += ["", "<details><summary>Per-eval details</summary>", "", _details(result), "", "</details>"]
    return "\n".join(lines).rstrip() + "\n"


def agent_errors(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(task, arm, cause) for every arm whose samples raised in the repository's code."""
    tasks = result.get("tasks") or {}
    out = []
    for task in result.get("task_order") or sorted(tasks):
        pairing = (tasks[task].get("decision") or {}).get("pairing") or {}
        for arm in ("head", "base"):
            if pairing.get(f"error_{arm}"):
                out.append((task, arm, pairing[f"error_{arm}"]))
    return out


def not_landed_note(result: dict[str, Any]) -> str:
    """What windows that landed no samples still used: failed ones (from their logs) and, for a
    stopped or cancelled run, the windows cut short. Empty when there were none."""
    parts = []
    failed = result.get("failed_windows") or {}
    windows, unknown = failed.get("windows") or 0, failed.get("unknown_windows") or 0
    if windows and unknown == windows:
        parts.append(f"{windows} window(s) failed on infrastructure (no readable log: their use is unknown)")
    elif windows:
        used = f"{windows} window(s) failed on infrastructure after using {failed.get('samples', 0):,} samples"
        if failed.get("cost_usd") is not None:
            parts.append(f"{used}, {_fmt_money(failed['cost_usd'])}")
        else:
            parts.append(f"{used} ({unknown} with no readable log or no price: cost unknown)")
    cancelled = (result.get("execution") or {}).get("cancelled_windows") or []
    if cancelled:
        parts.append(f"{len(cancelled)} window(s) cancelled mid-run (their use is unknown; they run again on resume)")
    return "; ".join(parts)


def _footer(result: dict[str, Any]) -> str:
    spend = _fmt_money(result.get("spend_usd")) if result.get("spend_known") else "unknown"
    traj = (result.get("trajectories") or {}).get("head", "")
    extra = not_landed_note(result)
    return (
        f"Samples run: {result.get('samples_run', 0):,} of {result.get('samples_possible', 0):,} possible · "
        f"spend {spend}{f' · not landed: {extra}' if extra else ''} · "
        f"paired against base commit `{result['base_sha']}` · "
        f"trajectories: `{traj}` (open with `evalrunner view`)"
    )


def _row(*cells: object) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _details(result: dict[str, Any]) -> str:
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
    for task in result.get("task_order") or sorted(result.get("tasks") or {}):
        doc = result["tasks"][task]
        d = doc["decision"]
        cl = d.get("classical_interval") or {}
        classical = "–" if not cl else f"({cl['lo']:+.2f}, {cl['hi']:+.2f})"
        ev = d.get("e_values") or {}
        e_best = max(ev.values()) if ev else None
        cps = doc.get("cost_per_sample_delta_usd")
        lat = doc.get("latency_p50_delta_s")
        rows.append(
            _row(
                _code(task),
                d.get("pairs", 0),
                f"{d.get('head_better', 0)} / {d.get('base_better', 0)} / {d.get('ties', 0)}",
                classical,
                "–" if e_best is None else f"{e_best:.3g}",
                f"{d.get('p_above_margin', 0):.2f} · {d.get('p_within_margin', 0):.2f} · {d.get('p_below_margin', 0):.2f}",
                "unknown" if cps is None else f"{cps:+.5f}",
                "–" if lat is None else f"{lat:+.3f}s",
            )
        )
    rows.append("")
    rows.append("<sub>‡ fixed-n reference only: not valid under repeated looks, never used to decide.</sub>")
    return "\n".join(rows)


def render_summary(result: dict[str, Any]) -> str:
    """A short plain-text summary for terminals and check-run summaries."""
    out = [f"{result['verdict']}: {headline(result)}"]
    for task in result.get("task_order") or sorted(result.get("tasks") or {}):
        doc = result["tasks"][task]
        d = doc["decision"]
        ci = d.get("anytime_interval") or {}
        interval = "" if ci.get("lo") is None else f" ({ci['lo']:+.2f}, {ci['hi']:+.2f})"
        out.append(
            f"  {task:<32} base {_fmt_rate(d.get('base_mean'))}  head {_fmt_rate(d.get('head_mean'))}  "
            f"Δ {_fmt_delta(d.get('delta'))}{interval}  {d['label']:<12} pairs {d.get('pairs', 0)}"
        )
    out.append(
        f"  samples {result.get('samples_run', 0)} of {result.get('samples_possible', 0)} possible · spend "
        + (_fmt_money(result.get("spend_usd")) if result.get("spend_known") else "unknown")
    )
    extra = not_landed_note(result)
    if extra:
        out.append(f"  not landed: {extra}")
    if result["verdict"] != "RUNNING":
        # Why, in the same words as the PR comment: limits, failures and errors the agent raised.
        reasons = [r for r in (result.get("final_verdict") or {}).get("reasons", []) if r]
        out += [f"  why: {r}" for r in reasons]
    return "\n".join(out)
