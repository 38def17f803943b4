"""Shared fixtures: throwaway git repositories, the Kubernetes API stand-in and the bubblewrap backend."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.git_repos import commit_files


@pytest.fixture
def make_repo(tmp_path: Path) -> Callable[..., tuple[Path, str]]:
    """``make_repo(files, executable=(...))`` → (repo path, commit SHA)."""
    counter = iter(range(1000))

    def make(files: dict[str, str | bytes], executable: tuple[str, ...] = ()) -> tuple[Path, str]:
        repo = tmp_path / f"repo{next(counter)}"
        return repo, commit_files(repo, files, executable=executable)

    return make


@pytest.fixture
def standin():
    """A stand-in Kubernetes API on loopback (tests/helpers/k8s_standin.py), stopped after the test."""
    from tests.helpers.k8s_standin import KubernetesStandIn

    s = KubernetesStandIn()
    s.start()
    yield s
    s.stop()


STANDIN_IMAGE = "registry.example/evalrunner-sandbox@sha256:" + "1" * 64


@pytest.fixture
def standin_backend(standin, tmp_path):
    """A Kubernetes backend on the stand-in API (sandbox image ``STANDIN_IMAGE``, fast polling)."""
    from evalrunner_assets.execution.kubernetes import KubernetesBackend, KubernetesSandboxConfig

    kubeconfig = standin.write_kubeconfig(tmp_path / "kubeconfig")
    return KubernetesBackend(
        KubernetesSandboxConfig(image=STANDIN_IMAGE, kubeconfig=str(kubeconfig), poll_interval_seconds=0.05)
    )


@pytest.fixture(scope="session")
def bwrap_backend():
    """The bubblewrap backend, preflighted once. Fails (not skips) when it cannot run:
    CI installs bubblewrap, and a silently skipped containment test proves nothing."""
    from evalrunner_assets.execution.bubblewrap import BubblewrapBackend

    backend = BubblewrapBackend()
    backend.preflight()
    return backend


# -- every PR comment a test writes is valid GitHub Markdown --------------------------------------
@pytest.fixture(scope="session", autouse=True)
def _written_comments():
    """Every ``*.comment.md`` written to a lake in this process during the session (in-process
    writers; ``_comments_are_valid_gfm`` also finds those that subprocesses wrote under the
    session's temporary directory)."""
    from lake.storage import Lake

    written: list[tuple[str, bytes]] = []
    original = Lake.write_bytes

    def recording(self, rel, data):
        url = original(self, rel, data)
        if rel.endswith(".comment.md"):
            written.append((url, bytes(data)))
        return url

    Lake.write_bytes = recording
    try:
        yield {"written": written, "checked": {}}
    finally:
        Lake.write_bytes = original


@pytest.fixture(autouse=True)
def _comments_are_valid_gfm(_written_comments, tmp_path_factory):
    """Fails the test during which (or during whose fixtures) a PR comment with a malformed GFM
    table was written, as markdown-it-py (tables enabled) reads it."""
    yield
    from tests.reliability._gfm import table_problems

    written, checked = _written_comments["written"], _written_comments["checked"]
    new = list(written)
    written.clear()
    for dirpath, _, files in os.walk(tmp_path_factory.getbasetemp()):
        for name in files:
            if name.endswith(".comment.md"):
                path = os.path.join(dirpath, name)
                try:
                    stamp = os.stat(path).st_mtime_ns
                    if checked.get(path) != stamp:
                        checked[path] = stamp
                        new.append((path, Path(path).read_bytes()))
                except OSError:
                    pass
    problems = [f"{where}: {p}" for where, data in new for p in table_problems(data.decode("utf-8"))]
    assert not problems, "PR comment is not valid GitHub Markdown:\n" + "\n".join(problems)
