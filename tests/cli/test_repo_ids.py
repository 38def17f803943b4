"""A repository id names one repository: recording it for another source is refused unless
asked to repoint it (real lake on disk, real git checkouts, the real CLI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalrunner_assets.execution.repo import RepoIdInUse
from lake import LAYOUT, open_lake
from resources.repo import RepoResource
from tests.helpers.git_repos import commit_files, git

EVALRUNNER = str(Path(sys.executable).with_name("evalrunner"))


def _checkout(path: Path) -> Path:
    commit_files(path, {"README.md": path.name}, "first")
    git(path, "checkout", "-q", "-b", "head")
    commit_files(path, {"README.md": path.name + " again"}, "second")
    git(path, "checkout", "-q", "main")
    return path


def test_an_id_recorded_for_one_source_refuses_another_naming_both(tmp_path: Path) -> None:
    lake = open_lake(str(tmp_path / "lake"))
    one, other = _checkout(tmp_path / "one"), _checkout(tmp_path / "other")
    repos = RepoResource()
    repos.register(lake, "acme/agent", str(one))
    repos.register(lake, "acme/agent", str(one) + "/")  # the same checkout again: fine
    link = tmp_path / "link"
    link.symlink_to(one)
    repos.register(lake, "acme/agent", str(link))  # the same checkout through a symlink: fine
    with pytest.raises(RepoIdInUse) as err:
        repos.register(lake, "acme/agent", str(other))
    assert str(one) in str(err.value) and str(other) in str(err.value) and "acme/agent" in str(err.value)
    assert "--repoint" in err.value.hint
    # Nothing was re-pointed.
    assert json.loads(lake.read_bytes(LAYOUT.repo_source("acme/agent")))["source"] in (str(one), str(link))
    repos.register(lake, "acme/agent", str(other), repoint=True)
    assert json.loads(lake.read_bytes(LAYOUT.repo_source("acme/agent")))["source"] == str(other)
    # URLs: a trailing slash or .git names the same repository.
    repos.register(lake, "acme/remote", "https://git.example/acme/remote.git")
    repos.register(lake, "acme/remote", "https://git.example/acme/remote")
    with pytest.raises(RepoIdInUse):
        repos.register(lake, "acme/remote", "https://git.example/acme/fork.git")
    assert repos.registered(lake) == [
        ("acme/agent", str(other)),
        ("acme/remote", "https://git.example/acme/remote.git"),
    ]


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "EVALRUNNER_HOME": str(home)}
    env.pop("DAGSTER_HOME", None)
    env.pop("EVALRUNNER_LAKE", None)
    return subprocess.run([EVALRUNNER, *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_the_cli_refuses_to_repoint_an_id_in_one_line_and_lists_sources(tmp_path: Path) -> None:
    home = tmp_path / "home"
    one, other = _checkout(tmp_path / "one"), _checkout(tmp_path / "other")
    assert _cli(home, "repos", "add", "acme/agent", str(one)).returncode == 0
    done = _cli(home, "repos", "add", "acme/agent", str(other))
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert lines[0] == (f"evalrunner repos: repository id 'acme/agent' already names {one}, not {other}"), done.stderr
    assert "--repoint" in done.stderr and "Traceback" not in done.stderr
    # compare with another checkout under the same id is refused before any work, the same way.
    done = _cli(home, "compare", "--repo", str(other), "--repo-id", "acme/agent", "--base", "main", "--head", "head")
    assert done.returncode == 2 and f"already names {one}, not {other}" in done.stderr, done.stderr
    listed = _cli(home, "repos", "list")
    assert listed.returncode == 0 and f"acme/agent  {one}" in listed.stdout, listed
    done = _cli(home, "repos", "add", "acme/agent", str(other), "--repoint")
    assert done.returncode == 0, done.stderr
    assert f"acme/agent  {other}" in _cli(home, "repos", "list").stdout
