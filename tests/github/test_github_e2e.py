"""From signed GitHub deliveries to the verdict on the PR, through the real pieces.

The receiver runs as a real uvicorn server on loopback and writes the inbox; the real
``pr_sensor`` and ``sampling_sensor`` are evaluated on a temporary Dagster instance, and every
run they request is executed with ``dg.materialize`` (skipping run keys already used by the same
sensor, as the sensor daemon does); the sandboxes are bubblewrap; GitHub is the REST stand-in in
``tests/helpers/github_standin.py``.

One pull request lives through four stages, each a module-scoped fixture that builds on the
previous one, so every test below reads the state its stage left behind:

1. ``opened`` — a signed ``pull_request``/``opened`` delivery for the improving variant;
2. ``synchronized`` — a signed ``synchronize`` delivery moving the head to the regressing variant;
3. ``redelivered`` — GitHub redelivers the first delivery (same ``X-GitHub-Delivery``);
4. ``more_samples`` — a member comments ``/eval more 16``.
5. ``more_from_the_page`` — someone with the run API's token asks for 5 more on the PR's web page.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
import pytest

from evalrunner_assets.documents.comparison import ComparisonDocument
from evalrunner_assets.example_repo import ExampleRepo, build_example_repo
from evalrunner_assets.http.webhook import ReceiverConfig, create_app
from evalrunner_assets.pipeline.assess import load_result
from evalrunner_assets.pipeline.keys import comparison_key
from evalrunner_assets.pipeline.spec import load_request
from evalrunner_assets.report.markdown import MARKER
from resources import GitHubResource, LakeResource, RepoResource, SandboxResource
from tests.helpers.github_harness import Harness, RunOutcome, fixture_text, retarget
from tests.helpers.github_harness import deliver as harness_deliver
from tests.helpers.github_harness import pull_request_delivery as harness_pull_request_delivery
from tests.helpers.github_standin import GitHubStandin, LoopbackServer
from tests.helpers.served_evalrunner import changed_files

pytestmark = pytest.mark.slow

REPO = "example/support-agent"
PR = 7
SECRET = b"e2e-webhook-secret"
TOKEN = "e2e-github-token"
IMPROVING, REGRESSING = "improve-runbook", "regress-escalation"


# -- deliveries built from GitHub's own payload examples -----------------------------------------
def _retarget(payload: dict[str, Any]) -> dict[str, Any]:
    return retarget(payload, REPO)


def pull_request_delivery(action: str, *, head: str, base: str, head_ref: str) -> dict[str, Any]:
    """GitHub's ``pull_request.<action>`` example, for PR ``PR`` of the example repo at these SHAs."""
    return harness_pull_request_delivery(action, repo=REPO, number=PR, head=head, base=base, head_ref=head_ref)


def eval_more_delivery(body: str, association: str) -> dict[str, Any]:
    """GitHub's ``issue_comment.created`` example as a comment on PR ``PR`` (the example's issue
    is a plain issue; a PR's issue carries ``pull_request``)."""
    payload = _retarget(json.loads(fixture_text("issue_comment.created")))
    payload["issue"]["number"] = PR
    payload["issue"]["pull_request"] = {"url": f"https://api.github.com/repos/{REPO}/pulls/{PR}"}
    payload["comment"]["body"] = body
    payload["comment"]["author_association"] = association
    return payload


def deliver(server: LoopbackServer, event: str, payload: dict[str, Any] | bytes, delivery: str) -> tuple[int, dict]:
    """POST a delivery signed as GitHub signs it; returns (status, answer)."""
    return harness_deliver(server, SECRET, event, payload, delivery)


# -- the stages --------------------------------------------------------------------------------
@dataclass
class World:
    example: ExampleRepo
    standin: GitHubStandin
    receiver: LoopbackServer
    harness: Harness


