"""Storage the command line cannot write or read — the home, the lake, the Dagster instance — as a
person meets it: the real console script in a subprocess, the storage made read-only, unreadable
or full for real. Exit 2 naming the path and the setting to change (3 for a full disk), never an
"unexpected" error.

Root ignores permission bits, so each child gets its storage fault from the kernel: a read-only
bind mount or a tiny tmpfs in a mount namespace of its own (``unshare --mount``; the test's own
mounts are untouched), or a chmod 000 directory read without CAP_DAC_OVERRIDE and
CAP_DAC_READ_SEARCH (``setpriv``)."""

from __future__ import annotations

import errno
import os
import shlex
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.helpers.evalrunner_cli import EVALRUNNER, TIMEOUT, cli_env
from tests.helpers.git_repos import commit_files, git

ROOT = os.geteuid() == 0


def _mounts_work() -> bool:
    if not ROOT or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", "mount -t tmpfs tmpfs /mnt"],
        capture_output=True,
    )
    return probe.returncode == 0


needs_mounts = pytest.mark.skipif(not _mounts_work(), reason="needs root and mount namespaces (unshare --mount)")
needs_setpriv = pytest.mark.skipif(
    not ROOT or shutil.which("setpriv") is None, reason="needs root and setpriv to drop CAP_DAC_OVERRIDE"
)


def _repo(tmp_path: Path) -> Path:
    """A repository with two commits, `main` and `pr` (no evals: these commands stop earlier)."""
    repo = tmp_path / "agent"
    commit_files(repo, {"README.md": "base\n"})
    git(repo, "checkout", "-q", "-b", "pr")
    commit_files(repo, {"README.md": "head\n"})
    git(repo, "checkout", "-q", "main")
    return repo


def _compare(repo: Path) -> list[str]:
    return [EVALRUNNER, "compare", "--repo", str(repo), "--base", "main", "--head", "pr"]


def _in_mounts(mounts: list[str], argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """``argv`` in a private mount namespace where ``mounts`` (shell commands) were run first."""
    script = " && ".join([*mounts, 'exec "$@"'])
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *argv],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def _read_only(path: Path) -> str:
    return f"mount --bind -o ro {shlex.quote(str(path))} {shlex.quote(str(path))}"


