"""Repositories at exact commits: SHA rules, exports without .git, remotes mirrored once."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from evalrunner_assets.execution.repo import (
    AmbiguousCommit,
    CommitNotFound,
    CommitNotHex,
    RefNotFound,
    RepoError,
    RepoSource,
    tree_digest,
)
from tests.helpers.git_repos import commit_files, git


@pytest.fixture
def repo(tmp_path):
    path = tmp_path / "src"
    first = commit_files(
        path,
        {"agent.yaml": "model: a\n", "skills/triage/SKILL.md": "be kind\n", ".evals/list": "#!/bin/sh\necho {}\n"},
        executable=(".evals/list",),
    )
    git(path, "branch", "feature")
    git(path, "tag", "v1")
    second = commit_files(path, {"skills/triage/SKILL.md": "be brief\n", "new.txt": "n\n"})
    return path, first, second


@pytest.mark.parametrize(
    "bad",
    ["main", "feature", "v1", "HEAD", "HEAD~1", "abc", "g" * 40, "-x", "a" * 65, "deadbeef^", "", "refs/heads/main"],
)
def test_the_exporter_refuses_anything_but_hex(repo, bad, tmp_path):
    path, *_ = repo
    src = RepoSource("acme/agent", str(path))
    with pytest.raises(CommitNotHex, match="is not 7–64 hex characters; give a commit SHA"):
        src.resolve_commit(bad)
    with pytest.raises(CommitNotHex):
        src.export(bad, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_short_and_upper_case_shas_resolve_to_the_full_sha(repo):
    path, first, second = repo
    src = RepoSource("acme/agent", str(path))
    assert src.resolve_commit(first[:7]) == first
    assert src.resolve_commit(second.upper()) == second
    assert src.resolve_commit(second[:12]) == second


def test_unknown_and_non_commit_objects_are_not_found(repo):
    path, first, _ = repo
    src = RepoSource("acme/agent", str(path))
    with pytest.raises(CommitNotFound, match="is not a commit in acme/agent"):
        src.resolve_commit("0" * 40)
    tree = git(path, "rev-parse", f"{first}^{{tree}}")
    with pytest.raises(CommitNotFound):
        src.resolve_commit(tree)
    with pytest.raises(CommitNotFound, match="no commit in acme/agent starts with"):
        src.resolve_commit(tree[:10] if not first.startswith(tree[:10]) else "0000000")


def _colliding_commits(tree: str) -> tuple[bytes, bytes, str]:
    """Two commit objects (same tree, different messages) whose SHAs share 7 hex characters."""
    seen: dict[str, bytes] = {}
    n = 0
    while True:
        body = (
            f"tree {tree}\nauthor t <t@example.invalid> 0 +0000\ncommitter t <t@example.invalid> 0 +0000\n\nm{n}\n"
        ).encode()
        sha = hashlib.sha1(b"commit %d\0" % len(body) + body).hexdigest()
        if sha[:7] in seen:
            return seen[sha[:7]], body, sha[:7]
        seen[sha[:7]] = body
        n += 1


def test_an_ambiguous_short_sha_is_an_error(repo):
    path, first, _ = repo
    tree = git(path, "rev-parse", f"{first}^{{tree}}")
    a, b, prefix = _colliding_commits(tree)
    shas = []
    for body in (a, b):
        shas.append(
            subprocess.run(
                ["git", "hash-object", "-t", "commit", "-w", "--stdin"],
                cwd=path,
                input=body,
                capture_output=True,
                check=True,
            )
            .stdout.decode()
            .strip()
        )
    assert shas[0][:7] == shas[1][:7] == prefix
    src = RepoSource("acme/agent", str(path))
    with pytest.raises(AmbiguousCommit, match=f"short SHA '{prefix}' is ambiguous in acme/agent: matches "):
        src.resolve_commit(prefix)
    assert src.resolve_commit(shas[0][:12]) == shas[0] or shas[0][:12] == shas[1][:12]


def test_resolve_ref_turns_branches_and_tags_into_shas(repo):
    path, first, second = repo
    src = RepoSource("acme/agent", str(path))
    assert src.resolve_ref("feature") == first
    assert src.resolve_ref("v1") == first
    assert src.resolve_ref("main") == second
    assert src.resolve_ref("HEAD~1") == first
    assert src.resolve_ref(first[:8]) == first
    for bad in ("nope", "--output=/tmp/x", ""):
        with pytest.raises(RefNotFound):
            src.resolve_ref(bad)


def test_an_export_has_the_files_and_no_git(repo, tmp_path):
    path, first, second = repo
    src = RepoSource("acme/agent", str(path))
    export = src.export(first[:9], tmp_path / "exp")
    root = Path(export.path)
    assert export.commit == first and export.repo == "acme/agent"
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) == [
        ".evals/list",
        "agent.yaml",
        "skills/triage/SKILL.md",
    ]
    assert not (root / ".git").exists()
    assert os.access(root / ".evals/list", os.X_OK)
    assert (root / "skills/triage/SKILL.md").read_text() == "be kind\n"
    assert export.tree_digest == tree_digest(root)
    other = src.export(second, tmp_path / "exp2")
    assert other.tree_digest != export.tree_digest


def test_the_same_commit_exports_to_the_same_digest(repo, tmp_path):
    path, first, _ = repo
    src = RepoSource("acme/agent", str(path))
    assert src.export(first, tmp_path / "a").tree_digest == src.export(first, tmp_path / "b").tree_digest


def test_exporting_into_a_non_empty_directory_is_refused(repo, tmp_path):
    path, first, _ = repo
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    with pytest.raises(RepoError, match="is not empty"):
        RepoSource("acme/agent", str(path)).export(first, tmp_path / "busy")


def test_a_symlink_leaving_the_export_is_refused(tmp_path):
    path = tmp_path / "evil"
    commit_files(path, {"a": "a"})
    os.symlink("/etc/passwd", path / "passwd")
    sha = commit_files(path, {})
    with pytest.raises(RepoError, match="cannot be exported safely"):
        RepoSource("acme/agent", str(path)).export(sha, tmp_path / "out")


def test_changed_files_between_commits(repo):
    path, first, second = repo
    src = RepoSource("acme/agent", str(path))
    assert src.changed_files(first, second) == ["new.txt", "skills/triage/SKILL.md"]
    assert src.changed_files(second, second) == []


def test_a_remote_is_mirrored_once_then_updated(repo, tmp_path):
    path, first, second = repo
    cache = tmp_path / "cache"
    url = f"file://{path}"
    src = RepoSource("acme/agent", url, cache_dir=str(cache))
    assert src.ensure_mirror() is True
    mirrors = list(cache.iterdir())
    assert len(mirrors) == 1 and mirrors[0].name.endswith(".git")
    assert src.ensure_mirror() is False
    assert RepoSource("acme/agent", url, cache_dir=str(cache)).ensure_mirror() is False
    assert list(cache.iterdir()) == mirrors
    export = src.export(first[:7], tmp_path / "exp")
    assert not (Path(export.path) / ".git").exists()
    third = commit_files(path, {"later.txt": "l"})
    with pytest.raises(CommitNotFound):
        src.resolve_commit(third)
    src.update()
    assert src.resolve_commit(third[:10]) == third
    assert src.resolve_ref("main") == third


def test_a_remote_without_a_cache_dir_is_refused():
    with pytest.raises(RepoError, match="needs a cache_dir"):
        RepoSource("acme/agent", "https://example.invalid/acme/agent.git")


def test_a_path_that_is_not_a_repository_is_refused(tmp_path):
    with pytest.raises(RepoError, match="is not a git repository"):
        RepoSource("acme/agent", str(tmp_path))
