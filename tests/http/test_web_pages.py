"""The web app's pages over lakes that real comparisons wrote (real git, bubblewrap sandboxes,
Inspect and the lake): the pull-request list and page, the trajectory list and one trajectory's
event stream with head and base side by side, the failing turn marked and the miner's notes on
it; repository content that looks like markup is shown as text."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from evalrunner_assets.example_repo import build_example_repo
from evalrunner_assets.http.web import create_app
from lake.storage import Lake
from tests.helpers.compare_runs import lake, run_compare
from tests.helpers.gate_tasks import SOLVE, TASKS
from tests.helpers.git_repos import commit_files, git
from tests.helpers.web_browser import Visit

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
HOSTILE = "<script>alert('owned')</script>"
REPO = "example/support-agent"
TASK = "triage/runbook_lookup"


def _client(home: Path) -> TestClient:
    return TestClient(create_app(Lake(str(lake(home))), dagster_url="http://dagster.example:3000"))


@pytest.fixture(scope="module")
def hostile_home(tmp_path_factory) -> Path:
    """A comparison of deterministic tasks (no model) whose inputs carry markup."""
    root = tmp_path_factory.mktemp("hostile")
    tasks = TASKS.replace('input=f"say {i}"', f'input=f"{HOSTILE} say {{i}}"')
    assert tasks != TASKS
    manifest = (
        '#!/bin/sh\necho \'{"version": 1, "tasks": [{"id": "qa/kept", "spec": "evals/qa.py@kept", "workdir": "."}]}\'\n'
    )
    repo = root / "repo"
    commit_files(repo, {"evals/qa.py": tasks, ".evals/list": manifest}, "base", executable=(".evals/list",))
    git(repo, "checkout", "-q", "-b", "head")
    # The head answers every fourth input wrong the other way round: a change to judge.
    commit_files(
        repo, {"evals/qa.py": tasks.replace(SOLVE, SOLVE + "        n = n + 1 if n % 4 == 1 else n\n")}, "head"
    )
    home = root / "home"
    home.mkdir()
    done = run_compare(home, repo, "--head", "head", timeout=600)
    assert done.returncode in (0, 4), done.stderr[-2000:]
    return home


def test_pull_request_list_and_page_show_the_verdict_tasks_intervals_and_links(hostile_home):
    client = _client(hostile_home)
    listing = client.get("/prs")
    assert listing.status_code == 200 and "default-src 'none'" in listing.headers["content-security-policy"]
    [href] = re.findall(r'href="(/prs/[^"]+)"', listing.text)
    page = client.get(href)
    assert page.status_code == 200
    assert re.search(
        r'class="pill big (good|bad|warn|neutral)">(IMPROVED|REGRESSED|UNCHANGED|INCONCLUSIVE|BROKEN)<', page.text
    )
    assert "qa/kept" in page.text and re.search(r"\(([+-]\d\.\d\d|–), ([+-]\d\.\d\d|–)\)", page.text)
    chart = client.get(href + "/chart.svg")
    assert chart.status_code == 200 and chart.headers["content-type"].startswith("image/svg+xml")
    assert chart.content.lstrip().startswith(b"<svg")
    assert "/trajectories/" in page.text
    assert client.get("/prs/o/r/1/" + "0" * 40).status_code == 404


def test_a_comparison_named_by_compare_gets_no_more_samples_button(hostile_home):
    """Only PR comparisons (the sensors run them) take more samples from their page; the page of
    one ``evalrunner compare --pr NAME`` ran says how to get more, and a forged POST is refused."""
    client = TestClient(create_app(Lake(str(lake(hostile_home))), action_token="t0ken"))
    [href] = re.findall(r'href="(/prs/[^"]+)"', client.get("/prs").text)
    page = client.get(href).text
    assert "Ask for more samples" not in page and "More samples" not in page
    refused = client.post(href + "/more", data={"n": "5", "token": "t0ken"})
    assert refused.status_code == 400 and "is not a pull request" in refused.text
    assert not Lake(str(lake(hostile_home))).glob("inbox/*/*.json")


def test_markup_in_repository_content_is_shown_as_text(hostile_home):
    client = _client(hostile_home)
    page = client.get(re.findall(r'href="(/prs/[^"]+)"', client.get("/prs").text)[0])
    [trajectories] = re.findall(r'href="(/trajectories/[^"]+\?base=[^"]+)"', page.text)
    listing = client.get(trajectories.replace("&amp;", "&"))
    assert listing.status_code == 200
    links = [h.replace("&amp;", "&") for h in re.findall(r'href="(/trajectory/[^"]+)"', listing.text)]
    assert len(links) == 16
    shown = client.get(links[0])
    assert shown.status_code == 200
    assert HOSTILE not in shown.text and "&lt;script&gt;alert(&#39;owned&#39;)&lt;/script&gt;" in shown.text
    assert "<script" not in shown.text.lower()


@pytest.fixture(scope="module")
def example_home(tmp_path_factory) -> Path:
    """The example's improve-runbook PR compared, and the base's runbook_lookup mined."""
    root = tmp_path_factory.mktemp("example")
    repo = build_example_repo(root / "repo", variants=("improve-runbook",)).path
    env = {**os.environ, "EVALRUNNER_HOME": str(root / "home")}
    exe = shutil.which("evalrunner", path=os.path.dirname(sys.executable)) or "evalrunner"

    def run(*args: str) -> None:
        done = subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]

    run("compare", "--repo", str(repo), "--repo-id", REPO, "--base", "main", "--head", "improve-runbook")
    base = git(repo, "rev-parse", "main").strip()
    run("mine", "--repo-id", REPO, "--commit", base, "--task", TASK)
    return root / "home"


def test_a_failing_trajectory_shows_its_events_the_failing_turn_and_the_miners_note(example_home):
    client = _client(example_home)
    page = client.get(re.findall(r'href="(/prs/[^"]+)"', client.get("/prs").text)[0])
    base_link = next(h for h in re.findall(r'href="(/trajectories/[^"?]+)"', page.text) if "runbook_lookup" in h)
    listing = client.get(base_link)
    assert listing.status_code == 200
    # A failing base trajectory the miner noted: it answered without calling runbook_search.
    rows = re.findall(
        r'<a href="(/trajectory/[^"]+)">[^<]+</a></td>\s*<td class="num">\d+</td>\s*<td><span class="pill (\w+)">',
        listing.text,
    )
    failing = [h.replace("&amp;", "&") for h, tone in rows if tone == "bad"]
    assert failing
    noted = [client.get(h).text for h in failing]
    with_note = [t for t in noted if 'class="note"' in t]
    assert with_note, "no failing trajectory carries the miner's note"
    text = with_note[0]
    assert "never calls runbook_search" in text
    # It answered from memory: its answer is the failing turn.
    assert re.search(r'class="event assistant failing"', text) and "failing turn" in text
    for kind in ("user", "assistant"):
        assert f'class="event {kind}' in text


def test_head_and_base_of_the_same_input_side_by_side(example_home):
    client = _client(example_home)
    page = client.get(re.findall(r'href="(/prs/[^"]+)"', client.get("/prs").text)[0])
    head_link = next(
        h for h in re.findall(r'href="(/trajectories/[^"]+\?base=[^"]+)"', page.text) if "runbook_lookup" in h
    )
    listing = client.get(head_link.replace("&amp;", "&"))
    first = re.findall(r'href="(/trajectory/[^"]+)"', listing.text)[0].replace("&amp;", "&")
    shown = client.get(first)
    assert shown.status_code == 200
    assert shown.text.count('<section class="arm"') == 2
    assert 'aria-label="head"' in shown.text and 'aria-label="base"' in shown.text
    assert 'class="event tool-call' in shown.text


def test_mounted_under_a_path_the_links_keep_the_mount_point(hostile_home):
    from starlette.applications import Starlette
    from starlette.routing import Mount

    app = create_app(Lake(str(lake(hostile_home))))
    client = TestClient(Starlette(routes=[Mount("/web", app=app)]))
    listing = client.get("/web/prs")
    assert listing.status_code == 200
    hrefs = re.findall(r'(?:href|src)="(/[^"]*)"', listing.text)
    assert hrefs and all(h.startswith("/web/") for h in hrefs), hrefs
    assert client.get("/web/static/web.css").status_code == 200
    assert client.get("/web/", follow_redirects=False).headers["location"] == "/web/prs"


def test_every_link_the_pr_comment_makes_opens_a_page(hostile_home):
    """The comment's deep links (``EVALRUNNER_WEB_URL`` set) are paths the app serves, and the
    PR page links back to the comparison's partition in the Dagster UI."""
    from urllib.parse import urlencode

    from evalrunner_assets.http.web import pages
    from evalrunner_assets.pipeline.keys import comparison_key
    from evalrunner_assets.report.links import WebLinks
    from evalrunner_assets.report.markdown import render_comment

    the_lake = Lake(str(lake(hostile_home)))
    (row,) = pages.comparisons(the_lake)
    doc = pages.comparison(the_lake, row.repo, row.pr, row.head_sha)
    body = render_comment(doc, links=WebLinks("http://evalrunner.example/web"))
    urls = re.findall(r"\]\((http://evalrunner\.example/web/[^)]+)\)", body)
    assert len(urls) == len(doc.tasks) + 1, body
    client = _client(hostile_home)
    for url in urls:
        assert client.get(url.removeprefix("http://evalrunner.example/web")).status_code == 200, url
    page = client.get(urls[-1].removeprefix("http://evalrunner.example/web"))
    key = urlencode({"partition": comparison_key(doc.repo, doc.pr, doc.head_sha)})
    assert f'href="http://dagster.example:3000/assets/comparison?view=partitions&amp;{key}"' in page.text


