"""Main-branch cohort series, end to end on a real Dagster instance and real sandboxes.

The example history (12 first-parent commits) holds one real regression (a skill edit that drops
escalation_policy from 0.80 to 0.55), wording-only changes, and a cohort of harder evals added
later. A backfill must flag exactly the regression commit, annotate the cohort addition without
flagging it, leave a chart and a SQL view, and a second backfill over the same range must start
no sandbox.
"""

from __future__ import annotations

import base64
import io
import re
import time
from pathlib import Path

import dagster as dg
import pytest

from evalrunner_assets.driver.backfill import run_backfill
from evalrunner_assets.example_repo import build_example_history
from evalrunner_assets.pipeline import series
from evalrunner_assets.pipeline.series_progress import ProgressDisplay, SeriesProgress
from evalrunner_assets.report.panel import PANEL_WIDTH, png_size
from lake import LAYOUT, duck
from tests.helpers.pipeline_fixtures import evalrunner_home

REPO = "example/support-agent"
SECRET = b"cohort-series-webhook-secret"
SETTINGS = series.SeriesSettings(cap=64)  # three windows per eval and point: fast, still decisive

# Two backfills of 12 commits (~1.5 min on an idle 2-core machine); generous for a loaded one.
pytestmark = [pytest.mark.timeout(1800), pytest.mark.slow]


class _Timeline(ProgressDisplay):
    """The CLI's display (not a terminal), also noting when each window and point arrived."""

    def __init__(self) -> None:
        super().__init__(SeriesProgress(0, 0), io.StringIO(), tty=False)
        self.events: list[tuple[str, float, str]] = []

    def on_window(self, outcome) -> None:
        self.events.append(("window", time.time(), outcome.key.commit))
        super().on_window(outcome)

    def on_point(self, point, fresh) -> None:
        self.events.append(("point", time.time(), point["commit"]))
        super().on_point(point, fresh)


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory):
    root = tmp_path_factory.mktemp("series")
    history = build_example_history(root / "repo")
    with evalrunner_home(root / "home") as home:
        instance = dg.DagsterInstance.ephemeral()
        first_progress, second_progress = _Timeline(), _Timeline()
        first = run_backfill(
            REPO,
            str(root / "repo"),
            settings=SETTINGS,
            last=len(history),
            instance=instance,
            resources=home.resources(),
            progress=first_progress,
        )
        first_run_ended = time.time()
        starts_after_first = len(home.starts())
        second = run_backfill(
            REPO,
            str(root / "repo"),
            settings=SETTINGS,
            last=len(history),
            instance=instance,
            resources=home.resources(),
            progress=second_progress,
        )
        yield {
            "progress": (first_progress, second_progress),
            "first_run_ended": first_run_ended,
            "history": history,
            "first": first,
            "second": second,
            "home": home,
            "repo_path": str(root / "repo"),
            "instance": instance,
            "new_starts": len(home.starts()) - starts_after_first,
        }


def test_exactly_the_regression_commit_is_flagged(backfilled):
    history, points = backfilled["history"], backfilled["first"].points
    assert [p["commit"] for p in points] == [c.sha for c in history]
    flagged = [p["commit"] for p in points if p["flagged"]]
    regression = [c.sha for c in history if c.kind == "regression"]
    assert flagged == regression
    point = next(p for p in points if p["commit"] == regression[0])
    assert point["flagged_tasks"] == ["triage/escalation_policy"]
    assert point["cohort_status"]["default"] == "regression flagged"
    assert point["task_flags"]["triage/escalation_policy"]["delta"] < -0.1


