"""Backfills show errors: a real backfill over a small history whose evals raise at two commits.

History (first-parent, one day apart): base · README note · the shared solver raises on every
sample (the whole point errors) · reverted · the escalation scorer raises on every sample (one
eval errors) · reverted together with the skill edit that drops escalation_policy 0.80 → 0.55.

A point whose samples mostly raised is "not measured: <cause>" in the table, the reading, the
chart and ``cohort_series`` (null mean, ``errored`` counted), never 0.00 and never "no
regression", and it takes no part in the regression test: the next point is compared with the
last one that measured each eval, so the regression after the broken scorer is still flagged.
"""

from __future__ import annotations

import json

import dagster as dg
import pytest

from evalrunner_assets.driver.backfill import run_backfill
from evalrunner_assets.example_repo import ERROR_STEPS, HISTORY_STEPS, REGRESSION_STEP, build_example_history
from evalrunner_assets.pipeline import series
from evalrunner_assets.report.series_chart import series_chart
from evalrunner_assets.report.series_markdown import render_point_table
from lake import duck
from tests.helpers.pipeline_fixtures import evalrunner_home

REPO = "example/support-agent"
SETTINGS = series.SeriesSettings(cap=64)
ESCALATION = "triage/escalation_policy"

pytestmark = [pytest.mark.timeout(1800), pytest.mark.slow]


def _fix_scorer_and_regress(root):
    ERROR_STEPS["fix_scorer"][2](root)
    REGRESSION_STEP[2](root)


STEPS = [
    HISTORY_STEPS[0],  # README note
    ERROR_STEPS["break_solver"],
    ERROR_STEPS["fix_solver"],
    ERROR_STEPS["break_scorer"],
    ("triage: page straight away; revert the paging policy table", "regression", _fix_scorer_and_regress),
]


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory):
    root = tmp_path_factory.mktemp("series-errors")
    history = build_example_history(root / "repo", steps=STEPS)
    with evalrunner_home(root / "home") as home:
        result = run_backfill(
            REPO,
            str(root / "repo"),
            settings=SETTINGS,
            last=len(history),
            instance=dg.DagsterInstance.ephemeral(),
            resources=home.resources(),
        )
        points = {
            c.kind if c.kind != "neutral" else f"neutral{i}": p for i, (c, p) in enumerate(zip(history, result.points))
        }
        yield {"history": history, "result": result, "points": points, "lake": home.lake()}


def test_a_point_whose_every_sample_raised_is_not_measured_and_never_flagged(backfilled):
    point = backfilled["points"]["error"]
    assert point["combined"]["mean"] is None and point["combined"]["interval"] is None
    cause = point["combined"]["not_measured"]
    assert "RuntimeError" in cause and "skill index unavailable" in cause and "in solver" in cause
    assert point["combined"]["errored"] == point["combined"]["ran"] > 0
    assert not point["flagged"] and point["task_flags"] == {}
    assert point["cohort_status"]["default"].startswith("not measured: ")
    for task in point["tasks"].values():
        assert task["mean"] is None and task["errored"] == task["ran"]
        assert task["stop"] == "more than 50% of its inputs raised"  # no window past the cap's 16 inputs
        assert task["ran"] == 16
    lines = series.reading(point)
    assert all("not measured: " in line for line in lines), lines
    assert not any("0.00" in line or "no regression" in line for line in lines), lines


def test_the_table_says_not_measured_and_counts_errored_inputs(backfilled):
    points = backfilled["result"].points
    table = render_point_table(points)
    header, _, *rows = table.splitlines()
    assert "errored" in header.split(" | ")
    broken = next(r for r in rows if backfilled["points"]["error"]["commit"][:7] in r)
    assert "not measured: " in broken and "RuntimeError" in broken and "0.00" not in broken
    assert "48/48" in broken  # three evals, 16 inputs each, all raised
    scorer = next(r for r in rows if backfilled["points"]["task_error"]["commit"][:7] in r)
    assert "1 of 3 evals not measured" in scorer and f"{ESCALATION} not measured: " in scorer
    assert "KeyError" in scorer and "in scorer" in scorer


