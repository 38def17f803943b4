"""End to end on the example: the base's triage/runbook_lookup trajectories (landed by a real
comparison) are mined, the template fixer opens a PR with the evidence on the stand-in GitHub,
and `evalrunner compare` judges that PR's head IMPROVED on the task the pattern came from."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from evalrunner_assets.example_repo import build_example_repo
from tests.helpers.github_standin import GitHubStandin

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
REPO = "example/support-agent"
TASK = "triage/runbook_lookup"


def _evalrunner(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("evalrunner", path=os.path.dirname(sys.executable)) or "evalrunner"
    return subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=600)


def test_mined_pattern_becomes_a_skill_fix_pr_the_evals_judge_improved_standin_github(tmp_path):
    repo = build_example_repo(tmp_path / "repo", variants=("no-op-wording",)).path
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(bare)], check=True)
    base = subprocess.run(["git", "-C", str(repo), "rev-parse", "main"], capture_output=True, text=True).stdout.strip()
    env = {**os.environ, "EVALRUNNER_HOME": str(tmp_path / "home"), "EVALRUNNER_GITHUB_TOKEN": "miner-token"}
    # Any comparison lands the base's trajectories; a wording-only PR is the cheapest one.
    landed = _evalrunner(
        env, "compare", "--repo", str(repo), "--repo-id", REPO, "--base", "main", "--head", "no-op-wording"
    )
    assert landed.returncode == 0, landed.stderr
    standin = GitHubStandin(token="miner-token")
    standin.add_repo(REPO, git_dir=bare)
    with standin:
        env["EVALRUNNER_GITHUB_API_URL"] = standin.base_url
        mined = _evalrunner(env, "mine", "--repo-id", REPO, "--commit", base, "--task", TASK, "--fix", "pr",
                            "--repo", str(repo))  # fmt: skip
        assert mined.returncode == 0, mined.stderr
        [pull] = standin.pulls_on(REPO)
    assert "never calls runbook_search" in mined.stdout and "pull request opened" in mined.stdout
    assert [label["name"] for label in pull["labels"]] == ["authored by trajectory-miner"]
    assert pull["body"].startswith("**authored by trajectory-miner**")
    assert "failing samples" in pull["body"] and "never calls runbook_search" in pull["body"]
    assert pull["head"]["ref"].startswith("trajectory-miner/")
    # The checkout is untouched: the edit went to the PR only.
    assert (
        subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True).stdout == ""
    )
    # The PR's head, fetched as a CI checkout would, judged against main like any other PR.
    subprocess.run(["git", "-C", str(repo), "fetch", "-q", str(bare), f"{pull['head']['ref']}:miner-pr"], check=True)
    diff = subprocess.run(["git", "-C", str(repo), "diff", "--name-only", "main", "miner-pr"], capture_output=True,
                          text=True).stdout.split()  # fmt: skip
    assert diff == ["skills/triage/SKILL.md"]
    judged = _evalrunner(env, "compare", "--repo", str(repo), "--repo-id", REPO, "--base", "main", "--head", "miner-pr")
    assert judged.returncode == 0, judged.stderr
    assert [line for line in judged.stdout.splitlines() if line.startswith("IMPROVED: ")], judged.stdout
    [row] = [line for line in judged.stdout.splitlines() if line.strip().startswith(TASK + " ")]
    assert row.split()[-3] == "improved", row
