""" "How many samples until we know?": Δ and its anytime-valid interval against pairs run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import altair as alt

if TYPE_CHECKING:
    from evalrunner_assets.documents.comparison import ComparisonDocument


def _path_rows(result: ComparisonDocument) -> list[dict[str, Any]]:
    rows = []
    for task, doc in result.tasks.items():
        for pairs, delta, lo, hi in doc.path:
            rows.append({"task": task, "pairs": pairs, "delta": delta, "lo": lo, "hi": hi})
    return rows


# The metadata panel's layout: two small facets a row, and at most this many tasks (the rest are
# in the full chart, linked beside it).
PANEL_TASKS = 8


def comparison_chart(
    result: ComparisonDocument,
    *,
    columns: int = 3,
    width: int = 260,
    height: int = 180,
    max_tasks: int | None = None,
) -> alt.FacetChart:
    """One panel per task: the running Δ, its interval, the ±margin band and where sampling stopped.
    With ``max_tasks``, the undecided and changed tasks come first and the rest are counted in the
    title."""
    margin = result.params.margin if result.params else 0.05
    tasks = list(result.tasks)
    if max_tasks is not None and len(tasks) > max_tasks:
        # What a reader looks for first: regressions, then improvements, then the undecided.
        order = {"broken": 0, "regressed": 1, "improved": 2}
        tasks = sorted(tasks, key=lambda t: (order.get(result.tasks[t].decision.label, 3), t))[:max_tasks]
    shown = set(tasks)
    rows = [{**r, "kind": "path"} for r in _path_rows(result) if r["task"] in shown]
    rows += [
        {"task": t, "pairs": result.tasks[t].decision.pairs, "label": result.tasks[t].decision.label, "kind": "stop"}
        for t in tasks
    ]
    # Facets need every layer to read the same data, so paths and stop markers share one table.
    base = alt.Chart().encode(x=alt.X("pairs:Q", title="pairs run"))
    path = base.transform_filter(alt.datum.kind == "path")
    band = base.mark_rect(opacity=0.12, color="gray").encode(
        x=alt.value(0), x2=alt.value(width), y=alt.datum(-margin), y2=alt.datum(margin)
    )
    interval = path.mark_area(opacity=0.3).encode(
        y=alt.Y("lo:Q", title="Δ (head − base)", scale=alt.Scale(domain=[-1, 1])), y2="hi:Q"
    )
    line = path.mark_line().encode(y="delta:Q")
    zero = base.mark_rule(strokeDash=[4, 4]).encode(x=alt.value(0), x2=alt.value(width), y=alt.datum(0))
    stop = (
        base.transform_filter(alt.datum.kind == "stop")
        .mark_rule(color="black")
        .encode(tooltip=["task:N", "label:N", "pairs:Q"])
    )
    layered = alt.layer(band, interval, line, zero, stop, data=alt.Data(values=rows)).properties(
        width=width, height=height
    )
    title = f"{result.head_sha[:7]} vs {result.base_ref or result.base_sha[:7]}: how many samples until we know?"
    hidden = len(result.tasks) - len(tasks)
    return layered.facet(facet=alt.Facet("task:N", title=None), columns=columns).properties(
        title=alt.TitleParams(title, subtitle=[f"{hidden} more task(s) in the full chart"] if hidden else [])
    )


def render_chart(result: ComparisonDocument) -> dict[str, bytes]:
    """The chart as PNG and SVG bytes (rendered offline by vl-convert)."""
    import vl_convert as vlc

    spec = comparison_chart(result).to_json()
    return {
        "png": vlc.vegalite_to_png(spec, scale=1.5),
        "svg": vlc.vegalite_to_svg(spec).encode(),
    }


def render_panel_chart(result: ComparisonDocument) -> bytes:
    """The chart laid out for the Dagster metadata panel (see :mod:`evalrunner_assets.report.panel`)."""
    from evalrunner_assets.report.panel import panel_png

    columns = 1 if len(result.tasks) == 1 else 2
    chart = comparison_chart(
        result, columns=columns, width=360 if columns == 1 else 170, height=110, max_tasks=PANEL_TASKS
    )
    return panel_png(chart.to_json())


def warm_up() -> None:
    """Start vl-convert's rendering engine (~0.4 s on its first render in a process), so that a
    driver can pay for it while it waits on sandboxes rather than after the verdict."""
    import vl_convert as vlc

    vlc.vegalite_to_png(
        {"data": {"values": [{"x": 0}]}, "mark": "point", "encoding": {"x": {"field": "x", "type": "quantitative"}}}
    )