def test_a_cohort_added_is_annotated_and_never_flags_the_original_suite(backfilled):
    history, points = backfilled["history"], backfilled["first"].points
    added = next(c.sha for c in history if c.kind == "cohort_added")
    point = next(p for p in points if p["commit"] == added)
    assert not point["flagged"]
    assert point["cohort_status"]["hard"] == "2 evals added"
    assert point["cohort_status"]["default"] == "no regression"
    assert [a["kind"] for a in point["annotations"]] == ["cohort_added"]
    # The combined mean drops because the new evals are harder, while the original suite holds.
    before = points[points.index(point) - 1]
    assert point["combined"]["mean"] < before["combined"]["mean"]
    assert point["cohorts"]["default"]["mean"] == pytest.approx(before["cohorts"]["default"]["mean"], abs=0.02)
    later = points[points.index(point) + 1]
    assert later["cohort_status"]["hard"] == "no regression"


def test_points_hold_intervals_per_task_cohort_and_combined(backfilled):
    for point in backfilled["first"].points:
        for name, task in point["tasks"].items():
            lo, hi = task["interval"]
            assert lo <= task["mean"] <= hi, name
            assert task["inputs"] == 64 and task["stop"].startswith("reached the per-task cap")
        for pool in [*point["cohorts"].values(), point["combined"]]:
            lo, hi = pool["interval"]
            assert lo <= pool["mean"] <= hi
            assert pool["inputs"] == 64 * len(pool["tasks"])


def test_a_second_backfill_starts_no_sandbox(backfilled):
    assert backfilled["first"].measured == 12
    assert backfilled["second"].measured == 0
    assert backfilled["new_starts"] == 0
    assert [p["commit"] for p in backfilled["second"].points] == [p["commit"] for p in backfilled["first"].points]


def test_the_backfill_is_one_recorded_run_of_the_defined_job(backfilled):
    runs = backfilled["instance"].get_runs()
    assert {r.job_name for r in runs} == {"cohort_series_job"}
    assert backfilled["first"].runs == 1
    keys = backfilled["instance"].get_dynamic_partitions("main_commits")
    assert keys == [f"{REPO}@{c.sha}" for c in backfilled["history"]]
    mats = backfilled["instance"].fetch_materializations(dg.AssetKey("cohort_series"), limit=100).records
    assert {m.partition_key for m in mats} == set(keys)


def test_chart_and_sql_view_exist(backfilled):
    lake = backfilled["home"].lake()
    png = lake.read_bytes(LAYOUT.series_chart(REPO, "main", "png"))
    assert png.startswith(b"\x89PNG")
    assert b"<svg" in lake.read_bytes(LAYOUT.series_chart(REPO, "main", "svg"))
    mats = backfilled["instance"].fetch_materializations(dg.AssetKey("cohort_series"), limit=1).records
    metadata = mats[0].asset_materialization.metadata  # the newest point's: it carries the panel
    (panel,) = re.findall(r"base64,([A-Za-z0-9+/=]+)\)", metadata["chart"].value)
    assert png_size(base64.b64decode(panel))[0] <= PANEL_WIDTH  # fits the UI's metadata panel
    assert metadata["chart_path"].value.endswith(".svg")
    con = duck.connect(lake)
    rows = con.sql(
        "select scope, name, flagged, annotation from cohort_series "
        "where scope <> 'task' order by position, scope, name"
    ).fetchall()
    assert sum(1 for r in rows if r[0] == "combined") == 12
    assert sum(1 for r in rows if r[0] == "cohort" and r[2]) == 1  # the one flagged cohort point
    assert any(r[1] == "hard" and r[3] and "added" in r[3] for r in rows)


def _partition_materializations(backfilled) -> dict[str, list]:
    records = backfilled["instance"].fetch_materializations(dg.AssetKey("cohort_series"), limit=1000).records
    by_partition: dict[str, list] = {}
    for record in sorted(records, key=lambda r: r.storage_id):
        by_partition.setdefault(record.partition_key, []).append(record)
    return by_partition


