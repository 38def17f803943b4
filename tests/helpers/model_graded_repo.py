"""The model-graded example repository (``tests/fixtures/model-graded-repo``: a rule scorer and a
grader model) as a git repository, and the model API key the gateway holds (a sandbox never
sees it)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers.git_repos import commit_files, git

KEY = "sk-standin-REAL-KEY-never-in-a-sandbox-7f3a9c"
FIXTURE = Path(__file__).parents[1] / "fixtures" / "model-graded-repo"


def graded_repo(tmp_path: Path) -> Path:
    """``tests/fixtures/model-graded-repo`` committed as ``main`` and a ``head`` branch one commit on."""
    repo = tmp_path / "graded-repo"
    shutil.copytree(FIXTURE, repo)
    commit_files(repo, {}, message="base")
    git(repo, "checkout", "-q", "-b", "head")
    commit_files(repo, {"README.md": "Support answers, judged by rule and by a grader model.\n"}, message="head")
    return repo