@pytest.fixture(scope="module")
def world(tmp_path_factory, bwrap_backend) -> Iterator[World]:
    root = tmp_path_factory.mktemp("github-e2e")
    example = build_example_repo(root / "example-repo", [IMPROVING, REGRESSING])
    token_file = root / "github-token"
    token_file.write_text(TOKEN + "\n")
    (root / "dagster").mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EVALRUNNER_HOME", str(root / "home"))
        for name in (
            "EVALRUNNER_LAKE",
            "EVALRUNNER_GITHUB_TOKEN",
            "EVALRUNNER_GITHUB_TOKEN_FILE",
            "EVALRUNNER_GITHUB_APP_ID",
            "EVALRUNNER_GITHUB_PRIVATE_KEY",
            "EVALRUNNER_GITHUB_PRIVATE_KEY_FILE",
            "EVALRUNNER_GITHUB_API_URL",
        ):
            mp.delenv(name, raising=False)
        with GitHubStandin(token=TOKEN) as standin, dg.instance_for_test(temp_dir=str(root / "dagster")) as instance:
            standin.add_repo(REPO)
            lake_resource = LakeResource(root=str(root / "lake"))
            lake = lake_resource.open()
            resources = {
                "lake": lake_resource,
                "sandbox": SandboxResource(),
                "repos": RepoResource(cache_dir=str(root / "repos"), export_dir=str(root / "exports")),
                "github": GitHubResource(
                    base_url=standin.base_url, token_file=str(token_file), backoff_seconds=0.05, throttle=False
                ),
            }
            # The example repo is a local git repository, not on a Git host: record it as the source.
            resources["repos"].register(lake, REPO, str(example.path))
            config = ReceiverConfig(secret=SECRET, allowed_repos=frozenset({REPO}))
            with LoopbackServer(create_app(config, lake)) as receiver:
                yield World(example, standin, receiver, Harness(instance, resources, lake))


@dataclass
class Stage:
    delivery: str = ""
    answer: tuple[int, dict] = (0, {})
    pr_runs: list[dg.RunRequest] = field(default_factory=list)
    pr_outcomes: list[RunOutcome] = field(default_factory=list)
    sampling_outcomes: list[RunOutcome] = field(default_factory=list)
    comments: list[dict[str, Any]] = field(default_factory=list)
    checks_after_pr_runs: list[tuple[str, str | None]] = field(default_factory=list)


def _snapshot_comments(world: World) -> list[dict[str, Any]]:
    return [dict(c) for c in world.standin.comments_on(REPO, PR)]


def _evaluate(world: World, event: str, payload: dict[str, Any], delivery: str) -> Stage:
    stage = Stage(delivery=delivery)
    stage.answer = deliver(world.receiver, event, payload, delivery)
    stage.pr_runs, stage.pr_outcomes = world.harness.tick_pr_sensor()
    head = payload["pull_request"]["head"]["sha"]
    stage.checks_after_pr_runs = [(r["status"], r["conclusion"]) for r in world.standin.check_runs_for(REPO, head)]
    stage.sampling_outcomes = world.harness.drive_sampling_sensor()
    stage.comments = _snapshot_comments(world)
    return stage


@pytest.fixture(scope="module")
def opened(world: World) -> Stage:
    head, base = world.example.sha(IMPROVING), world.example.base_sha
    world.standin.add_pull(
        REPO, PR, head, base, files=changed_files(world.example.path, base, head), head_ref=IMPROVING
    )
    payload = pull_request_delivery("opened", head=head, base=base, head_ref=IMPROVING)
    return _evaluate(world, "pull_request", payload, str(uuid.uuid4()))


@pytest.fixture(scope="module")
def synchronized(world: World, opened: Stage) -> Stage:
    head, base = world.example.sha(REGRESSING), world.example.base_sha
    world.standin.add_pull(
        REPO, PR, head, base, files=changed_files(world.example.path, base, head), head_ref=REGRESSING
    )  # the PR's head moved: new SHA, new changed files
    payload = pull_request_delivery("synchronize", head=head, base=base, head_ref=REGRESSING)
    return _evaluate(world, "pull_request", payload, str(uuid.uuid4()))


@pytest.fixture(scope="module")
def redelivered(world: World, opened: Stage, synchronized: Stage) -> Stage:
    head, base = world.example.sha(IMPROVING), world.example.base_sha
    payload = pull_request_delivery("opened", head=head, base=base, head_ref=IMPROVING)
    return _evaluate(world, "pull_request", payload, opened.delivery)


@dataclass
class MoreStage:
    answer: tuple[int, dict]
    pr_runs: list[dg.RunRequest]
    sampling_after: dg.SensorResult