def test_each_partition_is_materialized_once_per_run_with_its_own_point(backfilled):
    by_partition = _partition_materializations(backfilled)
    points = {p["commit"]: p for p in backfilled["first"].points}
    assert set(by_partition) == {f"{REPO}@{sha}" for sha in points}
    for key, (first, second) in by_partition.items():  # one per backfill run, no run-wide blob
        point = points[key.split("@")[1]]
        meta = first.asset_materialization.metadata
        assert meta["reading"].value == "\n".join(f"- {line}" for line in series.reading(point))
        assert f"`{point['commit'][:7]}`" in meta["point"].value
        assert (
            meta["measured_now"].value is True and second.asset_materialization.metadata["measured_now"].value is False
        )
        assert meta["flagged"].value is bool(point["flagged"])
        assert meta["windows_run"].value == point["execution"]["windows_run"] > 0
        assert second.asset_materialization.metadata["windows_run"].value == 0
        assert meta["chart_path"].value.endswith(f"{Path(LAYOUT.series_chart(REPO, 'main', 'svg')).name}")
    readings = {r[0].asset_materialization.metadata["reading"].value for r in by_partition.values()}
    assert len(readings) > 1  # the partitions say different things: each its own point


def test_points_are_materialized_as_they_land_not_at_the_end_of_the_run(backfilled):
    """Points are measured up to the worker count at once and recorded oldest first: each
    point's materialization is in the instance before the point ``workers`` places after it
    starts (that point waits for its slot), so the UI's backfill page counts points while a range
    is still running; with two workers or more, the next point's windows ran before the earlier
    point was recorded (the points really overlapped)."""
    by_partition = _partition_materializations(backfilled)
    timeline, _ = backfilled["progress"]
    history = backfilled["history"]
    workers = backfilled["home"].resources()["sandbox"].worker_count()
    first_window = {}
    for kind, at, commit in timeline.events:
        if kind == "window":
            first_window.setdefault(commit, at)
    landed = [by_partition[f"{REPO}@{c.sha}"][0].timestamp for c in history]
    assert landed == sorted(landed)  # recorded oldest first
    for i, commit in enumerate(history[:-workers]):
        assert landed[i] <= first_window[history[i + workers].sha], commit.sha
    assert landed[0] < backfilled["first_run_ended"] - 1.0
    if workers >= 2:
        assert any(first_window[later.sha] < landed[i] for i, later in enumerate(history[1:])), (
            "no point started before the one before it was recorded"
        )


def test_the_flagged_commit_fails_its_partition_check_and_no_other_does(backfilled):
    from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

    from evalrunner_assets.assets.series import NO_REGRESSION_CHECK

    key = dg.AssetCheckKey(dg.AssetKey("cohort_series"), NO_REGRESSION_CHECK)
    history = backfilled["instance"].event_log_storage.get_asset_check_execution_history(key, limit=1000)
    regression = next(c.sha for c in backfilled["history"] if c.kind == "regression")
    failed = {r.partition for r in history if r.status == AssetCheckExecutionRecordStatus.FAILED}
    assert failed == {f"{REPO}@{regression}"}
    assert {r.partition for r in history} == {f"{REPO}@{c.sha}" for c in backfilled["history"]}
    evaluation = next(r for r in history if r.status == AssetCheckExecutionRecordStatus.FAILED).evaluation
    assert evaluation.severity == dg.AssetCheckSeverity.ERROR
    meta = evaluation.metadata
    assert meta["cohort"].value == "default" and meta["eval"].value == "triage/escalation_policy"
    assert meta["delta"].value < -0.1
    (finding,) = meta["regressions"].value
    lo, hi = finding["interval"]
    assert lo <= finding["delta"] <= hi < 0
    assert "default: triage/escalation_policy dropped -0." in (evaluation.description or "")