def test_the_next_point_is_compared_with_the_last_measured_one(backfilled):
    points, history = backfilled["points"], backfilled["history"]
    fixed = points["neutral3"]
    assert fixed["previous"] == history[1].sha  # across the point that was not measured
    assert set(fixed["compared_with"].values()) == {history[1].sha}
    assert not fixed["flagged"] and fixed["cohort_status"]["default"] == "no regression"


def test_one_eval_that_raised_is_left_out_and_the_regression_after_it_still_flagged(backfilled):
    points, history = backfilled["points"], backfilled["history"]
    partial = points["task_error"]
    assert partial["tasks"][ESCALATION]["mean"] is None
    assert "KeyError" in partial["tasks"][ESCALATION]["not_measured"]
    assert ESCALATION not in partial["task_flags"] and not partial["flagged"]
    assert partial["cohorts"]["default"]["mean"] is not None  # the two evals that ran
    assert partial["cohort_status"]["default"] == "no regression (1 eval not measured)"
    regression = points["regression"]
    assert regression["flagged_tasks"] == [ESCALATION]
    # compared with the point before the broken scorer, the last that measured the eval
    assert regression["task_flags"][ESCALATION]["compared_with"] == history[3].sha
    assert regression["task_flags"][ESCALATION]["delta"] < -0.1


def test_cohort_series_counts_errored_and_holds_every_note(backfilled):
    con = duck.connect(backfilled["lake"])
    rows = con.sql(
        'select "commit", scope, name, mean, inputs, errored, status, flagged, annotation from cohort_series '
        "order by position, scope, name"
    ).fetchall()
    by = {(r[0], r[1], r[2]): r for r in rows}
    broken = backfilled["points"]["error"]["commit"]
    combined = by[(broken, "combined", "combined")]
    assert combined[3] is None and combined[5] == 48 and combined[6] == "not measured" and not combined[7]
    assert combined[8].startswith("not measured: ") and "RuntimeError" in combined[8]
    for name in backfilled["points"]["error"]["tasks"]:
        task = by[(broken, "task", name)]
        assert task[3] is None and task[5] == 16 and task[6] == "not measured" and not task[7]
    scorer = by[(backfilled["points"]["task_error"]["commit"], "task", ESCALATION)]
    assert scorer[3] is None and scorer[5] == 16 and scorer[6] == "not measured"
    regression = backfilled["points"]["regression"]["commit"]
    for key in [
        (regression, "task", ESCALATION),
        (regression, "cohort", "default"),
        (regression, "combined", "combined"),
    ]:
        assert by[key][7] and f"{ESCALATION} regressed" in by[key][8], by[key]
    # no other row is flagged, and every row without errors says so with 0, not null
    assert {r[0] for r in rows if r[7]} == {regression}
    assert all(r[5] == 0 for r in rows if r[0] in (backfilled["history"][0].sha, backfilled["history"][1].sha))


def test_the_chart_marks_errors_and_places_points_by_position(backfilled):
    points = backfilled["result"].points
    spec = series_chart(points, REPO, "main").to_dict()
    layers = spec["layer"]
    order = [p["commit"][:7] for p in points]
    for layer in layers:
        x = layer["encoding"]["x"]
        assert x["field"] == "commit" and x["type"] == "ordinal" and x["scale"]["domain"] == order
    markers = [m for layer in layers if layer["encoding"].get("shape") for m in layer["data"]["values"]]
    broken, partial = backfilled["points"]["error"]["commit"][:7], backfilled["points"]["task_error"]["commit"][:7]
    assert {(m["commit"], m["series"]) for m in markers if m["kind"] == "not measured"} == {
        (broken, "default"),
        (broken, "combined"),
    }
    assert {(m["commit"], m["series"]) for m in markers if m["kind"] == "inputs raised"} == {
        (partial, "default"),
        (partial, "combined"),
    }
    line = next(layer for layer in layers if layer["mark"]["type"] == "line")
    assert broken not in {v["commit"] for v in line["data"]["values"]}  # no 0.00 drawn for it
    json.dumps(spec)  # the spec the lake's chart is rendered from


