"""The continuum frontier in words: the candidates table, the steps up the frontier and the
promotion decision (Markdown, for the asset's metadata and the lake)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _cell(text: Any) -> str:
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _row(cells: Sequence[Any]) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _money(x: float | None) -> str:
    return "unknown" if x is None else f"${x:.6f}"


def render_frontier_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """One row per candidate, cheapest first."""
    lines = [
        _row(["candidate", "model", "suite score (interval)", "cost/sample", "p50 latency", "tokens/sample", "place"]),
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        score = "n/a" if r["score"] is None else f"{r['score']:.3f} ({r['lo']:.3f}–{r['hi']:.3f})"
        place = r["status"]
        if r.get("dominated_by"):
            place += f" by {r['dominated_by']}"
        elif r.get("uncertain_against"):
            place += f" against {r['uncertain_against']}"
        name = r["candidate"] + (" (reference)" if r["is_reference"] else "")
        p50 = "n/a" if r["p50_latency_s"] is None else f"{r['p50_latency_s']:.3f} s"
        tokens = "n/a" if r["tokens_per_sample"] is None else f"{r['tokens_per_sample']:.0f}"
        lines.append(_row([name, r["model"], score, _money(r["cost_per_sample"]), p50, tokens, place]))
    return "\n".join(lines) + "\n"


def render_steps_table(steps: Sequence[Mapping[str, Any]]) -> str:
    """What each step up the frontier costs."""
    if not steps:
        return "One candidate on the frontier: no step to take.\n"
    lines = [
        _row(["step", "score gain", "paired Δ (interval)", "extra cost/sample", "cost ×", "$ per +0.01 score"]),
        "|---|---|---|---|---|---|",
    ]
    for s in steps:
        lo, hi = s["paired_interval"]
        paired = (
            "n/a"
            if s["paired_delta"] is None
            else f"{s['paired_delta']:+.3f} ({lo:+.3f}, {hi:+.3f}) {s['paired_label']}"
        )
        ratio = "n/a" if s["cost_ratio"] is None else f"{s['cost_ratio']:.2f}×"
        per_point = "n/a" if s["cost_per_point"] is None else f"${s['cost_per_point']:.7f}"
        lines.append(
            _row(
                [
                    f"{s['from']} → {s['to']}",
                    f"{s['score_gain']:+.3f}",
                    paired,
                    f"+${s['extra_cost_per_sample']:.6f}",
                    ratio,
                    per_point,
                ]
            )
        )
    return "\n".join(lines) + "\n"


def render_promotion(promotion: Mapping[str, Any]) -> str:
    """The decision first, then each candidate's verdict with its reasons."""
    promoted = promotion.get("promoted")
    head = (
        f"**Promote `{promoted}`** over `{promotion['reference']}`."
        if promoted
        else f"**No promotion**: `{promotion['reference']}` stays."
    )
    lines = [head, ""] + [f"- {r}" for r in promotion.get("reasons", [])] + [""]
    for name, v in sorted(promotion.get("candidates", {}).items()):
        lines.append(f"- `{name}`: {'passed' if v['passed'] else 'failed'} — " + "; ".join(v["reasons"]))
    return "\n".join(lines) + "\n"