def test_the_cohorts_pages_show_the_series_its_flagged_commit_and_the_evals_added(backfilled):
    from starlette.testclient import TestClient

    from evalrunner_assets.http.web import create_app
    from evalrunner_assets.report import links
    from lake.storage import Lake

    history = backfilled["history"]
    client = TestClient(create_app(Lake(str(backfilled["home"].lake_root))))
    listing = client.get(links.cohorts_path())
    assert listing.status_code == 200
    [href] = re.findall(r'href="(/cohorts/[^"]+)"', listing.text)
    assert href.replace("&amp;", "&") == links.series_path(REPO, "main")
    assert f'<td class="num">{len(history)}</td>' in listing.text and '<span class="pill bad">1</span>' in listing.text
    page = client.get(href.replace("&amp;", "&"))
    assert page.status_code == 200
    rows = re.findall(
        r"<tr( class=\"flagged\")?>\s*<td class=\"num\">(\d+)</td>\s*<td><code>([0-9a-f]{7})</code>", page.text
    )
    assert [sha for _, _, sha in rows] == [c.sha[:7] for c in reversed(history)]  # newest first
    regression = next(c.sha for c in history if c.kind == "regression")
    assert [sha for flagged, _, sha in rows if flagged] == [regression[:7]]
    added = next(c for c in history if c.kind == "cohort_added")
    row = page.text.split(f"<code>{added.sha[:7]}</code>", 1)[1].split("</tr>", 1)[0]
    assert re.search(r"\d+ evals? added \(new cohort ", row), row
    chart = client.get(links.series_path(REPO) + "/chart.svg", params={"branch": "main"})
    assert chart.status_code == 200 and chart.content.lstrip().startswith(b"<svg")
    assert client.get(links.series_path("nobody/else")).status_code == 404
    assert client.get(links.series_path(REPO, "no-such-branch")).status_code == 404


def test_the_regression_check_reads_a_points_flags():
    flag = {"cohort": "hard", "delta": -0.21, "interval": [-0.35, -0.07], "pairs": 48, "label": "regressed"}
    point = {
        "commit": "c" * 40,
        "previous": "b" * 40,
        "combined": {"not_measured": None},
        "task_flags": {"qa/x": {**flag, "compared_with": "a" * 40}, "qa/y": {**flag, "label": "unchanged"}},
        "flagged_tasks": ["qa/x"],
    }
    check = series.regression_check(point)
    assert not check.passed and check.severity == "error"
    assert check.findings == [
        {
            "cohort": "hard",
            "eval": "qa/x",
            "delta": -0.21,
            "interval": [-0.35, -0.07],
            "pairs": 48,
            "compared_with": "a" * 40,
        }
    ]
    assert (
        check.description == "hard: qa/x dropped -0.21 (95% interval -0.35 to -0.07, 48 paired inputs) against aaaaaaa"
    )
    calm = series.regression_check({**point, "flagged_tasks": []})
    assert calm.passed and calm.description.startswith("no cohort regressed (2 evals compared")
    first = series.regression_check({**point, "flagged_tasks": [], "task_flags": {}, "previous": None})
    assert first.passed and "first point" in first.description
    broken = series.regression_check({**point, "flagged_tasks": [], "combined": {"not_measured": "16/16 raised"}})
    assert not broken.passed and broken.severity == "warn" and "not measured" in broken.description


def test_the_backfill_shows_its_progress_point_by_point(backfilled):
    first, second = (t.out.getvalue().splitlines() for t in backfilled["progress"])
    n = len(backfilled["history"])
    assert len(first) == n + 1 and first[0].startswith(f"points 0/{n} (0 measured")  # the plan, then a line per point
    windows = sum(p["execution"]["windows_run"] for p in backfilled["first"].points)
    samples = sum(t["samples"] for p in backfilled["first"].points for t in p["tasks"].values())
    assert first[-1].startswith(f"points {n}/{n} ({n} measured, 0 already measured) · windows {windows} run")
    assert f"samples {samples:,}" in first[-1] and "ETA" not in first[-1]
    assert "ETA " in first[1] and "flagged " in first[-1]
    assert second[-1].startswith(f"points {n}/{n} (0 measured, {n} already measured) · windows 0 run")