# -- in a real browser (Debian's Chromium through Playwright; see tests/helpers/web_browser.py) -----------
def test_with_inspects_viewer_configured_each_trajectory_links_to_its_raw_log_there(example_home):
    from lake.layout import LAYOUT

    viewer = "http://viewer.example:7575"
    app = create_app(Lake(str(lake(example_home))), inspect_view_url=viewer)
    client = TestClient(app)
    page = client.get(re.findall(r'href="(/prs/[^"]+)"', client.get("/prs").text)[0])
    head_link = next(
        h for h in re.findall(r'href="(/trajectories/[^"]+\?base=[^"]+)"', page.text) if "runbook_lookup" in h
    )
    listing = client.get(head_link.replace("&amp;", "&"))
    assert '<th scope="col">Raw log</th>' in listing.text
    samples = re.findall(r'href="/trajectory/[^"]+\?sample=([^"&]+)&amp;epoch=(\d+)', listing.text)
    raw = re.findall(r'href="(http://viewer\.example:7575/#/logs/[^"]+)"', listing.text)
    assert samples and len(raw) == len(samples)
    # Each link names a raw log of that commit and task, and the sample and epoch of its row.
    commit = head_link.split("/")[4]
    prefix = f"{viewer}/#/logs/{LAYOUT.raw_prefix(REPO, commit)[len('raw/') :]}/{TASK}/"
    for (sample, epoch), href in zip(samples, raw, strict=True):
        assert href.startswith(prefix) and href.endswith(f".eval/samples/sample/{sample}/{epoch}/"), href
    first = re.findall(r'href="(/trajectory/[^"]+)"', listing.text)[0].replace("&amp;", "&")
    shown = client.get(first)
    assert shown.text.count("Raw log in Inspect's viewer") == 2  # head's and base's

    plain = _client(example_home)
    assert "Raw log" not in plain.get(head_link.replace("&amp;", "&")).text
    assert "Inspect's viewer" not in plain.get(first).text