@pytest.fixture(scope="module")
def more_samples(world: World, redelivered: Stage) -> MoreStage:
    answer = deliver(world.receiver, "issue_comment", eval_more_delivery("/eval more 16", "MEMBER"), str(uuid.uuid4()))
    pr_runs, _ = world.harness.tick_pr_sensor()
    # Only look at what the woken sampling loop would ask for next; running it is the loop's
    # own business, tested above.
    return MoreStage(answer, pr_runs, world.harness.evaluate_sampling_sensor())


ACTION_TOKEN = "e2e-action-token"


def _web(world: World, token: str | None = ACTION_TOKEN) -> Any:
    from starlette.testclient import TestClient

    from evalrunner_assets.http.web import create_app as create_web_app

    return TestClient(create_web_app(world.harness.lake, action_token=token), follow_redirects=False)


@dataclass
class PageStage:
    page: str
    answer: Any
    after: str
    pr_runs: list[dg.RunRequest]
    sampling_after: dg.SensorResult


@pytest.fixture(scope="module")
def more_from_the_page(world: World, more_samples: MoreStage) -> PageStage:
    from evalrunner_assets.report.links import pull_request_path

    client = _web(world)
    path = pull_request_path(REPO, PR, world.example.sha(REGRESSING))
    page = client.get(path).text
    answer = client.post(path + "/more", data={"n": "5", "token": ACTION_TOKEN})
    after = client.get(answer.headers.get("location", path)).text
    pr_runs, _ = world.harness.tick_pr_sensor()
    return PageStage(page, answer, after, pr_runs, world.harness.evaluate_sampling_sensor())


def _key(world: World, variant: str) -> str:
    return comparison_key(REPO, str(PR), world.example.sha(variant))


def _result(world: World, variant: str) -> ComparisonDocument:
    result = load_result(world.harness.lake, REPO, str(PR), world.example.sha(variant))
    assert result is not None, f"no comparison document for {variant}"
    return result


def _ours(comments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in comments if MARKER in c["body"]]


# -- 1. opened -----------------------------------------------------------------------------------
def test_signed_pull_request_delivery_is_queued_and_starts_the_comparison_for_its_head(world, opened):
    assert opened.answer[0] == 202 and opened.answer[1]["status"] == "queued"
    key = _key(world, IMPROVING)
    assert [(r.job_name, r.partition_key, r.run_key) for r in opened.pr_runs] == [
        ("comparison_job", key, f"{REPO}#{PR}@{world.example.sha(IMPROVING)}")
    ]
    instance = world.harness.instance
    assert key in instance.get_dynamic_partitions("comparisons")
    assert {f"{REPO}@{world.example.base_sha}", f"{REPO}@{world.example.sha(IMPROVING)}"} <= set(
        instance.get_dynamic_partitions("commits")
    )
    request = load_request(world.harness.lake, REPO, str(PR), world.example.sha(IMPROVING))
    assert (request.base_sha, request.base_ref, request.extra_samples) == (world.example.base_sha, "main", 0)
    # changed-file affinity reads the PR's files from the GitHub stand-in
    assert list(request.changed_files) == changed_files(
        world.example.path, world.example.base_sha, world.example.sha(IMPROVING)
    )
    assert request.changed_files


def test_the_pr_sensors_one_run_finishes_the_improving_comparison_and_reports_what_it_touched(world, opened):
    result = _result(world, IMPROVING)
    assert result is not None
    assert result.status == "complete"
    assert result.verdict == "IMPROVED"
    # One run of comparison_job learnt both commits and ran every window of both arms: the
    # sampling sensor has nothing left to ask for.
    (run,) = opened.pr_outcomes
    assert run.job == "comparison_job" and run.success, run.errors
    assert opened.sampling_outcomes == []
    assets = {asset for asset, _, _ in run.materialized}
    assert assets == {
        "eval_manifest",
        "task_samples",
        "sample_scores",
        "trajectories",
        "baselines",
        "comparison",
        "pr_report",
    }
    manifests = {partition for asset, partition, _ in run.materialized if asset == "eval_manifest"}
    assert manifests == {f"{REPO}@{world.example.base_sha}", f"{REPO}@{world.example.sha(IMPROVING)}"}