def test_progress_eta_follows_the_pace_of_measured_points():
    now = [100.0]
    progress = SeriesProgress(0, 0, clock=lambda: now[0])
    progress.plan(10, 4)  # 6 already in the lake
    assert progress.eta_s() is None
    progress.on_point({"commit": "a" * 40, "execution": {"cost_usd": 0.5}}, False)
    now[0] += 30.0
    progress.on_point({"commit": "b" * 40, "execution": {"cost_usd": 0.25}}, True)
    assert progress.eta_s() == pytest.approx(90.0)  # 30 s per measured point, 3 to go
    assert "spend $0.25" in progress.line() and "ETA 1m30s" in progress.line()
    progress.on_point({"commit": "c" * 40, "execution": {"cost_usd": None}}, True)
    assert "spend unknown" in progress.line()  # one unknown cost makes the total unknown


def test_the_regression_note_reaches_cohort_series_annotation(backfilled):
    regression = next(c.sha for c in backfilled["history"] if c.kind == "regression")
    con = duck.connect(backfilled["home"].lake())
    rows = con.sql(
        'select scope, name, flagged, errored, annotation from cohort_series where "commit" = ? order by scope, name',
        params=[regression],
    ).fetchall()
    noted = {(scope, name) for scope, name, flagged, _, note in rows if flagged and note and "regressed" in note}
    assert noted == {("combined", "combined"), ("cohort", "default"), ("task", "triage/escalation_policy")}
    assert all(errored == 0 for *_, errored, _ in rows)  # the simulated agent never raises
    assert (
        "triage/escalation_policy regressed (-0." in dict(((s, n), a) for s, n, _, _, a in rows)[("cohort", "default")]
    )


def test_each_point_runs_the_model_its_commit_agent_config_names(backfilled):
    for point in backfilled["first"].points:
        assert point["model"] == {
            "model": "simagent/support-agent",
            "model_args": {},
            "source": "agent config (agent.yaml)",
        }


def test_the_model_choice_follows_the_agent_config_unless_the_series_names_one():
    from evalrunner_assets.discovery import AgentModel

    agent = AgentModel(model="openai/gpt-4o-mini", model_args={"temperature": 0.2}, file="agent.yml")
    follows = series.SeriesSettings().model_choice(agent)
    assert follows == {
        "model": "openai/gpt-4o-mini",
        "model_args": {"temperature": 0.2},
        "source": "agent config (agent.yml)",
    }
    named = series.SeriesSettings(model="simagent/support-agent-large", model_override=True).model_choice(agent)
    assert named == {"model": "simagent/support-agent-large", "model_args": {}, "source": "run setting"}
    assert series.SeriesSettings().model_choice(None)["source"] == "default"
    # A point's windows are found again under the model it ran, not the series default.
    point = {"settings": series.SeriesSettings().to_dict(), "model": follows}
    assert series.point_run_settings(point).run_settings().model == "openai/gpt-4o-mini"


def test_history_selection():
    history = [
        series.MainCommit(sha=f"{i:040x}", committed_at=f"2025-01-{i + 1:02d}T00:00:00+00:00", subject="", position=i)
        for i in range(10)
    ]
    assert [c.position for c in series.select_commits(history, last=3)] == [7, 8, 9]
    assert [c.position for c in series.select_commits(history, every=4)] == [1, 5, 9]
    assert [c.position for c in series.select_commits(history, since="2025-01-08")] == [7, 8, 9]
    with pytest.raises(series.SeriesError, match="--since"):
        series.select_commits(history, since="last tuesday")
    with pytest.raises(series.SeriesError, match="--every"):
        series.select_commits(history, every=0)