def test_while_a_comparison_runs_its_run_page_shows_the_sandboxes_running_its_windows(tmp_path):
    """A real `evalrunner compare` of the example: while it runs, the run page counts the
    sandboxes running windows (the tile, and per task and arm, summing to it); once it ended,
    the live record says so and the page shows no sandbox."""
    import time

    from evalrunner_assets.pipeline.live import read_live
    from tests.helpers.compare_runs import start_compare

    repo = tmp_path / "repo"
    build_example_repo(repo, ["improve-runbook"])
    home = tmp_path / "home"
    home.mkdir()
    proc = start_compare(home, repo)
    client = _client(home)
    seen, deadline = None, time.monotonic() + 240
    try:
        while seen is None and proc.poll() is None and time.monotonic() < deadline:
            prs = re.findall(r'href="(/prs/[^"]+)"', client.get("/prs").text)
            page = client.get(prs[0] + "/run").text if prs else ""
            tile = re.search(r"Sandboxes running windows</span><strong>(\d+)</strong>", page)
            if tile and int(tile.group(1)) >= 1:
                seen = (int(tile.group(1)), page, prs[0])
            time.sleep(0.1)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert seen is not None, "the run page never showed a sandbox running while the comparison ran"
    count, page, href = seen
    cells = [(int(h), int(b)) for h, b in re.findall(r'<td class="num sandboxes">(\d+) · (\d+)</td>', page)]
    assert len(cells) == 3 and sum(h + b for h, b in cells) == count
    ended = client.get(href + "/run").text
    assert "Sandboxes running windows" not in ended and 'class="num sandboxes"' not in ended
    _, _, owner, name, pr, head = href.split("/")
    record = read_live(Lake(str(lake(home))), f"{owner}/{name}", pr, head)
    assert record is not None and record.ended and record.steps == []