def _scene_items(node, marktype, role):
    """Every item of the rendered scenegraph's ``marktype`` marks with ``role``."""
    if not isinstance(node, dict):
        return []
    found = list(node.get("items", [])) if node.get("marktype") == marktype and node.get("role") == role else []
    for child in node.get("items", []) if isinstance(node.get("items"), list) else []:
        found += _scene_items(child, marktype, role)
    return found


def test_points_with_equal_commit_times_get_distinct_x_positions():
    import vl_convert as vlc

    def point(position: int, mean: float) -> dict:
        pool = {"mean": mean, "interval": [mean - 0.05, mean + 0.05], "inputs": 64, "tasks": ["t"]}
        return {
            "commit": f"{position:x}" * 40,
            "position": position,
            "committed_at": "2025-01-06T09:00:00+00:00",  # one push, three commits, one second
            "subject": f"commit {position}",
            "cohorts": {"default": pool},
            "combined": pool,
            "annotations": [],
        }

    points = [point(3, 0.7), point(1, 0.5), point(2, 0.6)]
    scene = vlc.vegalite_to_scenegraph(series_chart(points, REPO, "main").to_json())["scenegraph"]
    symbols = _scene_items(scene, "symbol", "mark")  # the line's points: cohort and combined
    xs = sorted({round(s["x"], 3) for s in symbols})
    assert len(xs) == 3
    # placed in first-parent order (position), whatever order the points came in
    by_x = {round(s["x"], 3): 1 - s["y"] for s in symbols}
    assert [by_x[x] for x in xs] == sorted(by_x[x] for x in xs)
    labels = [
        t["text"]
        for t in _scene_items(scene, "text", "axis-label")
        if t.get("text") in {"1111111", "2222222", "3333333"}
    ]
    assert labels == ["1111111", "2222222", "3333333"]


def _task(mean, ran=64, errored=0, not_measured=None, cohort="default"):
    return {
        "cohort": cohort,
        "mean": mean,
        "interval": None if mean is None else [mean - 0.1, mean + 0.1],
        "inputs": ran,
        "ran": ran,
        "errored": errored,
        "not_measured": not_measured,
        "failure": None,
    }


@pytest.mark.parametrize(
    "b_inputs, not_measured",
    [(16, False), (15, True)],  # 16 of 32 inputs raised: half, measured; 16 of 31: more than half
)
def test_a_pool_is_not_measured_once_more_than_half_its_inputs_raised(b_inputs, not_measured):
    cause = "16/16 samples raised KeyError('x') in scorer 's'"
    tasks = {"a": _task(None, ran=16, errored=16, not_measured=cause), "b": _task(0.5, ran=b_inputs)}
    cohorts, combined = series.summarise_point(tasks)
    assert combined["errored"] == 16 and combined["ran"] == 16 + b_inputs
    assert combined["unmeasured_tasks"] == ["a"]
    lines = series.reading({"cohorts": cohorts, "combined": combined, "cohort_status": {"default": "no regression"}})
    if not_measured:
        assert combined["mean"] is None and combined["interval"] is None
        assert combined["not_measured"] == f"a: {cause}"
        assert lines == [f"default not measured: a: {cause}", f"combined not measured: a: {cause}"]
    else:
        assert combined["mean"] == 0.5 and combined["not_measured"] is None  # b alone
        assert lines == ["default 0.50 · no regression · 16/32 inputs raised", "combined 0.50 · 16/32 inputs raised"]


def test_an_eval_not_measured_at_a_point_is_compared_with_the_point_before_it():
    def point(commit, **tasks):
        return {"commit": commit, "tasks": tasks}

    newest_first = [
        point("c", t=_task(None, errored=64, not_measured="…"), u=_task(0.7)),
        point("b", t=_task(None, errored=64, not_measured="…"), u=_task(None, errored=64, not_measured="…")),
        point("a", t=_task(0.8), u=_task(0.6), v=_task(0.5)),
    ]
    later = point("d", t=_task(0.6), u=_task(0.7), v=_task(0.5), w=_task(0.4))
    found = series.task_baselines(later, newest_first)
    assert {t: p["commit"] for t, p in found.items()} == {"t": "a", "u": "c"}  # v, w: not listed at c
    assert not series.is_measured(newest_first[1]) and series.is_measured(newest_first[0])
