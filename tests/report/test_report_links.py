"""Deep links from the reports to the web pages (``EVALRUNNER_WEB_URL``): the PR comment, the
check run's Details link and the Dagster materialization; unset, the reports have no links and
read as before. GitHub is the REST stand-in on loopback (mocked: github.com is not reachable)."""

from __future__ import annotations

import json
import re

import pytest

from evalrunner_assets.errors import UserError
from evalrunner_assets.pipeline.publish import SavedComparison, write_report
from evalrunner_assets.report.links import WEB_URL_ENV, WebLinks, parse_web_url, trajectories_path, web_links
from evalrunner_assets.report.markdown import render_comment
from lake import LAYOUT, open_lake
from resources.github import GitHubResource
from tests.helpers.comparison_fixture import document
from tests.helpers.github_standin import GitHubStandin

BASE_URL = "https://evalrunner.example.com/web"
TOKEN = "ghp_links_token"


def test_unset_or_empty_means_no_links_and_a_bad_url_names_the_variable() -> None:
    assert web_links({}) is None and web_links({WEB_URL_ENV: "  "}) is None
    assert web_links({WEB_URL_ENV: BASE_URL + "/"}) == WebLinks(BASE_URL)
    for bad in ("evalrunner.example.com/web", "ftp://host/web", "https://", f"{BASE_URL}?x=1", f"{BASE_URL}#top"):
        with pytest.raises(UserError, match=WEB_URL_ENV):
            parse_web_url(bad)


def test_task_names_and_sample_ids_are_encoded_into_the_paths() -> None:
    path = trajectories_path("acme/agent", "a" * 40, "triage/two words#1", "b" * 40)
    assert path == f"/trajectories/acme/agent/{'a' * 40}/triage/two%20words%231?base={'b' * 40}"


def test_without_a_web_url_the_comment_links_nowhere(monkeypatch) -> None:
    monkeypatch.delenv(WEB_URL_ENV, raising=False)
    doc = document()
    body = render_comment(doc)
    assert body == render_comment(doc, links=None) and not re.search(r"\]\(https?://", body)


def test_the_comment_links_each_eval_to_its_trajectories_and_the_whole_to_its_page() -> None:
    doc = document()
    links = WebLinks(BASE_URL)
    body = render_comment(doc, links=links)
    page = f"{BASE_URL}/prs/{doc.repo}/{doc.pr}/{doc.head_sha}"
    assert f"[Open this comparison]({page})" in body
    for task, _ in doc.ordered_tasks():
        url = f"{BASE_URL}/trajectories/{doc.repo}/{doc.head_sha}/{task}?base={doc.base_sha}"
        assert f"| [`{task}`]({url}) |" in body, task
    # Only the links are new: the same comment with them taken out is the comment without them.
    unlinked = re.sub(r"\[(`[^`]+`)\]\([^)]+\)", r"\1", body)
    unlinked = unlinked.replace(f"\n\n[Open this comparison]({page}): the chart, spend, and each sample's "
                                "trajectory, head beside base.", "")  # fmt: skip
    assert unlinked == render_comment(doc)


def test_the_check_runs_details_link_and_the_comment_reach_github(tmp_path, monkeypatch) -> None:
    doc = document()
    doc.pr = "7"  # the demo's document is of a local comparison ("demo"): nothing is posted for it
    with GitHubStandin(token=TOKEN) as gh:
        gh.add_repo(doc.repo)
        gh.add_pull(doc.repo, int(doc.pr), doc.head_sha, doc.base_sha)
        monkeypatch.setenv("EVALRUNNER_GITHUB_TOKEN", TOKEN)
        poster = GitHubResource(base_url=gh.base_url, throttle=False, backoff_seconds=0.01)
        the_lake = open_lake(str(tmp_path / "lake"))

        monkeypatch.delenv(WEB_URL_ENV, raising=False)
        write_report(the_lake, doc, poster)
        (run,) = gh.check_runs_for(doc.repo, doc.head_sha)
        assert run["details_url"] is None

        # Configured later: the same verdict again now carries the Details link (edited, not left).
        monkeypatch.setenv(WEB_URL_ENV, BASE_URL)
        written = write_report(the_lake, doc, poster)
        page = f"{BASE_URL}/prs/{doc.repo}/{doc.pr}/{doc.head_sha}"
        (run,) = gh.check_runs_for(doc.repo, doc.head_sha)
        assert run["details_url"] == page and written.check["details_url"] == page
        saved = json.loads(
            the_lake.read_bytes(LAYOUT.comparison_artifact(doc.repo, doc.pr, doc.head_sha, "check_run.json"))
        )
        assert saved["details_url"] == page
        (comment,) = gh.comments_on(doc.repo, int(doc.pr))
        assert f"[Open this comparison]({page})" in comment["body"]


def test_a_bad_web_url_stops_the_report_with_the_variables_name(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(WEB_URL_ENV, "evalrunner.example.com")
    with pytest.raises(UserError, match=f"{WEB_URL_ENV}='evalrunner.example.com' is not an http"):
        write_report(open_lake(str(tmp_path / "lake")), document())


def test_the_dagster_materialization_links_to_the_page(monkeypatch) -> None:
    from evalrunner_assets.assets.metadata import comparison_metadata

    doc = document()
    saved = SavedComparison(doc, "lake/comparison.json", None)
    monkeypatch.delenv(WEB_URL_ENV, raising=False)
    assert "page" not in comparison_metadata(saved)
    monkeypatch.setenv(WEB_URL_ENV, BASE_URL)
    page = comparison_metadata(saved)["page"]
    assert page.url == f"{BASE_URL}/prs/{doc.repo}/{doc.pr}/{doc.head_sha}"
