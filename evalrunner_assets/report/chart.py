""" "How many samples until we know?": Δ and its anytime-valid interval against pairs run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import altair as alt

if TYPE_CHECKING:
    from evalrunner_assets.pipeline.comparison_document import ComparisonDocument


def _path_rows(result: ComparisonDocument) -> list[dict[str, Any]]:
    rows = []
    for task, doc in result.tasks.items():
        for pairs, delta, lo, hi in doc.path:
            rows.append({"task": task, "pairs": pairs, "delta": delta, "lo": lo, "hi": hi})
    return rows


def comparison_chart(result: ComparisonDocument) -> alt.FacetChart:
    """One panel per task: the running Δ, its interval, the ±margin band and where sampling stopped."""
    margin = result.params.margin if result.params else 0.05
    rows = [{**r, "kind": "path"} for r in _path_rows(result)]
    rows += [
        {"task": t, "pairs": doc.decision.pairs, "label": doc.decision.label, "kind": "stop"}
        for t, doc in result.tasks.items()
    ]
    # Facets need every layer to read the same data, so paths and stop markers share one table.
    base = alt.Chart().encode(x=alt.X("pairs:Q", title="pairs run"))
    path = base.transform_filter(alt.datum.kind == "path")
    band = base.mark_rect(opacity=0.12, color="gray").encode(
        x=alt.value(0), x2=alt.value(260), y=alt.datum(-margin), y2=alt.datum(margin)
    )
    interval = path.mark_area(opacity=0.3).encode(
        y=alt.Y("lo:Q", title="Δ (head − base)", scale=alt.Scale(domain=[-1, 1])), y2="hi:Q"
    )
    line = path.mark_line().encode(y="delta:Q")
    zero = base.mark_rule(strokeDash=[4, 4]).encode(x=alt.value(0), x2=alt.value(260), y=alt.datum(0))
    stop = (
        base.transform_filter(alt.datum.kind == "stop")
        .mark_rule(color="black")
        .encode(tooltip=["task:N", "label:N", "pairs:Q"])
    )
    layered = alt.layer(band, interval, line, zero, stop, data=alt.Data(values=rows)).properties(width=260, height=180)
    return layered.facet(facet=alt.Facet("task:N", title=None), columns=3).properties(
        title=f"{result.head_sha[:7]} vs {result.base_ref or result.base_sha[:7]}: how many samples until we know?"
    )


def render_chart(result: ComparisonDocument) -> dict[str, bytes]:
    """The chart as PNG and SVG bytes (rendered offline by vl-convert)."""
    import vl_convert as vlc

    spec = comparison_chart(result).to_json()
    return {
        "png": vlc.vegalite_to_png(spec, scale=1.5),
        "svg": vlc.vegalite_to_svg(spec).encode(),
    }


def warm_up() -> None:
    """Start vl-convert's rendering engine (~0.4 s on its first render in a process), so that a
    driver can pay for it while it waits on sandboxes rather than after the verdict."""
    import vl_convert as vlc

    vlc.vegalite_to_png(
        {"data": {"values": [{"x": 0}]}, "mark": "point", "encoding": {"x": {"field": "x", "type": "quantitative"}}}
    )
