"""A pull request through the real daemon: `evalrunner serve` (receiver + `dagster dev`) on
loopback, signed deliveries, GitHub the REST stand-in (mocked: github.com is not reachable), no
sensor called by hand.

One PR lives through three stages, each a module-scoped fixture building on the previous one:
``opened`` (the improving variant) → verdict; ``synchronized`` (head moved to the regressing
variant) → a new verdict; ``more`` (a member comments ``/eval more 16`` on the decided head).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from evalrunner_assets.example_repo import ExampleRepo, build_example_repo
from evalrunner_assets.pipeline.assess import load_result
from evalrunner_assets.pipeline.keys import comparison_key
from evalrunner_assets.pipeline.spec import load_request
from evalrunner_assets.report.markdown import MARKER
from lake import Lake
from tests.helpers.github_standin import GitHubStandin
from tests.helpers.served_evalrunner import ServedEvalrunner, changed_files, comment_delivery, pull_request_delivery

pytestmark = pytest.mark.slow

REPO = "example/support-agent"
PR = 11
IMPROVING, REGRESSING = "improve-runbook", "regress-escalation"
VERDICT_TIMEOUT = 300.0


@dataclass
class World:
    example: ExampleRepo
    standin: GitHubStandin
    served: ServedEvalrunner

    def lake(self) -> Lake:
        return Lake(str(self.served.home / "lake"))

    def result(self, variant: str) -> Any:
        return load_result(self.lake(), REPO, str(PR), self.example.sha(variant))

    def key(self, variant: str) -> str:
        return comparison_key(REPO, str(PR), self.example.sha(variant))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, bwrap_backend: Any) -> Iterator[World]:
    root = tmp_path_factory.mktemp("daemon-e2e")
    example = build_example_repo(root / "example-repo", [IMPROVING, REGRESSING])
    with GitHubStandin(token="daemon-e2e-token") as standin:
        standin.add_repo(REPO)
        served = ServedEvalrunner.start(root / "home", standin, {REPO: example.path})
        try:
            yield World(example, standin, served)
        finally:
            served.stop()


@dataclass
class Stage:
    answer: tuple[int, dict] = (0, {})
    seconds: float = 0.0
    check_run: dict[str, Any] = field(default_factory=dict)
    runs: list[Any] = field(default_factory=list)


def _pr_stage(world: World, action: str, variant: str) -> Stage:
    head, base = world.example.sha(variant), world.example.base_sha
    world.standin.add_pull(REPO, PR, head, base, files=changed_files(world.example.path, base, head), head_ref=variant)
    stage = Stage()
    started = time.monotonic()
    payload = pull_request_delivery(action, repo=REPO, pr=PR, head=head, base=base, head_ref=variant)
    stage.answer = world.served.deliver("pull_request", payload)
    stage.check_run = world.served.wait_for(
        lambda: world.served.completed_check_run(REPO, head), VERDICT_TIMEOUT, f"a verdict on {variant}", every=0.5
    )
    stage.seconds = time.monotonic() - started
    # the run reports its assets after the check run completes: wait for it to end
    world.served.wait_for(
        lambda: all(r.is_finished for r in world.served.runs_for(world.key(variant))), 60, "the run ended"
    )
    stage.runs = world.served.runs_for(world.key(variant))
    print(f"{action} → verdict in {stage.seconds:.1f}s, {len(stage.runs)} Dagster run(s)")
    return stage


@pytest.fixture(scope="module")
def opened(world: World) -> Stage:
    return _pr_stage(world, "opened", IMPROVING)


@pytest.fixture(scope="module")
def synchronized(world: World, opened: Stage) -> Stage:
    return _pr_stage(world, "synchronize", REGRESSING)


@dataclass
class MoreStage:
    answer: tuple[int, dict]
    samples_before: int
    samples_after: int
    history_before: list[tuple[str, str | None]]
    check_runs: list[dict[str, Any]]
    runs: list[Any]


@pytest.fixture(scope="module")
def more(world: World, synchronized: Stage) -> MoreStage:
    head = world.example.sha(REGRESSING)
    (before,) = world.standin.check_runs_for(REPO, head)
    history_before = list(before["_history"])
    samples_before = world.result(REGRESSING).samples_run
    runs_before = len(world.served.runs_for(world.key(REGRESSING)))
    answer = world.served.deliver("issue_comment", comment_delivery("/eval more 16", repo=REPO, pr=PR))
    # The sampling sensor wakes the comparison (one more run); wait for that run to end.
    world.served.wait_for(
        lambda: (
            len(runs := world.served.runs_for(world.key(REGRESSING))) > runs_before and all(r.is_finished for r in runs)
        ),
        VERDICT_TIMEOUT,
        "the run /eval more asked for",
        every=0.5,
    )
    result = world.result(REGRESSING)
    return MoreStage(
        answer,
        samples_before,
        result.samples_run,
        history_before,
        world.standin.check_runs_for(REPO, head),
        world.served.runs_for(world.key(REGRESSING)),
    )


def _ours(world: World) -> list[dict[str, Any]]:
    return [c for c in world.standin.comments_on(REPO, PR) if MARKER in c["body"]]


def test_pull_request_delivery_gets_its_verdict_from_one_dagster_run(world: World, opened: Stage) -> None:
    assert opened.answer[0] == 202, opened.answer
    assert (opened.check_run["status"], opened.check_run["conclusion"]) == ("completed", "success")
    result = world.result(IMPROVING)
    assert result is not None and (result.status, result.verdict) == ("complete", "IMPROVED")
    assert [(r.job_name, r.status.value) for r in opened.runs] == [("comparison_job", "SUCCESS")]
    (comment,) = _ours(world)
    assert "evalrunner: IMPROVED" in comment["body"]


def test_synchronize_gets_a_new_verdict_on_the_same_comment(world: World, opened: Stage, synchronized: Stage) -> None:
    assert synchronized.answer[0] == 202, synchronized.answer
    assert (synchronized.check_run["status"], synchronized.check_run["conclusion"]) == ("completed", "failure")
    assert world.result(REGRESSING).verdict == "REGRESSED"
    assert [(r.job_name, r.status.value) for r in synchronized.runs] == [("comparison_job", "SUCCESS")]
    (comment,) = _ours(world)
    assert "evalrunner: REGRESSED" in comment["body"]


def test_each_head_has_exactly_one_check_run_updated_in_place(world: World, synchronized: Stage) -> None:
    for variant, conclusion in ((IMPROVING, "success"), (REGRESSING, "failure")):
        (run,) = world.standin.check_runs_for(REPO, world.example.sha(variant))
        # opened in progress by the run before any verdict, then completed, always the same run
        assert run["_history"][0] == ("in_progress", None), run["_history"]
        assert run["_history"][-1] == ("completed", conclusion)
    assert len(world.standin.calls("POST", "/check-runs")) == 2


def test_head_ref_flows_to_the_request_the_document_and_the_comment(world: World, synchronized: Stage) -> None:
    head = world.example.sha(REGRESSING)
    assert load_request(world.lake(), REPO, str(PR), head).head_ref == REGRESSING
    assert world.result(REGRESSING).head_ref == REGRESSING
    (comment,) = _ours(world)
    assert f"`{REGRESSING}` @ `{head[:7]}`" in comment["body"]


def test_eval_more_on_a_decided_head_reuses_its_check_run_reopening_it_only_if_samples_ran(
    world: World, more: MoreStage
) -> None:
    assert more.answer[0] == 202 and more.answer[1]["kind"] == "more_samples"
    (run,) = more.check_runs  # still one check run for the head
    after = run["_history"][len(more.history_before) :]
    assert run["_history"][: len(more.history_before)] == more.history_before
    assert after[-1][0] == "completed"
    if more.samples_after > more.samples_before:
        assert ("in_progress", None) in after, after  # re-opened while the samples ran
    else:
        assert ("in_progress", None) not in after, after  # nothing ran: never re-opened
    assert all(r.status.value == "SUCCESS" for r in more.runs)


def test_the_daemon_log_has_no_errors(world: World, more: MoreStage) -> None:
    log = world.served.log_text()
    assert "Traceback" not in log, log[-3000:]
