"""Charts in Dagster metadata fit the UI's metadata panel; the full charts stay in the lake."""

from __future__ import annotations

import base64
import copy
import json
import re
from pathlib import Path

import pytest

from evalrunner_assets.documents.comparison import ComparisonDocument
from evalrunner_assets.pipeline.publish import SavedComparison
from evalrunner_assets.report.chart import PANEL_TASKS, comparison_chart, render_chart, render_panel_chart
from evalrunner_assets.report.frontier_chart import render_frontier_panel
from evalrunner_assets.report.panel import PANEL_WIDTH, markdown_image, panel_png, png_size
from evalrunner_assets.report.series_chart import render_series_panel

FIXTURE = Path(__file__).parents[1] / "fixtures" / "documents-v1" / "comparison.json"


def png_in_markdown(md: str) -> bytes:
    (data,) = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)\)", md)
    return base64.b64decode(data)


def document(extra_tasks: int = 0, regressed: str | None = None) -> ComparisonDocument:
    doc = ComparisonDocument.model_validate(json.loads(FIXTURE.read_text()))
    first = next(iter(doc.tasks.values()))
    for i in range(extra_tasks):
        doc.tasks[f"suite/task_{i:02d}"] = copy.deepcopy(first)
    if regressed is not None:
        doc.tasks[regressed].decision.label = "regressed"
    return doc


def task_names(spec: str) -> set[str]:
    return {row["task"] for row in json.loads(spec)["data"]["values"]}


@pytest.mark.parametrize("extra", [0, 20])
def test_the_comparison_panel_is_no_wider_than_the_panel_and_stays_readable(extra):
    doc = document(extra)
    width, height = png_size(render_panel_chart(doc))
    assert width <= PANEL_WIDTH
    assert width >= PANEL_WIDTH * 0.6  # laid out for the panel, not a full chart shrunk to a thumbnail
    assert height <= 1000  # a bounded number of small facets, whatever the task count
    full_width, _ = png_size(render_chart(doc)["png"])
    assert full_width > PANEL_WIDTH  # the lake's chart keeps the full layout


def test_the_panel_shows_regressions_first_and_counts_the_tasks_left_out():
    doc = document(20, regressed="suite/task_19")
    spec = comparison_chart(doc, columns=2, width=170, height=110, max_tasks=PANEL_TASKS).to_json()
    shown = task_names(spec)
    assert len(shown) == PANEL_TASKS and "suite/task_19" in shown  # last by name, first by interest
    assert f"{len(doc.tasks) - PANEL_TASKS} more task(s) in the full chart" in spec
    full = comparison_chart(doc).to_json()
    assert task_names(full) == set(doc.tasks)


def test_comparison_metadata_carries_the_panel_chart_and_links_the_full_one():
    from evalrunner_assets.assets.evals import comparison_metadata

    doc = document(5)
    doc.status = "complete"
    md = comparison_metadata(SavedComparison(doc, "file:///lake/c.json", b"", "file:///lake/chart.svg"))
    assert png_size(png_in_markdown(md["chart"].value))[0] <= PANEL_WIDTH
    assert md["chart_path"].value == "file:///lake/chart.svg"


def test_a_wide_spec_is_scaled_into_the_panel():
    spec = json.dumps(
        {
            "width": 1400,
            "height": 100,
            "data": {"values": [{"x": i, "y": i % 7} for i in range(50)]},
            "mark": "line",
            "encoding": {"x": {"field": "x", "type": "quantitative"}, "y": {"field": "y", "type": "quantitative"}},
        }
    )
    assert png_size(panel_png(spec))[0] <= PANEL_WIDTH
    assert markdown_image("a", b"\x89PNG").startswith("![a](data:image/png;base64,")


def test_series_and_frontier_panels_fit():
    point = {
        "commit": "a" * 40,
        "position": 0,
        "committed_at": "2026-11-01T00:00:00+00:00",
        "subject": "one",
        "cohorts": {"default": {"mean": 0.6, "interval": [0.5, 0.7], "inputs": 40}},
        "combined": {"mean": 0.6, "interval": [0.5, 0.7], "inputs": 40},
        "annotations": [{"kind": "cohort_added", "text": "cohort default added"}],
    }
    points = [
        point,
        {**point, "commit": "b" * 40, "position": 1, "committed_at": "2026-11-02T00:00:00+00:00", "annotations": []},
    ]
    assert png_size(render_series_panel(points, "acme/agent", "main"))[0] <= PANEL_WIDTH
    rows = [
        {
            "candidate": name,
            "cost_per_sample": cost,
            "score": score,
            "lo": score - 0.05,
            "hi": score + 0.05,
            "status": status,
            "model": "m",
            "is_reference": name == "main",
        }
        for name, cost, score, status in [
            ("main", 0.001, 0.6, "frontier"),
            ("large", 0.004, 0.8, "frontier"),
            ("skill", 0.002, 0.55, "dominated"),
        ]
    ]
    assert png_size(render_frontier_panel(rows, "acme/agent"))[0] <= PANEL_WIDTH


def test_the_frontier_legend_lists_only_the_places_some_candidate_is_in():
    from evalrunner_assets.report.frontier_chart import COLOURS, STATUSES, frontier_chart

    def row(name: str, cost: float, score: float, status: str) -> dict:
        return {"candidate": name, "cost_per_sample": cost, "score": score, "lo": score - 0.05,
                "hi": score + 0.05, "status": status, "model": "m", "is_reference": name == "a"}  # fmt: skip

    rows = [row("a", 0.001, 0.6, "frontier"), row("b", 0.002, 0.5, "dominated"), row("c", 0.003, 0.8, "frontier")]
    spec = frontier_chart(rows, "o/r").to_dict()
    scales = [layer["encoding"]["color"]["scale"] for layer in spec["layer"] if "color" in layer.get("encoding", {})]
    assert scales and all(s["domain"] == ["frontier", "dominated"] for s in scales)
    assert all(s["range"] == [COLOURS[0], COLOURS[STATUSES.index("dominated")]] for s in scales)
