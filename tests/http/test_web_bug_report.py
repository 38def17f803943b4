"""The web app's bug report: a pasted failure trace is previewed (personal values highlighted on
the left, placeholders on the right) without anything written, and "Submit eval" (the run API's
token) opens the PR adding the anonymised eval on the stand-in GitHub (mocked: github.com is not
reachable). Real `evalrunner serve`, real Chromium, the real example repository and lake; none of
the trace's planted personal values reaches the PR, the lake or serve's log."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from evalrunner_assets.example_repo import build_example_repo
from evalrunner_assets.http.web import create_app
from lake.storage import Lake
from resources import GitHubResource, LakeResource, RepoResource
from tests.helpers.github_standin import GitHubStandin
from tests.helpers.wild_trace import PLANTED, TRACE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
REPO = "example/support-agent"
GITHUB_TOKEN = "bug-report-github-token"
ACTION_TOKEN = "bug-report-action-token"
FORM = {"scorer_kind": "contains", "scorer_value": "refund", "cohort": "customer-reported/2026-Q4", "repo": REPO}


@pytest.fixture
def hosted(tmp_path):
    """The example as GitHub.com holds it (a bare clone the stand-in serves and commits to),
    registered in the home's lake as where the repository is fetched from."""
    repo = build_example_repo(tmp_path / "repo", variants=()).path
    bare = tmp_path / "github.example" / "support-agent.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(bare)], check=True)
    home = tmp_path / "home"
    lake = Lake(str(home / "lake"))
    RepoResource(cache_dir=str(home / "repos")).register(lake, REPO, f"file://{bare}")
    with GitHubStandin(token=GITHUB_TOKEN) as standin:
        standin.add_repo(REPO, git_dir=bare)
        yield {"home": home, "lake": lake, "standin": standin, "bare": bare}


def _lake_files(home: Path) -> dict[str, bytes]:
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file()}


def _app(hosted, *, token: str | None = ACTION_TOKEN):
    from evalrunner_assets.driver.wild import open_wild_pr

    home = hosted["home"]
    token_file = home / "github-token"
    token_file.write_text(GITHUB_TOKEN)
    resources = {
        "lake": LakeResource(root=str(home / "lake")),
        "repos": RepoResource(cache_dir=str(home / "repos"), export_dir=str(home / "exports")),
        "github": GitHubResource(base_url=hosted["standin"].base_url, token_file=str(token_file), throttle=False),
    }
    return create_app(
        hosted["lake"], action_token=token, submit_wild_eval=lambda repo, sub: open_wild_pr(resources, repo, sub)
    )


def test_the_preview_marks_every_planted_value_sends_none_and_writes_nothing(hosted):
    client = TestClient(_app(hosted))
    form = client.get("/report")
    assert form.status_code == 200 and re.search(rf"<option( selected)?>{REPO}</option>", form.text)
    before = _lake_files(hosted["home"])
    page = client.post("/report/preview", data={**FORM, "trace": json.dumps(TRACE)})
    assert page.status_code == 200, page.text[-2000:]
    assert page.headers["cache-control"] == "no-store"
    left, right = page.text.split('<div class="pane sent">', 1)
    right = right.split('<form class="action"', 1)[0]
    marked = set(re.findall(r'<mark title="\w+">([^<]+)</mark>', left))
    for value in PLANTED:
        assert any(value in m or m in value for m in marked), f"{value!r} is not highlighted"
        assert value not in right, f"{value!r} would be sent"
    assert "{{person_1}}" in right and "{{order_id_1}}" in right
    assert "wild/" in right and ".evals/list" in right and "customer-reported/2026-Q4" in right
    assert _lake_files(hosted["home"]) == before  # a preview writes nothing
    assert hosted["standin"].pulls_on(REPO) == []


