"""The pages of one comparison that read only its document, on a real lake directory holding
one: "how many samples until we know?" (its figures are the document's: samples, spend,
per-task pairs and the interval at the stop; fixed n is every input the cap allows on both arms)
and the run page (windows landed and to run; reloads itself while the comparison runs)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from evalrunner_assets.documents.comparison import ComparisonDocument
from evalrunner_assets.errors import UserError
from evalrunner_assets.http.web import create_app
from evalrunner_assets.http.web.app import inspect_view_url_from_env, run_refresh_seconds
from evalrunner_assets.http.web.pages import budget, run_tasks
from evalrunner_assets.report import links
from lake.layout import LAYOUT
from lake.storage import Lake
from tests.helpers.comparison_fixture import FIXTURE, running


def _lake_with(tmp_path: Path, raw: dict) -> Lake:
    lake = Lake(str(tmp_path / "lake"))
    lake.write_bytes(LAYOUT.comparison(raw["repo"], raw["pr"], raw["head_sha"]), json.dumps(raw).encode())
    return lake


def test_the_figures_are_the_documents() -> None:
    raw = json.loads(FIXTURE.read_text())
    doc = ComparisonDocument.model_validate(raw)
    b = budget(doc)
    assert b.adaptive_samples == raw["samples_run"]
    # every input the cap allows, on both arms, once per epoch
    assert b.fixed_samples == sum(2 * t["pairs_limit"] for t in raw["tasks"].values()) == raw["samples_possible"]
    assert b.saved is not None and abs(b.saved - (1 - raw["samples_run"] / raw["samples_possible"])) < 1e-12
    assert (
        b.fixed_usd is not None
        and abs(b.fixed_usd - raw["spend_usd"] * raw["samples_possible"] / raw["samples_run"]) < 1e-9
    )
    by_task = {t.task: t for t in b.tasks}
    for name, t in raw["tasks"].items():
        d = t["decision"]
        assert (by_task[name].pairs, by_task[name].decided_at, by_task[name].looks) == (
            d["pairs"],
            d["decided_at"],
            len(t["path"]),
        )
        assert by_task[name].width == d["anytime_interval"]["hi"] - d["anytime_interval"]["lo"]


def test_unknown_spend_gives_no_dollar_figure_rather_than_a_guess() -> None:
    raw = json.loads(FIXTURE.read_text())
    raw["spend_known"], raw["spend_usd"] = False, None
    b = budget(ComparisonDocument.model_validate(raw))
    assert b.adaptive_usd is None and b.fixed_usd is None and b.saved is not None


def test_the_page_is_linked_from_the_pr_page_and_shows_the_tiles_and_every_task(tmp_path: Path) -> None:
    raw = json.loads(FIXTURE.read_text())
    client = TestClient(create_app(_lake_with(tmp_path, raw)))
    pr = client.get(links.pull_request_path(raw["repo"], raw["pr"], raw["head_sha"]))
    assert pr.status_code == 200
    [href] = re.findall(r'href="([^"]+/budget)"', pr.text)
    assert href == links.budget_path(raw["repo"], raw["pr"], raw["head_sha"])
    page = client.get(href)
    assert page.status_code == 200 and "default-src 'none'" in page.headers["content-security-policy"]
    text = page.text
    assert f"{raw['samples_possible']:,} samples" in text and f"{raw['samples_run']:,} samples" in text
    saved = round(100 * (1 - raw["samples_run"] / raw["samples_possible"]))
    assert f"{saved}%" in text
    for name, t in raw["tasks"].items():
        assert name in text and f"{t['decision']['pairs']} / {t['pairs_limit']}" in text
    assert "/chart.svg" in text and "<script" not in text.lower()
    assert client.get(links.budget_path(raw["repo"], raw["pr"], "0" * 40)).status_code == 404


def test_the_run_page_counts_windows_to_run_per_task_and_reloads_only_while_running(tmp_path: Path) -> None:
    raw = json.loads(FIXTURE.read_text())
    tasks = run_tasks(ComparisonDocument.model_validate(running(raw)))
    first = raw["task_order"][0]
    assert [(t.task, t.state, t.windows_to_run) for t in tasks][0] == (first, "running", {"head": 1, "base": 1})
    assert all(t.state == "done" and t.windows_to_run == {"head": 0, "base": 0} for t in tasks[1:])
    assert [t.samples for t in tasks] == [
        raw["tasks"][t.task]["head"]["samples"] + raw["tasks"][t.task]["base"]["samples"] for t in tasks
    ]

    path = links.run_path(raw["repo"], raw["pr"], raw["head_sha"])
    ended = TestClient(create_app(_lake_with(tmp_path / "ended", raw))).get(path)
    assert ended.status_code == 200 and 'http-equiv="refresh"' not in ended.text
    live = TestClient(create_app(_lake_with(tmp_path / "live", running(raw)))).get(path)
    assert live.status_code == 200 and '<meta http-equiv="refresh" content="5">' in live.text
    assert "1 · 1" in live.text and f"{raw['samples_run']:,} of {raw['samples_possible']:,}" in live.text


@pytest.mark.parametrize("value", ["0", "-3", "soon", "2.5"])
def test_a_bad_refresh_setting_is_refused_naming_the_variable(value: str) -> None:
    with pytest.raises(UserError, match="EVALRUNNER_WEB_REFRESH_S"):
        run_refresh_seconds({"EVALRUNNER_WEB_REFRESH_S": value})
    assert run_refresh_seconds({}) == 5 and run_refresh_seconds({"EVALRUNNER_WEB_REFRESH_S": "2"}) == 2


@pytest.mark.parametrize(
    "value", ["127.0.0.1:7575", "ftp://h:7575", "http://", "http://h:7575/?x=1", "http://h:7575/#/logs"]
)
def test_a_bad_inspect_view_url_is_refused_naming_the_variable(value):
    with pytest.raises(UserError, match="EVALRUNNER_INSPECT_VIEW_URL"):
        inspect_view_url_from_env({"EVALRUNNER_INSPECT_VIEW_URL": value})


def test_the_inspect_view_url_is_optional_and_loses_its_trailing_slash():
    assert (
        inspect_view_url_from_env({}) is None
        and inspect_view_url_from_env({"EVALRUNNER_INSPECT_VIEW_URL": " "}) is None
    )
    assert inspect_view_url_from_env({"EVALRUNNER_INSPECT_VIEW_URL": "https://h/view/"}) == "https://h/view"
