"""The outage breaker: consecutive infrastructure failures stop the comparison with a status
naming them, within the stated overshoot; an agent that fails every sample never trips it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from evalrunner_assets.example_repo import EXAMPLE_REPO_SOURCE
from tests.helpers.compare_runs import lake, run_compare

pytestmark = pytest.mark.slow

WORKERS = 2
SOLVE = "        state.messages.insert(0, ChatMessageSystem(content=prompt))\n        return state\n"
# The sandboxed Inspect process kills itself in the middle of a sample: a sandbox crash.
KILLS_ITS_SANDBOX = "        import os, signal\n        os.kill(os.getpid(), signal.SIGKILL)\n" + SOLVE
# The agent answers nothing useful: every sample is scored wrong, the log is healthy.
ANSWERS_WRONG = (
    "        from inspect_ai.model import ModelOutput\n"
    "        state.output = ModelOutput.from_content(model='none', content='I cannot help with that.')\n"
    "        state.completed = True\n        return state\n"
)


def _git(repo: Path, *args: str) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
    }
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)


def repo_whose_solver(tmp: Path, body: str) -> Path:
    """The example agent with its solver replaced on both the base and the head commit."""
    repo = tmp / "repo"
    shutil.copytree(EXAMPLE_REPO_SOURCE, repo)
    triage = repo / "evals" / "triage.py"
    text = triage.read_text()
    assert SOLVE in text
    triage.write_text(text.replace(SOLVE, body))
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    _git(repo, "checkout", "-q", "-b", "improve-runbook")
    (repo / "agent.yaml").write_text((repo / "agent.yaml").read_text() + "\n# head\n")
    _git(repo, "commit", "-q", "-am", "head")
    return repo


def doc_of(home: Path) -> dict:
    return json.loads(
        next(p for p in (lake(home) / "comparisons").rglob("*.json") if p.name.count(".") == 1).read_text()
    )


def test_sandboxes_that_die_trip_the_breaker_after_five_with_bounded_overshoot(tmp_path: Path) -> None:
    repo = repo_whose_solver(tmp_path, KILLS_ITS_SANDBOX)
    home = tmp_path / "home"
    home.mkdir()
    done = run_compare(home, repo, "--cap", "16", "--workers", str(WORKERS))
    assert done.returncode == 3, done.stderr[-3000:]
    assert "outage breaker tripped after 5 consecutive infrastructure failures" in done.stderr
    doc = doc_of(home)
    assert doc["status"] == "stopped" and doc["verdict"] == "INCONCLUSIVE"
    breaker = doc["breaker"]
    assert breaker["threshold"] == 5 and breaker["consecutive_failures"] == 5
    # Each failure is named as itself: the sandbox's process was killed (SIGKILL).
    assert {f["kind"] for f in breaker["failures"]} == {"sandbox_killed"}
    assert all(f["task"] and f["window"] and f["cause"] for f in breaker["failures"])
    assert doc["execution"]["failed_attempts"] >= 5
    assert len(breaker["overshoot_steps"]) <= breaker["overshoot_bound"] == WORKERS - 1
    # Steps run: the trip step and what came before it, plus at most the overshoot.
    assert doc["execution"]["steps"] <= breaker["tripped_at_step"] + 1 + WORKERS - 1
    # Failed windows are counted; their spend is unknown (the sandbox died: no log).
    assert doc["execution"]["not_landed"]["windows"] >= 1
    assert doc["execution"]["not_landed"]["cost_usd"] is None
    # The lake's failure records say the same to the report: the PR comment counts the failed
    # windows beside the spend, with their cost unknown rather than $0.00.
    failed = doc["failed_windows"]
    assert failed["windows"] >= 1 and failed["unknown_windows"] == failed["windows"]
    assert failed["cost_usd"] is None
    comment = next((lake(home) / "comparisons").rglob("*.comment.md")).read_text()
    footer = next(line for line in comment.splitlines() if line.startswith("Samples run:"))
    assert (
        f"not landed: {failed['windows']} window(s) failed on infrastructure (no readable log: their use is unknown)"
    ) in footer


def test_an_agent_that_fails_every_sample_does_not_trip_the_breaker(tmp_path: Path) -> None:
    repo = repo_whose_solver(tmp_path, ANSWERS_WRONG)
    home = tmp_path / "home"
    home.mkdir()
    done = run_compare(home, repo, "--cap", "16", "--workers", str(WORKERS), "--head", "improve-runbook")
    assert done.returncode == 0, done.stderr[-3000:]
    doc = doc_of(home)
    assert doc["status"] == "complete" and "breaker" not in doc
    assert doc["execution"]["failed_attempts"] == 0
    tasks = doc["tasks"].values()
    assert all(t["head"]["samples"] == 16 and t["base"]["samples"] == 16 for t in tasks)
    assert not (lake(home) / "failures").exists()