def test_mean_sequence_covers_at_any_look():
    import numpy as np

    from evalrunner_assets.stats import mean_sequence_interval

    rng = np.random.default_rng(7)
    misses = 0
    for _ in range(200):
        x = (rng.random(128) < 0.3).astype(float)
        lo, hi = mean_sequence_interval(x, 0.05, looks=[16, 32, 64, 128])
        misses += not (lo <= 0.3 <= hi)
    assert misses / 200 <= 0.05


def test_settings_are_validated():
    with pytest.raises(series.SeriesError, match="half_width"):
        series.SeriesSettings(half_width=0.0)
    with pytest.raises(series.SeriesError, match="cap"):
        series.SeriesSettings(cap=0)


def test_a_push_to_main_through_the_receiver_adds_its_point(backfilled, tmp_path):
    """A new main commit, a signed ``push`` delivery through the real receiver on loopback, the
    real ``pr_sensor`` → a ``cohort_series`` run for that commit's partition → its point,
    compared with the newest backfilled point."""
    import json as _json

    from evalrunner_assets.http.webhook import ReceiverConfig, create_app
    from sensors.pr import pr_sensor
    from tests.helpers.git_repos import commit_files
    from tests.helpers.github_harness import deliver
    from tests.helpers.github_standin import LoopbackServer
    from tests.helpers.shared_files import shared_path
    from tests.helpers.webhook_delivery import retarget

    home, instance = backfilled["home"], backfilled["instance"]
    repo_path = Path(backfilled["repo_path"])
    new_sha = commit_files(
        repo_path,
        {"README.md": (repo_path / "README.md").read_text() + "\nOne more note.\n"},
        message="README: one more note",
    )
    payload = retarget(_json.loads(shared_path("fixtures/github-webhooks/push.json").read_text()), REPO)
    payload.update({"ref": "refs/heads/main", "after": new_sha, "deleted": False, "created": False})
    resources = home.resources()
    lake = home.lake()
    with LoopbackServer(create_app(ReceiverConfig(secret=SECRET, allowed_repos=frozenset({REPO})), lake)) as rx:
        status, answer = deliver(rx, SECRET, "push", payload, "push-delivery-1")
    assert status == 202, answer
    context = dg.build_sensor_context(instance=instance, resources=resources)
    result = pr_sensor(context)
    key = f"{REPO}@{new_sha}"
    runs = [r for r in result.run_requests if r.job_name == "cohort_series_job"]
    assert [(r.partition_key, r.run_key) for r in runs] == [(key, f"series:{key}")]
    for req in result.dynamic_partitions_requests:
        instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
    assert instance.get_dynamic_partitions("main_commits")[-1] == key
    from evalrunner_assets.definitions import defs

    run = defs.resolve_job_def("cohort_series_job").execute_in_process(
        instance=instance, resources=resources, partition_key=key, raise_on_error=False
    )
    assert run.success
    point = series.load_point(lake, REPO, new_sha)
    assert point is not None and point["previous"] == backfilled["history"][-1].sha
    assert not point["flagged"] and point["position"] == len(backfilled["history"])


@pytest.mark.parametrize(
    "cohort, problem",
    [("Hard Tasks!", "is not a cohort name"), ("-hard", "is not a cohort name"), ("x" * 64, "is too long")],
)
def test_a_bad_cohort_is_refused_naming_the_task(cohort, problem):
    from evalrunner_assets.discovery import ManifestSchemaError
    from evalrunner_assets.discovery._manifest import validate_manifest

    manifest = {
        "version": 1,
        "tasks": [
            {"id": "triage/a", "spec": "evals/t.py@a"},
            {"id": "triage/b", "spec": "evals/t.py@b", "cohort": cohort},
        ],
    }
    with pytest.raises(ManifestSchemaError) as err:
        validate_manifest(manifest)
    assert "$.tasks[1].cohort" in str(err.value) and problem in str(err.value) and "'triage/b'" in str(err.value)
    manifest["tasks"][1]["cohort"] = "hard.v2"
    assert [t.cohort for t in validate_manifest(manifest).tasks] == ["default", "hard.v2"]
