"""The main-branch cohort series of one repository: one line per cohort and for all tasks.

Points stand in first-parent order, one x position per commit (labelled by its short sha), so
commits made in the same second stay apart. Bands are each point's interval (per-cohort and
combined: pooled Wilson); vertical rules mark where cohorts were added (grey, dashed) and where
a drop was flagged (red). A triangle marks a point some of whose inputs raised (at its mean); a
cross along the top marks a cohort or the combined pool that was not measured (more than half
of its inputs raised) — such a point has no mean, so its line skips it. Reading the chart: a
combined line that drops where a cohort was added is the suite getting harder, not a
regression — the cohort lines say which.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import altair as alt

ERRORS_RAISED = "inputs raised"
ERRORS_NOT_MEASURED = "not measured"
ERROR_COLOUR = "#d62728"


def _rows(
    points: Sequence[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    lines, marks, errors = [], [], []
    for p in points:
        base = {
            "commit": p["commit"][:7],
            "position": p["position"],
            "committed_at": p["committed_at"],
            "subject": p.get("subject", ""),
        }
        scopes = [(c, pool) for c, pool in p["cohorts"].items()] + [("combined", p["combined"])]
        for name, pool in scopes:
            errored, ran = pool.get("errored") or 0, pool.get("ran") or 0
            if pool.get("not_measured"):
                errors.append(
                    {
                        **base,
                        "series": name,
                        "kind": ERRORS_NOT_MEASURED,
                        "errored": f"{errored}/{ran}",
                        "text": f"not measured: {pool['not_measured']}",
                    }
                )
                continue
            if pool["mean"] is None:
                continue
            lo, hi = pool["interval"] or (pool["mean"], pool["mean"])
            row = {**base, "series": name, "mean": pool["mean"], "lo": lo, "hi": hi, "inputs": pool["inputs"]}
            lines.append({**row, "errored": f"{errored}/{ran}"})
            if errored:
                errors.append({**row, "kind": ERRORS_RAISED, "errored": f"{errored}/{ran}", "text": ""})
        for note in p.get("annotations", []):
            if note["kind"] in ("cohort_added", "tasks_added", "regression"):
                marks.append(
                    {
                        **base,
                        "kind": "flagged drop" if note["kind"] == "regression" else "evals added",
                        "text": note["text"],
                    }
                )
    return lines, marks, errors


def series_chart(
    points: Sequence[dict[str, Any]], repo: str, branch: str, *, width: int = 520, height: int = 240
) -> alt.LayerChart:
    lines, marks, errors = _rows(points)
    order = [p["commit"][:7] for p in sorted(points, key=lambda p: p["position"])]
    x = alt.X(
        "commit:O",
        sort=order,
        scale=alt.Scale(domain=order),
        title=f"commit ({branch}, first-parent order)",
        axis=alt.Axis(labelAngle=-45),
    )
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
                alt.Tooltip("errored:N", title="inputs raised"),
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
    layers += _error_layers(errors, x)
    return (
        alt.layer(*layers)
        .resolve_scale(color="independent")
        .properties(width=width, height=height, title=f"{repo} · {branch}: cohort series")
    )


def _error_layers(errors: list[dict[str, Any]], x: alt.X) -> list[Any]:
    """The error markers: a triangle at the mean of a pool some of whose inputs raised, a cross
    along the top for one that was not measured (it has no mean to stand at)."""
    shape = alt.Shape(
        "kind:N",
        scale=alt.Scale(domain=[ERRORS_RAISED, ERRORS_NOT_MEASURED], range=["triangle-down", "cross"]),
        title="errors",
        legend=alt.Legend(symbolFillColor=ERROR_COLOUR, symbolStrokeColor=ERROR_COLOUR),
    )
    tooltip = ["series:N", "commit:N", alt.Tooltip("errored:N", title="inputs raised"), "text:N"]
    layers: list[Any] = []
    raised = [e for e in errors if e["kind"] == ERRORS_RAISED]
    if raised:
        layers.append(
            alt.Chart(alt.Data(values=raised))
            .mark_point(filled=True, size=70, color=ERROR_COLOUR, yOffset=-9)
            .encode(x=x, y="mean:Q", shape=shape, tooltip=tooltip)
        )
    missing = [e for e in errors if e["kind"] == ERRORS_NOT_MEASURED]
    if missing:
        layers.append(
            alt.Chart(alt.Data(values=missing))
            .mark_point(filled=True, size=90, color=ERROR_COLOUR)
            .encode(x=x, y=alt.value(12), shape=shape, tooltip=tooltip)
        )
    return layers


def render_series_chart(points: Sequence[dict[str, Any]], repo: str, branch: str) -> dict[str, bytes]:
    """PNG and SVG bytes (rendered offline by vl-convert)."""
    import vl_convert as vlc

    spec = series_chart(points, repo, branch).to_json()
    return {"png": vlc.vegalite_to_png(spec, scale=1.5), "svg": vlc.vegalite_to_svg(spec).encode()}


def render_series_panel(points: Sequence[dict[str, Any]], repo: str, branch: str) -> bytes:
    """The chart laid out for the Dagster metadata panel (see :mod:`evalrunner_assets.report.panel`)."""
    from evalrunner_assets.report.panel import panel_png

    return panel_png(series_chart(points, repo, branch, width=330, height=180).to_json())