def test_improving_head_gets_one_marked_comment_with_the_verdict(world, opened):
    ours = _ours(opened.comments)
    assert len(opened.comments) == 1 and len(ours) == 1
    body = ours[0]["body"]
    assert body.startswith(MARKER)
    assert "evalrunner: IMPROVED" in body
    assert ours[0]["user"]["login"] == world.standin.token_login


def test_improving_head_check_run_completes_with_success(world, opened):
    (run,) = world.standin.check_runs_for(REPO, world.example.sha(IMPROVING))
    assert run["name"] == "evalrunner / evals"
    assert (run["status"], run["conclusion"]) == ("completed", "success")
    assert run["completed_at"]
    assert run["_history"][0] == ("in_progress", None), run["_history"]
    assert run["_history"][-1] == ("completed", "success")


def test_run_the_pr_sensor_requests_succeeds_and_marks_the_head_in_progress_first(world, opened):
    assert [o.success for o in opened.pr_outcomes] == [True], [o.errors for o in opened.pr_outcomes]
    # the run reported the head in progress before any verdict, then completed the same check run
    (run,) = world.standin.check_runs_for(REPO, world.example.sha(IMPROVING))
    assert run["_history"][0] == ("in_progress", None), run["_history"]
    assert opened.checks_after_pr_runs == [("completed", "success")]


# -- 2. synchronize --------------------------------------------------------------------------------
def test_synchronize_to_a_new_head_starts_a_new_comparison(world, synchronized):
    assert synchronized.answer[0] == 202 and synchronized.answer[1]["status"] == "queued"
    assert [(r.partition_key, r.run_key) for r in synchronized.pr_runs] == [
        (_key(world, REGRESSING), f"{REPO}#{PR}@{world.example.sha(REGRESSING)}")
    ]
    assert [o.success for o in synchronized.pr_outcomes] == [True]
    assert synchronized.checks_after_pr_runs == [("completed", "failure")]
    assert synchronized.sampling_outcomes == []


def _windows_run(outcomes: list[RunOutcome], commit: str) -> set[tuple[str, str]]:
    """(task_samples partition, batch) of every window the runs landed for ``commit``."""
    return {
        (partition, batch)
        for o in outcomes
        for asset, partition, metadata in o.materialized
        if asset == "task_samples" and commit in partition
        for batch in metadata["batches"]
    }


def test_regressing_head_reuses_the_base_commits_manifest_and_windows(world, opened, synchronized):
    base = f"{REPO}@{world.example.base_sha}"
    before = _windows_run(opened.pr_outcomes, base)
    again = _windows_run(synchronized.pr_outcomes, base)
    assert before and not (before & again), sorted(before & again)
    assert _windows_run(synchronized.pr_outcomes, world.example.sha(REGRESSING))
    (run,) = synchronized.pr_outcomes
    assert not [m for m in run.materialized if m[:2] == ("eval_manifest", base)]


def test_synchronize_edits_the_same_comment_in_place_with_the_new_verdict(world, opened, synchronized):
    (before,) = _ours(opened.comments)
    assert len(synchronized.comments) == 1
    (after,) = _ours(synchronized.comments)
    assert after["id"] == before["id"]
    assert "evalrunner: REGRESSED" in after["body"] and after["body"] != before["body"]
    assert world.standin.calls("PATCH", f"/issues/comments/{before['id']}")
    assert len(world.standin.calls("POST", f"/issues/{PR}/comments")) == 1


def test_regressing_head_check_run_concludes_failure_and_the_first_heads_stays_success(world, synchronized):
    assert _result(world, REGRESSING).verdict == "REGRESSED"
    (run,) = world.standin.check_runs_for(REPO, world.example.sha(REGRESSING))
    assert (run["status"], run["conclusion"]) == ("completed", "failure")
    (first,) = world.standin.check_runs_for(REPO, world.example.sha(IMPROVING))
    assert first["conclusion"] == "success"


def test_head_ref_flows_from_the_delivery_to_the_request_the_comparison_and_the_comment(world, opened):
    head = world.example.sha(IMPROVING)
    assert load_request(world.harness.lake, REPO, str(PR), head).head_ref == IMPROVING
    assert _result(world, IMPROVING).head_ref == IMPROVING
    (comment,) = _ours(opened.comments)
    assert f"`{IMPROVING}` @ `{head[:7]}`" in comment["body"]


