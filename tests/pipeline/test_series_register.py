"""A user can try the cohort series on the example from the command line and the UI: the
example's 12-commit history is built by `example-repo --history`, and `series register` makes
its commits known as `main_commits` partitions without measuring anything (the real CLI, a real
persistent Dagster instance, a real lake)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

EVALRUNNER = str(Path(sys.executable).with_name("evalrunner"))


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "EVALRUNNER_HOME": str(home)}
    for name in ("DAGSTER_HOME", "EVALRUNNER_LAKE"):
        env.pop(name, None)
    return subprocess.run([EVALRUNNER, *args], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_example_history_is_registered_as_partitions_and_nothing_is_measured(tmp_path: Path) -> None:
    home, repo = tmp_path / "home", tmp_path / "history"
    built = _cli(home, "example-repo", str(repo), "--history")
    assert built.returncode == 0, built.stderr
    lines = [ln for ln in built.stdout.splitlines() if "  " in ln and not ln.startswith(str(repo))]
    assert len(lines) == 12 and any(" regression " in ln for ln in lines) and any("cohort_added" in ln for ln in lines)
    again = _cli(home, "example-repo", str(repo), "--history")
    assert again.returncode == 2 and "not an empty directory" in again.stderr, again.stderr

    done = _cli(home, "series", "register", "--repo", str(repo), "--repo-id", "example/support-agent", "--last", "12")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("12 commit(s) of example/support-agent main are main_commits partitions")
    # Registering a part again adds nothing.
    done = _cli(home, "series", "register", "--repo", str(repo), "--repo-id", "example/support-agent", "--last", "5")
    assert done.returncode == 0, done.stderr
    shas = subprocess.run(
        ["git", "-C", str(repo), "rev-list", "--first-parent", "--reverse", "main"], capture_output=True, text=True
    ).stdout.split()
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        keys = instance.get_dynamic_partitions("main_commits")
    # Every commit once, oldest first as the range a backfill selects; nothing was measured.
    assert keys == [f"example/support-agent@{sha}" for sha in shas]
    assert not (home / "lake" / "series").exists() or not list((home / "lake" / "series").rglob("points/*.json"))
    assert not (home / "lake" / "batches").exists()

    bad = _cli(home, "series", "register", "--repo", str(repo), "--last", "0")
    assert bad.returncode == 2 and "--last" in bad.stderr, bad.stderr