def _two_lines(done: subprocess.CompletedProcess, code: int) -> tuple[str, str]:
    assert done.returncode == code, done.stdout[-2000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "unexpected" not in done.stderr, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2, done.stderr
    return lines[0], lines[1]


@needs_mounts
@pytest.mark.parametrize("command", ["compare", "repos add"])
@pytest.mark.slow
def test_a_home_on_a_read_only_file_system_is_exit_2_naming_the_path_and_evalrunner_home(
    tmp_path: Path, command: str
) -> None:
    repo, home = _repo(tmp_path), tmp_path / "home"
    home.mkdir()
    # compare opens the Dagster instance first; `repos add` only writes the lake.
    argv, path, what, setting = (
        (_compare(repo), home / "dagster", "the Dagster instance", "DAGSTER_HOME")
        if command == "compare"
        else ([EVALRUNNER, "repos", "add", "acme/agent", str(repo)], home / "lake", "the lake", "EVALRUNNER_LAKE")
    )
    done = _in_mounts([_read_only(home)], argv, cli_env(home), tmp_path)
    first, hint = _two_lines(done, 2)
    assert first == f"evalrunner {command.split()[0]}: cannot write {path} ({what}): read-only file system", first
    assert hint.strip() == f"point EVALRUNNER_HOME (or {setting}) at a writable directory", hint
    assert not path.exists()


@needs_mounts
@pytest.mark.slow
def test_a_read_only_home_with_the_lake_and_instance_elsewhere_names_evalrunner_home(tmp_path: Path) -> None:
    repo, home = _repo(tmp_path), tmp_path / "home"
    home.mkdir()
    env = cli_env(home, EVALRUNNER_LAKE=str(tmp_path / "lake"), DAGSTER_HOME=str(tmp_path / "instance"))
    done = _in_mounts([_read_only(home)], _compare(repo), env, tmp_path)
    first, hint = _two_lines(done, 2)
    assert f"cannot write {home}" in first and "(evalrunner's home): read-only file system" in first, first
    assert hint.strip() == "point EVALRUNNER_HOME at a writable directory", hint


@needs_mounts
@pytest.mark.parametrize("moved", [False, True], ids=["under-the-home", "dagster-home-set"])
@pytest.mark.slow
def test_a_read_only_dagster_instance_is_exit_2_before_any_sandbox_runs(tmp_path: Path, moved: bool) -> None:
    from evalrunner_assets.example_repo import build_example_repo

    repo = tmp_path / "repo"
    build_example_repo(repo, ["no-op-wording"])
    from evalrunner_assets.home import new_dagster_yaml

    home = tmp_path / "home"
    instance = tmp_path / "instance" if moved else home / "dagster"
    instance.mkdir(parents=True)
    # A new instance's first write is its dagster.yaml (named, not its temporary file); an
    # instance that has one is probed by a write in its directory.
    if moved:
        (instance / "dagster.yaml").write_text(new_dagster_yaml())
    env = cli_env(home, **({"DAGSTER_HOME": str(instance)} if moved else {}))
    argv = [EVALRUNNER, "compare", "--repo", str(repo), "--base", "main", "--head", "no-op-wording", "--cap", "16"]
    done = _in_mounts([_read_only(instance)], argv, env, tmp_path)
    first, hint = _two_lines(done, 2)
    named = instance if moved else instance / "dagster.yaml"
    assert first == f"evalrunner compare: cannot write {named} (the Dagster instance): read-only file system"
    assert hint.strip() == (
        "point DAGSTER_HOME at a writable directory"
        if moved
        else "point EVALRUNNER_HOME (or DAGSTER_HOME) at a writable directory"
    ), hint
    assert " ran " not in done.stdout, done.stdout  # found before the first window, not after


@needs_mounts
@pytest.mark.slow
def test_a_full_disk_under_the_lake_is_exit_3_naming_the_file(tmp_path: Path) -> None:
    repo, home = _repo(tmp_path), tmp_path / "home"
    lake = home / "lake"
    lake.mkdir(parents=True)
    fill = f"mount -t tmpfs -o size=64k tmpfs {shlex.quote(str(lake))} && {{ cat /dev/zero > {lake}/filler 2>/dev/null || true; }}"
    done = _in_mounts([fill], _compare(repo), cli_env(home), tmp_path)
    first, hint = _two_lines(done, 3)
    assert f"cannot write {lake}/" in first and "(the lake): no space left on the device" in first, first
    assert ".tmp-" not in first  # the file it was writing, not its temporary name
    assert "free space there" in hint and "EVALRUNNER_HOME (or EVALRUNNER_LAKE)" in hint, hint


@needs_setpriv
@pytest.mark.parametrize("command", ["compare", "repos add"])
@pytest.mark.slow
def test_an_unreadable_lake_directory_is_exit_2_naming_it(tmp_path: Path, command: str) -> None:
    repo, home = _repo(tmp_path), tmp_path / "home"
    locked = home / "lake" / "repos"
    locked.mkdir(parents=True)
    locked.chmod(0o000)
    argv = _compare(repo) if command == "compare" else [EVALRUNNER, "repos", "add", "acme/agent", str(repo)]
    no_override = "-dac_override,-dac_read_search"
    try:
        done = subprocess.run(
            ["setpriv", f"--bounding-set={no_override}", f"--inh-caps={no_override}", *argv],
            env=cli_env(home),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    finally:
        locked.chmod(0o755)
    first, hint = _two_lines(done, 2)
    assert f"cannot access {locked}/" in first and "(the lake): permission denied" in first, first
    assert "read and write it, or point EVALRUNNER_HOME (or EVALRUNNER_LAKE) at a directory it can write" in hint


def test_a_read_only_sqlite_storage_of_the_instance_is_named_as_the_dagster_instance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dagster's SQLite error names no file: the line names the instance's directory. The
    error is SQLite's own, from a database opened read-only."""
    import sqlalchemy

    from evalrunner_assets.errors import explain

    monkeypatch.setenv("EVALRUNNER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.delenv("EVALRUNNER_LAKE", raising=False)
    db = tmp_path / "runs.db"
    sqlite3.connect(db).execute("create table runs (id text)")
    engine = sqlalchemy.create_engine(f"sqlite:///file:{db}?mode=ro&uri=true")
    with pytest.raises(sqlalchemy.exc.OperationalError) as raised:
        with engine.begin() as con:
            con.execute(sqlalchemy.text("insert into runs values ('x')"))
    try:
        raise RuntimeError("recording in Dagster failed") from raised.value
    except RuntimeError as exc:
        explained = explain(exc, "backfill")
    assert explained.exit_code == 2
    instance = tmp_path / "home" / "dagster"
    assert explained.lines[0] == (
        f"evalrunner backfill: cannot write the Dagster instance's SQLite storage in {instance}: "
        "attempt to write a readonly database"
    ), explained.lines
    assert "EVALRUNNER_HOME (or DAGSTER_HOME)" in explained.lines[1]


def test_a_read_only_path_of_the_persons_own_is_exit_2_without_naming_a_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evalrunner_assets.errors import explain

    monkeypatch.setenv("EVALRUNNER_HOME", str(tmp_path / "home"))
    elsewhere = str(tmp_path / "out" / "training.jsonl")
    explained = explain(OSError(errno.EROFS, os.strerror(errno.EROFS), elsewhere), "finetune")
    assert explained.exit_code == 2
    assert explained.lines[0] == f"evalrunner finetune: cannot write {elsewhere}: read-only file system"
    assert "EVALRUNNER" not in explained.lines[1]
    # Any other OSError is still a bug, said as one.
    assert explain(OSError(errno.EIO, "I/O error", elsewhere), "finetune").exit_code == 1