@pytest.mark.parametrize(
    ("trace", "says"),
    [
        ("", "trace: paste the failed conversation"),
        ("this is not a trace", "pasted trace: line 1 is not JSON"),
        (json.dumps({**TRACE, "outcome": "success"}), "none of its 1 conversation(s) failed"),
        (json.dumps({"eval": {}, "samples": []}), "an Inspect log is read from its file"),
    ],
)
def test_bad_input_is_named_on_the_form_again_and_nothing_is_written(hosted, trace, says):
    client = TestClient(_app(hosted))
    before = _lake_files(hosted["home"])
    page = client.post("/report/preview", data={**FORM, "trace": trace})
    assert page.status_code == 400 and says in page.text, page.text[-1500:]
    assert 'role="alert"' in page.text and 'name="trace"' in page.text  # the form, with what was typed
    assert _lake_files(hosted["home"]) == before


def test_submitting_needs_the_token_and_a_known_repository(hosted):
    client = TestClient(_app(hosted))
    data = {**FORM, "trace": json.dumps(TRACE)}
    assert client.post("/report/submit", data={**data, "token": "wrong"}).status_code == 401
    assert client.post("/report/submit", data=data).status_code == 401
    off = TestClient(_app(hosted, token=None)).post("/report/submit", data={**data, "token": ACTION_TOKEN})
    assert off.status_code == 503 and "EVALRUNNER_API_TOKEN" in off.text
    assert "Submit eval" not in TestClient(_app(hosted, token=None)).post("/report/preview", data=data).text
    unknown = client.post("/report/submit", data={**data, "repo": "someone/else", "token": ACTION_TOKEN})
    assert unknown.status_code == 400 and "no source recorded for repository &#39;someone/else&#39;" in unknown.text
    assert hosted["standin"].pulls_on(REPO) == []


def test_in_a_real_browser_a_pasted_failure_is_previewed_and_submitted_as_a_pr_with_no_personal_value(hosted, tmp_path):
    from tests.helpers.web_browser import (
        Visit,
        artifacts_dir,
        axe_source,
        launched_chromium,
        serious_violations,
        served_pages,
    )

    standin, axe, shots = hosted["standin"], axe_source(), artifacts_dir()
    log = tmp_path / "serve.log"
    settings = {
        "EVALRUNNER_API_TOKEN": ACTION_TOKEN,
        "EVALRUNNER_GITHUB_API_URL": standin.base_url,
        "EVALRUNNER_GITHUB_TOKEN": GITHUB_TOKEN,
    }
    with launched_chromium() as browser, served_pages(hosted["home"], log, **settings) as web:
        visit = Visit(browser, 1280)
        try:
            visit.open(web + "/prs")
            visit.follow('nav a[href$="/report"]')
            assert serious_violations(visit.page, axe) == []
            visit.page.fill("#trace", json.dumps(TRACE))
            visit.page.select_option("#scorer_kind", "contains")
            visit.page.fill("#scorer_value", "refund")
            with visit.page.expect_navigation():
                visit.page.get_by_role("button", name="Preview").click()
            assert visit.page.locator("mark").count() >= len(PLANTED)
            assert serious_violations(visit.page, axe) == []
            visit.page.screenshot(path=str(shots / "report-preview-1280.png"), full_page=True)
            visit.page.fill("#token", ACTION_TOKEN)
            with visit.page.expect_navigation():
                visit.page.get_by_role("button", name="Submit eval").click()
            sent = visit.page.content()
            visit.page.screenshot(path=str(shots / "report-sent-1280.png"), full_page=True)
            assert visit.problems == [], visit.problems
        finally:
            visit.close()
    (pull,) = standin.pulls_on(REPO)
    assert f"#{pull['number']}" in sent and pull["head"]["ref"].startswith("wild/")
    diff = standin.git(REPO, "diff", pull["base"]["sha"], pull["head"]["sha"])
    assert "evals/wild/" in diff and ".evals/list" in diff and "customer-reported" in diff
    everything = [diff, pull["body"], pull["title"], sent, log.read_text(errors="replace")]
    everything += [b.decode("utf-8", "replace") for b in _lake_files(hosted["home"] / "lake").values()]
    for value in PLANTED:
        assert not any(value in text for text in everything), f"{value!r} left the preview"
