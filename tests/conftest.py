"""Shared fixtures: throwaway git repositories and the bubblewrap backend."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Callable

import pytest

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
}


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def commit_files(repo: Path, files: dict[str, str | bytes], message: str = "c",
                 executable: tuple[str, ...] = ()) -> str:
    """Write ``files`` into ``repo`` (initialising it if needed), commit, return the SHA."""
    repo.mkdir(parents=True, exist_ok=True)
    if not (repo / ".git").exists():
        git(repo, "init", "-q", "-b", "main")
    for rel, content in files.items():
        p = repo / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)
        if rel in executable:
            p.chmod(0o755)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def make_repo(tmp_path: Path) -> Callable[..., tuple[Path, str]]:
    """``make_repo(files, executable=(...))`` → (repo path, commit SHA)."""
    counter = iter(range(1000))

    def make(files: dict[str, str | bytes], executable: tuple[str, ...] = ()) -> tuple[Path, str]:
        repo = tmp_path / f"repo{next(counter)}"
        return repo, commit_files(repo, files, executable=executable)

    return make


@pytest.fixture(scope="session")
def bwrap_backend():
    """The bubblewrap backend, preflighted once. Fails (not skips) when it cannot run:
    CI installs bubblewrap, and a silently skipped containment test proves nothing."""
    from evalrunner_assets.execution.bubblewrap import BubblewrapBackend

    backend = BubblewrapBackend()
    backend.preflight()
    return backend
