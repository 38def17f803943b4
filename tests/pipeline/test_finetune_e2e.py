"""A fine-tune end to end on a real Dagster instance, real bubblewrap sandboxes and the loopback
mock of GitHub.com (``tests/helpers/github_standin.py``): measure the reference, export its passing
main-branch conversations, train with a stand-in trainer (a script that prints the simulated
fine-tune's model id, not a real training job), register with ``activate``: the fine-tune is
measured as a candidate on the reference's inputs, the notification table lands in the lake and
as a GitHub issue, and the one-line activation PR is opened through PyGithub on the mock. Then
the normal PR pipeline judges that PR: GitHub's ``pull_request.opened`` delivery, signed, goes
to the webhook receiver; the real ``pr_sensor`` and ``sampling_sensor`` run the comparison, whose
head commit is the real git commit the mock made, fetched from the mock's repository like any
pushed commit.

The repository "on GitHub.com" is a bare clone of the example that the mock serves and commits
to; the pipeline's source is its ``file://`` URL, so the pipeline mirrors and fetches it as it
would a GitHub clone URL.

The simulated fine-tune learned the runbook cue (0.85 vs 0.60 on runbook_lookup, the same
elsewhere) at twice the standard price (tests/pipeline/test_candidates_frontier.py has the table)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid

import dagster as dg
import pytest

from evalrunner_assets.driver import finetune as finetune_run
from evalrunner_assets.driver.candidates import measure_candidates
from evalrunner_assets.example_repo import build_example_candidates
from evalrunner_assets.http.webhook import ReceiverConfig, create_app
from evalrunner_assets.pipeline import finetune as ft
from evalrunner_assets.pipeline.assess import load_result
from evalrunner_assets.report.markdown import MARKER
from lake import LAYOUT
from resources import GitHubResource
from tests.helpers.github_harness import Harness, deliver, pull_request_delivery
from tests.helpers.github_standin import GitHubStandin, LoopbackServer
from tests.helpers.pipeline_fixtures import evalrunner_home

REPO = "example/support-agent"
TASKS = ("triage/escalation_policy", "triage/runbook_lookup", "triage/summary_quality")
RUNBOOK = "triage/runbook_lookup"
BASE_MODEL = "simagent/support-agent"
FT_MODEL = "simagent/support-agent-ft"
TOKEN = "finetune-e2e-token"
SECRET = b"finetune-e2e-webhook-secret"

# 2 candidates × 3 evals × 64 inputs in sandboxes, then the activation PR's comparison.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def registered(tmp_path_factory):
    root = tmp_path_factory.mktemp("finetune")
    example = build_example_candidates(root / "repo")
    hosted = root / "github.example" / "support-agent.git"  # the repository as GitHub.com holds it
    subprocess.run(["git", "clone", "--quiet", "--bare", str(example.path), str(hosted)], check=True)
    source = f"file://{hosted}"
    standin_trainer = root / "standin_trainer.py"
    standin_trainer.write_text(
        "import sys\n"
        "rows = sum(1 for _ in open(sys.argv[1]))\n"
        "print(f'stand-in trainer: {rows} conversations')\n"
        f"print({FT_MODEL!r})\n"
    )
    token_file = root / "github-token"
    token_file.write_text(TOKEN + "\n")
    (root / "dagster").mkdir()
    with (
        evalrunner_home(root / "home") as home,
        GitHubStandin(token=TOKEN) as standin,
        dg.instance_for_test(temp_dir=str(root / "dagster")) as instance,
        pytest.MonkeyPatch.context() as mp,
    ):
        for name in ("EVALRUNNER_GITHUB_TOKEN", "EVALRUNNER_GITHUB_APP_ID", "EVALRUNNER_GITHUB_API_URL"):
            mp.delenv(name, raising=False)
        mp.setenv(finetune_run.TRAINER_ENV, f"{sys.executable} {standin_trainer}")
        standin.add_repo(REPO, git_dir=hosted)
        resources = home.resources()
        resources["github"] = GitHubResource(
            base_url=standin.base_url, token_file=str(token_file), backoff_seconds=0.05, throttle=False
        )
        measure_candidates(REPO, source, names=["main"], instance=instance, resources=resources)
        training_set = root / "train.jsonl"
        exported = finetune_run.export(resources, REPO, source, training_set)
        done = finetune_run.register(
            resources,
            REPO,
            source,
            "runbook-v1",
            base_model=BASE_MODEL,
            training_set=training_set,
            training_cost_usd=12.5,
            instance=instance,
            activate=True,
        )
        # GitHub.com now sends pull_request.opened; the normal PR pipeline takes it from there.
        lake = home.lake()
        opened = done.activation
        harness = Harness(instance, resources, lake)
        config = ReceiverConfig(secret=SECRET, allowed_repos=frozenset({REPO}))
        with LoopbackServer(create_app(config, lake)) as receiver:
            payload = pull_request_delivery(
                "opened",
                repo=REPO,
                number=opened.number,
                head=opened.head_sha,
                base=opened.base_sha,
                head_ref=opened.branch,
            )
            answer = deliver(receiver, SECRET, "pull_request", payload, str(uuid.uuid4()))
            pr_runs, pr_outcomes = harness.tick_pr_sensor()
            sampling_outcomes = harness.drive_sampling_sensor()
        yield {
            "done": done,
            "exported": exported,
            "training_set": training_set,
            "lake": lake,
            "standin": standin,
            "example": example,
            "instance": instance,
            "answer": answer,
            "outcomes": pr_outcomes + sampling_outcomes,
            "pr_runs": pr_runs,
            "resources": resources,
            "root": root,
        }


def test_the_training_set_holds_the_reference_passing_main_conversations(registered):
    exported = registered["exported"]
    lines = registered["training_set"].read_text().splitlines()
    assert exported.rows == len(lines) > 64  # 3 evals × 64 inputs at 0.60 / 0.80 / 0.90
    assert registered["example"].base_sha in exported.params["commits"]
    first = json.loads(lines[0])["messages"]
    assert first[0]["role"] in ("system", "user") and first[-1]["role"] == "assistant"


def test_the_registry_records_the_model_its_provenance_and_cost(registered, capsys):
    from evalrunner_assets import cli

    record = ft.load_finetune(registered["lake"], REPO, "runbook-v1")
    assert record.registered_at
    assert record.model == FT_MODEL and record.base_model == BASE_MODEL
    assert record.trainer and "standin_trainer.py" in record.trainer
    assert record.training_set["digest"] == registered["exported"].digest
    assert record.training_set["rows"] == registered["exported"].rows
    assert record.training_cost_usd == 12.5 and record.candidate == "ft-runbook-v1"
    assert record.notification and record.notification.endswith(LAYOUT.finetune_notification(REPO, "runbook-v1"))
    assert cli.main(["finetune", "list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed == [
        f"runbook-v1: {FT_MODEL} (base {BASE_MODEL}) · {REPO} · "
        f"{record.training_set['rows']} rows · suite {record.measurement['suite']['mean']:.2f}"
    ]


def test_the_fine_tune_is_measured_on_the_reference_inputs(registered):
    docs = registered["done"].measurements
    current, measured = docs["main"], docs["ft-runbook-v1"]
    assert measured["settings"]["model"] == FT_MODEL
    assert {t: measured["tasks"][t]["windows"] for t in TASKS} == {t: current["tasks"][t]["windows"] for t in TASKS}
    flags = measured["vs_reference"]["tasks"]
    assert flags["triage/runbook_lookup"]["label"] == "improved"
    assert {flags[t]["label"] for t in TASKS if t != "triage/runbook_lookup"} == {"unchanged"}
    ratio = measured["suite"]["cost_per_sample"] / current["suite"]["cost_per_sample"]
    assert ratio == pytest.approx(2.0, rel=0.1)


def test_the_notification_table_lands_in_the_lake_and_as_a_github_issue(registered):
    lake = registered["lake"]
    markdown = lake.read_bytes(LAYOUT.finetune_notification(REPO, "runbook-v1")).decode()
    assert markdown == registered["done"].notification
    lines = markdown.splitlines()
    header = lines.index("| eval | current | ft | Δ (CI) | cost/sample |")
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines[header + 2 : header + 6]}
    assert set(rows) == {*TASKS, "**suite**"}
    runbook = rows["triage/runbook_lookup"].split(" | ")
    assert runbook[3].startswith("+") and runbook[3].endswith("improved")
    assert "(current $" in runbook[4]
    assert rows["triage/escalation_policy"].split(" | ")[3].endswith("unchanged")
    issues = registered["standin"].issues_on(REPO)
    assert len(issues) == 1 and issues[0]["body"] == markdown
    assert issues[0]["title"] == f"Fine-tune runbook-v1: {FT_MODEL} against main"
    assert ft.load_finetune(lake, REPO, "runbook-v1").issue_url == issues[0]["html_url"]


def test_the_activation_pr_on_the_github_com_mock_changes_only_the_model_line(registered):
    opened, standin, example = registered["done"].activation, registered["standin"], registered["example"]
    assert opened.created and opened.branch == "eval-runner/activate-runbook-v1"
    assert opened.base_ref == "main" and opened.base_sha == example.base_sha and opened.path == "agent.yaml"
    # A real commit on the mock's repository: its parent is main, its diff one line of agent.yaml.
    assert standin.git(REPO, "rev-parse", f"{opened.head_sha}^") == example.base_sha
    assert standin.git(REPO, "diff", "--numstat", opened.base_sha, opened.head_sha) == "1\t1\tagent.yaml"
    diff = standin.git(REPO, "diff", "--unified=0", opened.base_sha, opened.head_sha).splitlines()
    assert [line for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---")] == [
        f"-model: {BASE_MODEL}",
        f"+model: {FT_MODEL}",
    ]
    (pull,) = standin.pulls_on(REPO)
    assert pull["number"] == opened.number and pull["head"]["ref"] == opened.branch
    assert pull["title"] == f"Activate fine-tune runbook-v1 ({FT_MODEL})"
    assert registered["done"].notification in pull["body"]  # the measurement behind it
    record = ft.load_finetune(registered["lake"], REPO, "runbook-v1")
    assert record.activation is not None and record.activation["number"] == opened.number
    assert record.activation["url"] == pull["html_url"]


def test_the_pr_pipeline_judges_the_activation_pr_and_the_verdict_shows_the_fine_tunes_effect(registered):
    opened, lake = registered["done"].activation, registered["lake"]
    assert registered["answer"][0] == 202
    assert [r.partition_key for r in registered["pr_runs"]] == [f"{REPO}#{opened.number}@{opened.head_sha}"]
    assert registered["outcomes"] and all(o.success for o in registered["outcomes"]), [
        o.errors for o in registered["outcomes"] if not o.success
    ]
    result = load_result(lake, REPO, str(opened.number), opened.head_sha)
    assert result is not None and result.status == "complete"
    # Each commit ran the model its agent config names: the head the fine-tune, the base main's.
    assert {arm: m.model_dump() for arm, m in result.arm_models.items()} == {
        "head": {"model": FT_MODEL, "model_args": {}, "source": "agent config (agent.yaml)"},
        "base": {"model": BASE_MODEL, "model_args": {}, "source": "agent config (agent.yaml)"},
    }
    assert result.verdict == "IMPROVED"
    decisions = {t: result.tasks[t].decision for t in TASKS}
    assert decisions[RUNBOOK].label == "improved"
    assert {decisions[t].label for t in TASKS if t != RUNBOOK} == {"unchanged"}
    # The same effect the registration measured: the PR's runbook interval and the candidate's overlap.
    measured = registered["done"].measurements["ft-runbook-v1"]["vs_reference"]["tasks"][RUNBOOK]
    pr = decisions[RUNBOOK].anytime_interval
    assert pr.lo is not None and pr.hi is not None
    assert pr.lo > 0 and measured["interval"][0] > 0
    assert pr.lo <= measured["interval"][1] and measured["interval"][0] <= pr.hi
    # The report on the PR (the mock's comment) names both models and the verdict.
    (comment,) = registered["standin"].comments_on(REPO, opened.number)
    assert comment["body"].startswith(MARKER) and "IMPROVED" in comment["body"]
    assert f"base ran `{BASE_MODEL}` (agent config (agent.yaml)), this PR runs `{FT_MODEL}`" in comment["body"]


# -- the fine-tune page and its "Open PR to activate" action ------------------------------------

ACTION_TOKEN = "web-action-token"


@pytest.fixture(scope="module")
def second_finetune(registered):
    """A second fine-tune of the same trained model (``--model`` given: no trainer), registered
    without activation: the one the page's action activates. Its measurement reuses the first's
    windows (same commit, same model)."""
    done = finetune_run.register(
        registered["resources"],
        REPO,
        f"file://{registered['root'] / 'github.example' / 'support-agent.git'}",
        "runbook-v2",
        base_model=BASE_MODEL,
        model=FT_MODEL,
        training_set=registered["training_set"],
        instance=registered["instance"],
    )
    assert done.activation is None
    return done


def _pages(registered, *, token: str | None = ACTION_TOKEN, github: bool = True):
    from evalrunner_assets.http.web import create_app

    resources = registered["resources"]
    return create_app(
        registered["lake"],
        action_token=token,
        activate_finetune=(lambda repo, name: finetune_run.activate_finetune(resources, repo, name))
        if github
        else None,
    )


def test_the_fine_tune_page_shows_each_fine_tune_its_measurement_and_its_activation_pr(registered, second_finetune):
    from starlette.testclient import TestClient

    page = TestClient(_pages(registered)).get("/finetunes")
    assert page.status_code == 200
    first, second = page.text.split('<section class="finetune"')[1:]
    assert "<code>runbook-v1</code>" in first and "<code>runbook-v2</code>" in second
    opened = registered["done"].activation
    assert f'href="{opened.url}">#{opened.number}</a>' in first and "Open PR to activate" not in first
    assert "Open PR to activate" in second
    # The measurement against the reference: runbook_lookup improved, the others unchanged.
    rows = dict(re.findall(r"<td>([a-z/_]+)</td>.*?<span class=\"pill \w+\">(\w+)</span>", first, re.S))
    assert rows[RUNBOOK] == "improved"
    assert {rows[t] for t in TASKS if t != RUNBOOK} == {"unchanged"}
    assert "<strong>suite</strong>" in first and "Promotion gate" in first


def test_the_activate_action_needs_the_run_apis_token(registered, second_finetune):
    from starlette.testclient import TestClient

    url = "/finetunes/example/support-agent/runbook-v2/activate"
    client = TestClient(_pages(registered), follow_redirects=False)
    assert client.post(url, data={"token": ""}).status_code == 401
    assert client.post(url, data={"token": "wrong"}).status_code == 401
    assert client.get(url).status_code == 405  # a link or a crawler never activates anything
    off = TestClient(_pages(registered, token=None), follow_redirects=False).post(url, data={"token": ACTION_TOKEN})
    assert off.status_code == 503 and "EVALRUNNER_API_TOKEN" in off.text
    no_github = TestClient(_pages(registered, github=False), follow_redirects=False)
    assert no_github.post(url, data={"token": ACTION_TOKEN}).status_code == 503
    assert "Open PR to activate" not in no_github.get("/finetunes").text.split('<section class="finetune"')[2]
    unknown = client.post("/finetunes/example/support-agent/nope/activate", data={"token": ACTION_TOKEN})
    assert unknown.status_code == 400 and "has no fine-tune named" in unknown.text
    assert ft.load_finetune(registered["lake"], REPO, "runbook-v2").activation is None  # nothing opened


def test_in_a_real_browser_open_pr_to_activate_opens_the_pr_on_the_github_com_mock(registered, second_finetune):
    """Chromium on the served pages: the fine-tune page passes the accessibility scan, the
    token is typed and the button clicked; the page then names the PR the mock opened, whose
    one commit changes only the model line."""
    from tests.helpers.github_standin import LoopbackServer
    from tests.helpers.web_browser import Visit, artifacts_dir, axe_source, launched_chromium, serious_violations

    standin = registered["standin"]
    before = {p["number"] for p in standin.pulls_on(REPO)}
    with launched_chromium() as browser, LoopbackServer(_pages(registered)) as served:
        visit = Visit(browser, 1280)
        try:
            visit.open(f"{served.url}/finetunes")
            assert serious_violations(visit.page, axe_source()) == []
            form = visit.page.locator('form.action[action$="/runbook-v2/activate"]')
            form.locator('input[name="token"]').fill(ACTION_TOKEN)
            with visit.page.expect_navigation():
                form.locator("button").click()
            visit.page.wait_for_load_state("load")
            banner = visit.page.locator(".banner").inner_text()
            visit.page.screenshot(path=str(artifacts_dir() / "finetunes-activated-1280.png"), full_page=True)
            assert visit.problems == [], visit.problems
        finally:
            visit.close()
    (new,) = [p for p in standin.pulls_on(REPO) if p["number"] not in before]
    assert f"#{new['number']}" in banner and "eval-runner/activate-runbook-v2" in banner
    assert new["head"]["ref"] == "eval-runner/activate-runbook-v2"
    diff = standin.git(REPO, "diff", "--numstat", new["base"]["sha"], new["head"]["sha"])
    assert diff == "1\t1\tagent.yaml"
    record = ft.load_finetune(registered["lake"], REPO, "runbook-v2")
    assert record.activation is not None and record.activation["number"] == new["number"]