@pytest.fixture(scope="module")
def browser():
    from tests.helpers.web_browser import launched_chromium

    with launched_chromium() as launched:
        yield launched


def test_in_a_real_browser_every_page_loads_cleanly_and_passes_the_accessibility_scan(example_home, browser, tmp_path):
    """Pull requests → one PR → an eval's trajectories → a failing one and one side by side, and
    the PR's samples and run pages, each reached by clicking: no console error (a CSP violation is one), the chart image decodes, no
    serious or critical axe-core violation, and on a phone's width no page-level sideways scroll.
    Screenshots of each page at both widths are kept as test artifacts."""
    from tests.helpers.web_browser import artifacts_dir, axe_source, served_pages

    axe, shots = axe_source(), artifacts_dir()
    with served_pages(example_home, tmp_path / "serve.log") as web:
        for width in (1280, 390):
            visit = Visit(browser, width)
            try:
                visit.open(web + "/prs")
                pages = [("prs", visit.page.url)]
                pages.append(("pr", visit.follow('a[href*="/prs/"]')))
                chart = visit.page.locator("img.chart")
                assert chart.evaluate("img => img.complete && img.naturalWidth > 0"), "the chart did not decode"
                pages.append(
                    ("trajectories", visit.follow(f'a[href*="/trajectories/"][href*="{TASK}"]:not([href*="base="])'))
                )
                pages.append(("trajectory-failing", visit.follow('tr:has(.pill.bad) a[href*="/trajectory/"]')))
                visit.page.go_back()
                visit.page.wait_for_load_state("load")
                visit.open(pages[1][1])
                pages.append(
                    ("trajectories-head", visit.follow(f'a[href*="/trajectories/"][href*="{TASK}"][href*="base="]'))
                )
                pages.append(("trajectory-side-by-side", visit.follow('a[href*="/trajectory/"]')))
                assert visit.page.locator("section.arm").count() == 2
                visit.open(pages[1][1])
                pages.append(("budget", visit.follow('a[href$="/budget"]')))
                assert visit.page.locator("meter").count() >= 1
                visit.open(pages[1][1])
                pages.append(("run", visit.follow('a[href$="/run"]')))
                for name, url in pages:
                    visit.check(name, url, axe=axe, shots=shots)
                assert visit.problems == [], visit.problems
            finally:
                visit.close()


def test_in_a_real_browser_the_failing_turn_and_the_miners_note_are_on_screen(example_home, browser, tmp_path):
    from tests.helpers.web_browser import served_pages

    with served_pages(example_home, tmp_path / "serve.log") as web:
        visit = Visit(browser, 1280)
        try:
            visit.open(web + "/prs")
            visit.follow('a[href*="/prs/"]')
            visit.follow(f'a[href*="/trajectories/"][href*="{TASK}"]:not([href*="base="])')
            failing = visit.page.locator('tr:has(.pill.bad) a[href*="/trajectory/"]').evaluate_all(
                "as => as.map(a => a.href)"
            )
            assert failing
            shown = False
            for href in failing:
                visit.open(href)
                if visit.page.locator(".note").count():
                    shown = True
                    break
            assert shown, "no failing trajectory shows the miner's note"
            turn = visit.page.locator(".event.failing").first
            turn.scroll_into_view_if_needed()
            assert turn.is_visible() and "failing turn" in turn.inner_text().lower()
            assert "never calls runbook_search" in visit.page.locator(".note").first.inner_text()
            assert visit.problems == [], visit.problems
        finally:
            visit.close()


