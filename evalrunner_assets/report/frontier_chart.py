"""The continuum frontier of one repository: every candidate at (cost per sample, suite score).

Error bars are each candidate's suite interval (all evals' inputs pooled, Wilson); the dashed line joins
the frontier (the candidates no cheaper one is shown at least as good as); colour says frontier,
uncertain (a cheaper candidate could not be told apart) or dominated. Reading it: pick the
highest point on the dashed line you can afford.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import altair as alt

STATUSES = ["frontier", "uncertain", "dominated", "cost unknown"]
COLOURS = ["#1f77b4", "#ff7f0e", "#9e9e9e", "#d62728"]


def frontier_chart(
    rows: Sequence[Mapping[str, Any]], repo: str, *, width: int = 520, height: int = 300
) -> alt.LayerChart:
    values = [
        {
            "candidate": r["candidate"],
            "cost": r["cost_per_sample"],
            "score": r["score"],
            "lo": r["lo"] if r["lo"] is not None else r["score"],
            "hi": r["hi"] if r["hi"] is not None else r["score"],
            "status": r["status"],
            "model": r["model"],
            "reference": "reference" if r["is_reference"] else "",
        }
        for r in rows
        if r["cost_per_sample"] is not None and r["score"] is not None
    ]
    frontier = [v for v in values if v["status"] == "frontier"]
    x = alt.X("cost:Q", title="cost per sample (US$)", scale=alt.Scale(zero=False, nice=True))
    y = alt.Y("score:Q", title="suite score", scale=alt.Scale(domain=[0, 1]))
    # Only the places some candidate is in get a legend entry; each keeps its colour.
    present = [s for s in STATUSES if any(v["status"] == s for v in values)] or STATUSES[:1]
    palette = [COLOURS[STATUSES.index(s)] for s in present]
    colour = alt.Color("status:N", scale=alt.Scale(domain=present, range=palette), title="place")
    bars = alt.Chart(alt.Data(values=values)).mark_rule(strokeWidth=1.5).encode(x=x, y="lo:Q", y2="hi:Q", color=colour)
    line = (
        alt.Chart(alt.Data(values=frontier))
        .mark_line(strokeDash=[6, 4], color="#1f77b4")
        .encode(x=x, y=y, order="cost:Q")
    )
    points = (
        alt.Chart(alt.Data(values=values))
        .mark_point(filled=True, size=70)
        .encode(
            x=x,
            y=y,
            color=colour,
            shape=alt.Shape("reference:N", legend=None),
            tooltip=[
                "candidate:N",
                "model:N",
                "status:N",
                alt.Tooltip("score:Q", format=".3f"),
                alt.Tooltip("lo:Q", format=".3f"),
                alt.Tooltip("hi:Q", format=".3f"),
                alt.Tooltip("cost:Q", format=".6f"),
            ],
        )
    )
    # Labels of the dearer half sit left of their point, so none runs into the legend.
    costs = [v["cost"] for v in values]
    middle = (min(costs) + max(costs)) / 2 if costs else 0.0
    left = [v for v in values if v["cost"] <= middle]
    right = [v for v in values if v["cost"] > middle]
    labels = [
        alt.Chart(alt.Data(values=left)).mark_text(align="left", dx=7, dy=-8, fontSize=10),
        alt.Chart(alt.Data(values=right)).mark_text(align="right", dx=-7, dy=-8, fontSize=10),
    ]
    chart = alt.layer(bars, line, points, *(label.encode(x=x, y=y, text="candidate:N") for label in labels))
    return cast(
        alt.LayerChart,
        chart.properties(
            width=width, height=height, title=f"{repo}: continuum frontier (score vs cost per sample; ■ reference)"
        ),
    )


def render_frontier_chart(rows: Sequence[Mapping[str, Any]], repo: str) -> dict[str, bytes]:
    """PNG and SVG bytes (rendered offline by vl-convert)."""
    import vl_convert as vlc

    spec = frontier_chart(rows, repo).to_json()
    return {"png": vlc.vegalite_to_png(spec, scale=1.5), "svg": vlc.vegalite_to_svg(spec).encode()}


def render_frontier_panel(rows: Sequence[Mapping[str, Any]], repo: str) -> bytes:
    """The chart laid out for the Dagster metadata panel (see :mod:`evalrunner_assets.report.panel`)."""
    from evalrunner_assets.report.panel import panel_png

    return panel_png(frontier_chart(rows, repo, width=330, height=220).to_json())
