"""The bundled SWE-style example: the tinystats repository as a git repository (fixed author,
date and message, so the commit is the same everywhere) and its task-set file."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

from evalrunner_assets.example_repo import Git
from evalrunner_assets.swe.agent import EXAMPLE_DIR

EXAMPLE_TASK_SET = EXAMPLE_DIR / "taskset.json"
EXAMPLE_REPO_SOURCE = EXAMPLE_DIR / "repo"
COMMIT_DATE = datetime(2025, 2, 3, 9, 0, tzinfo=UTC)


def build_tinystats_repo(dest: Path) -> str:
    """Create the example repository at ``dest`` (must not exist); returns its commit."""
    if dest.exists():
        raise FileExistsError(f"{dest} exists; give a new directory for the example repository")
    shutil.copytree(EXAMPLE_REPO_SOURCE, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"))
    for p in dest.rglob("*"):
        if p.is_file():
            p.chmod(0o644)
    git = Git(dest)
    git("init", "-q", "-b", "main")
    git("add", "-A")
    return git.commit("tinystats: numeric and text helpers", COMMIT_DATE)