def test_in_a_real_browser_hostile_markup_is_text_and_never_runs(hostile_home, browser, tmp_path):
    from tests.helpers.web_browser import served_pages

    with served_pages(hostile_home, tmp_path / "serve.log") as web:
        visit = Visit(browser, 1280)
        try:
            visit.open(web + "/prs")
            visit.follow('a[href*="/prs/"]')
            visit.follow('a[href*="/trajectories/"][href*="base="]')
            visit.follow('a[href*="/trajectory/"]')
            assert visit.page.get_by_text(HOSTILE).first.is_visible()
            assert visit.page.evaluate("document.querySelectorAll('script').length") == 0
            assert visit.problems == [], visit.problems  # no alert() dialog, no error
        finally:
            visit.close()


def test_in_a_real_browser_the_run_page_follows_a_running_comparison_to_its_end(browser, tmp_path):
    """The run page of a comparison mid-run reloads itself (no script: a meta refresh) and shows
    the comparison's end once the document in the lake says it ended, with no click."""
    import json

    from evalrunner_assets.report import links
    from lake.layout import LAYOUT
    from tests.helpers.comparison_fixture import FIXTURE, running
    from tests.helpers.web_browser import artifacts_dir, served_pages

    raw = json.loads(FIXTURE.read_text())
    home = tmp_path / "home"
    lake_dir = Lake(str(home / "lake"))
    rel = LAYOUT.comparison(raw["repo"], raw["pr"], raw["head_sha"])
    lake_dir.write_bytes(rel, json.dumps(running(raw)).encode())
    with served_pages(home, tmp_path / "serve.log", EVALRUNNER_WEB_REFRESH_S="1") as web:
        visit = Visit(browser, 1280)
        try:
            visit.open(web + links.run_path(raw["repo"], raw["pr"], raw["head_sha"]))
            assert visit.page.locator("td .pill.pending").count() == 1  # one task still running
            lake_dir.write_bytes(rel, json.dumps(raw).encode())  # the comparison ends
            visit.page.wait_for_selector("h1 + p strong:text-is('complete')", timeout=20_000)
            assert visit.page.locator("td .pill.pending").count() == 0
            assert visit.page.locator('meta[http-equiv="refresh"]').count() == 0  # an ended run stays put
            visit.page.screenshot(path=str(artifacts_dir() / "run-1280.png"), full_page=True)
            assert visit.problems == [], visit.problems
        finally:
            visit.close()


def test_in_a_real_browser_a_trajectorys_raw_log_link_opens_the_sample_in_inspects_viewer(
    example_home, browser, tmp_path
):
    """``serve`` starts Inspect's viewer over the lake beside the pages; the trajectory page's
    link opens that sample there, and stopping ``serve`` stops the viewer."""
    import urllib.request

    from tests.helpers.web_browser import artifacts_dir, free_port, served_pages, wait_until_answering

    port = free_port()
    with served_pages(example_home, tmp_path / "serve.log", serve_args=("--inspect-view-port", str(port))) as web:
        wait_until_answering(f"http://127.0.0.1:{port}/", "Inspect's viewer")
        visit = Visit(browser, 1280)
        try:
            visit.open(web + "/prs")
            visit.follow('a[href*="/prs/"]')
            visit.follow(f'a[href*="/trajectories/"][href*="{TASK}"]:not([href*="base="])')
            visit.follow('tr:has(.pill.bad) a[href*="/trajectory/"]')
            sample = visit.page.url.split("sample=")[1].split("&")[0]
            assert visit.problems == [], visit.problems
            visit.follow("text=Raw log in Inspect's viewer")
            assert visit.page.url.startswith(f"http://127.0.0.1:{port}/#/logs/")
            visit.page.get_by_text(sample).first.wait_for(timeout=60_000)
            visit.page.screenshot(path=str(artifacts_dir() / "inspect-view-sample-1280.png"), full_page=True)
        finally:
            visit.close()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5)