# -- 3. redelivery ---------------------------------------------------------------------------------
def test_redelivery_of_the_first_delivery_processes_nothing_new(world, synchronized, redelivered):
    assert redelivered.answer[0] == 200 and redelivered.answer[1]["status"] == "duplicate"
    assert redelivered.pr_runs == [] and redelivered.pr_outcomes == []
    assert redelivered.sampling_outcomes == []
    assert redelivered.comments == synchronized.comments
    assert len(world.standin.check_runs_for(REPO, world.example.sha(IMPROVING))) == 1


# -- 4. /eval more ---------------------------------------------------------------------------------
def test_eval_more_from_a_member_raises_the_latest_comparisons_allowance(world, more_samples):
    assert more_samples.answer[0] == 202 and more_samples.answer[1]["kind"] == "more_samples"
    assert more_samples.pr_runs == []
    lake = world.harness.lake
    latest = load_request(lake, REPO, str(PR), world.example.sha(REGRESSING))
    first = load_request(lake, REPO, str(PR), world.example.sha(IMPROVING))
    assert (latest.extra_samples, first.extra_samples) == (16, 0)


def _comparison_of(request: dg.RunRequest) -> str:
    return (request.tags or {}).get("evalrunner/comparison") or str(request.partition_key)


def test_raised_allowance_wakes_the_sampling_loop_for_that_comparison_only(world, more_samples):
    woken = {_comparison_of(r) for r in more_samples.sampling_after.run_requests or []}
    assert woken == {_key(world, REGRESSING)}


# -- 5. more samples from the PR's web page ----------------------------------------------------------
def test_asking_for_more_on_the_pr_page_raises_the_allowance_as_the_comment_does(world, more_from_the_page):
    stage = more_from_the_page
    assert "Ask for more samples" in stage.page
    assert stage.answer.status_code == 303 and stage.answer.headers["location"].endswith("?more=5")
    assert "Asked for 5 more samples per task" in stage.after
    assert stage.pr_runs == []
    lake = world.harness.lake
    latest = load_request(lake, REPO, str(PR), world.example.sha(REGRESSING))
    first = load_request(lake, REPO, str(PR), world.example.sha(IMPROVING))
    assert (latest.extra_samples, first.extra_samples) == (16 + 5, 0)
    woken = {_comparison_of(r) for r in stage.sampling_after.run_requests or []}
    assert woken == {_key(world, REGRESSING)}


def test_the_pages_more_samples_action_needs_the_token_and_a_sound_count(world, more_from_the_page):
    from evalrunner_assets.github.inbox import MAX_MORE_SAMPLES
    from evalrunner_assets.report.links import pull_request_path

    lake = world.harness.lake
    queued = sorted(lake.glob("inbox/github/*.json"))
    path = pull_request_path(REPO, PR, world.example.sha(REGRESSING))
    client = _web(world)
    assert client.get(path + "/more").status_code == 405  # a link or a crawler never asks for samples
    assert client.post(path + "/more", data={"n": "5"}).status_code == 401
    assert client.post(path + "/more", data={"n": "5", "token": "wrong"}).status_code == 401
    for bad in ("0", "-3", "x", str(MAX_MORE_SAMPLES + 1)):
        refused = client.post(path + "/more", data={"n": bad, "token": ACTION_TOKEN})
        assert refused.status_code == 400 and f"1 to {MAX_MORE_SAMPLES}" in refused.text, bad
    # The PR moved on from the first head: its page refuses rather than extend the wrong head.
    old = pull_request_path(REPO, PR, world.example.sha(IMPROVING))
    stale = client.post(old + "/more", data={"n": "5", "token": ACTION_TOKEN})
    assert stale.status_code == 409 and world.example.sha(REGRESSING)[:7] in stale.text
    assert "Ask for more samples" in client.get(old).text  # offered; refused only when asked
    off = _web(world, token=None)
    assert off.post(path + "/more", data={"n": "5", "token": ACTION_TOKEN}).status_code == 503
    page = off.get(path).text
    assert "Ask for more samples" not in page and "/eval more N" in page
    assert sorted(lake.glob("inbox/github/*.json")) == queued  # nothing refused was queued
