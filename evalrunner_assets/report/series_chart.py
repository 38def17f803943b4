"""The main-branch cohort series of one repository: one line per cohort and for all tasks.

Bands are each point's interval (per-cohort and combined: pooled Wilson); vertical rules mark
where cohorts were added (grey, dashed) and where a drop was flagged (red). Reading the chart:
a combined line that drops where a cohort was added is the suite getting harder, not a
regression — the cohort lines say which.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import altair as alt


def _rows(points: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    lines, marks = [], []
    for p in points:
        base = {"commit": p["commit"][:7], "committed_at": p["committed_at"], "subject": p.get("subject", "")}
        scopes = [(c, pool) for c, pool in p["cohorts"].items()] + [("combined", p["combined"])]
        for name, pool in scopes:
            if pool["mean"] is None:
                continue
            lo, hi = pool["interval"] or (pool["mean"], pool["mean"])
            lines.append({**base, "series": name, "mean": pool["mean"], "lo": lo, "hi": hi, "inputs": pool["inputs"]})
        for note in p.get("annotations", []):
            if note["kind"] in ("cohort_added", "tasks_added", "regression"):
                marks.append(
                    {
                        **base,
                        "kind": "flagged drop" if note["kind"] == "regression" else "evals added",
                        "text": note["text"],
                    }
                )
    return lines, marks


def series_chart(
    points: Sequence[dict[str, Any]], repo: str, branch: str, *, width: int = 520, height: int = 240
) -> alt.LayerChart:
    lines, marks = _rows(points)
    x = alt.X("committed_at:T", title=f"commit time ({branch}, first-parent)")
    band = (
        alt.Chart(alt.Data(values=lines))
        .mark_area(opacity=0.15)
        .encode(
            x=x,
            y=alt.Y("lo:Q", title="mean score", scale=alt.Scale(domain=[0, 1])),
            y2="hi:Q",
            color=alt.Color("series:N", title="cohort"),
        )
    )
    line = (
        alt.Chart(alt.Data(values=lines))
        .mark_line(point=True)
        .encode(
            x=x,
            y="mean:Q",
            color="series:N",
            strokeDash=alt.condition(alt.datum.series == "combined", alt.value([6, 3]), alt.value([1, 0])),
            tooltip=[
                "series:N",
                "commit:N",
                "subject:N",
                alt.Tooltip("mean:Q", format=".2f"),
                alt.Tooltip("lo:Q", format=".2f"),
                alt.Tooltip("hi:Q", format=".2f"),
                "inputs:Q",
            ],
        )
    )
    layers: list[Any] = [band, line]
    if marks:
        rule = (
            alt.Chart(alt.Data(values=marks))
            .mark_rule(strokeWidth=1.5)
            .encode(
                x=x,
                color=alt.Color(
                    "kind:N",
                    scale=alt.Scale(domain=["evals added", "flagged drop"], range=["#888888", "#d62728"]),
                    title="annotation",
                ),
                strokeDash=alt.value([4, 4]),
                tooltip=["commit:N", "text:N"],
            )
        )
        label = (
            alt.Chart(alt.Data(values=marks))
            .mark_text(angle=270, align="left", dx=4, dy=-4, fontSize=9)
            .encode(x=x, y=alt.value(4), text="text:N")
        )
        layers += [rule, label]
    return (
        alt.layer(*layers)
        .resolve_scale(color="independent")
        .properties(width=width, height=height, title=f"{repo} · {branch}: cohort series")
    )


def render_series_chart(points: Sequence[dict[str, Any]], repo: str, branch: str) -> dict[str, bytes]:
    """PNG and SVG bytes (rendered offline by vl-convert)."""
    import vl_convert as vlc

    spec = series_chart(points, repo, branch).to_json()
    return {"png": vlc.vegalite_to_png(spec, scale=1.5), "svg": vlc.vegalite_to_svg(spec).encode()}


def render_series_panel(points: Sequence[dict[str, Any]], repo: str, branch: str) -> bytes:
    """The chart laid out for the Dagster metadata panel (see :mod:`evalrunner_assets.report.panel`)."""
    from evalrunner_assets.report.panel import panel_png

    return panel_png(series_chart(points, repo, branch, width=330, height=180).to_json())
