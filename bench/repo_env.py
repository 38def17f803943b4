"""Repository environments: what building one costs, and that reuse installs nothing.

On the quiz-agent example (``examples/quiz-agent``: a uv.lock with one dependency, the project
installed editable), served by a package index on loopback:

1. baseline: the same install with uv directly on the host (no sandbox, no stubs, no channel);
2. candidate: ``EnvironmentStore.ensure`` on a fresh store (venv, stubs, sandboxed install
   through the channel, check, atomic rename), and the ratio;
3. ``ensure`` again on the same digest (a lookup);
4. two ``evalrunner compare`` runs of different PRs on the same lock: wall time, requests the
   index served during each and environments built (the second must be 0 and 0).

    .venv/bin/python -m bench repo_env [--quick]

``--quick`` runs 1–3 only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parent.parent

if TYPE_CHECKING:
    from tests.helpers.package_index_standin import PackageIndex


def _host_install(index_url: str, src: Path, work: Path) -> float:
    uv = shutil.which("uv", path=os.path.join(sys.prefix, "bin"))
    if uv is None:
        raise SystemExit(f"bench repo_env: no uv in {sys.prefix}/bin (it is a dev dependency)")
    env = {**os.environ, "UV_CACHE_DIR": str(work / "uv-cache"), "UV_NO_PROGRESS": "1"}
    copy = work / "src"
    shutil.copytree(src, copy)
    started = time.monotonic()
    venv = work / "venv"
    subprocess.run([uv, "venv", "-q", "--no-config", "--python", sys.executable, str(venv)], check=True, env=env)
    req = work / "req.txt"
    subprocess.run(
        [
            uv,
            "export",
            "-q",
            "--no-config",
            "--frozen",
            "--no-dev",
            "--no-hashes",
            "--no-emit-project",
            "--no-emit-package",
            "inspect-ai",
            "--directory",
            str(copy),
            "-o",
            str(req),
        ],
        check=True,
        env=env,
    )
    subprocess.run(
        [
            uv,
            "pip",
            "install",
            "-q",
            "--no-config",
            "--python",
            str(venv / "bin" / "python"),
            "--index-url",
            index_url,
            "--no-deps",
            "-r",
            str(req),
            "-e",
            str(copy),
        ],
        check=True,
        env=env,
    )
    return time.monotonic() - started


def main(flags: list[str]) -> None:
    # --quick: the build, its ratio and the reuse; not the two comparisons (minutes of Inspect).
    quick = "--quick" in flags
    from evalrunner_assets.execution.bubblewrap import BubblewrapBackend
    from evalrunner_assets.execution.environment import EnvironmentStore, detect_environment
    from evalrunner_assets.execution.sandbox import RepoExport
    from tests.helpers.package_index_standin import PackageIndex, wheel_from_installed, wheel_from_source

    example = ROOT / "examples" / "quiz-agent"
    with tempfile.TemporaryDirectory(prefix="bench-env-") as tmp_s:
        tmp = Path(tmp_s)
        index = PackageIndex(tmp / "index")
        (tmp / "wheels").mkdir()
        index.add(wheel_from_source(ROOT / "examples" / "wheels-src" / "quizkit", tmp / "wheels"))
        index.add(wheel_from_installed("setuptools", tmp / "wheels"))
        backend = BubblewrapBackend()
        backend.preflight()
        try:
            (tmp / "host").mkdir()
            host_s = _host_install(index.url, example, tmp / "host")
            export = RepoExport("bench/quiz", "0" * 40, str(example), "")
            spec = detect_environment(example)
            if spec is None:
                raise SystemExit(f"bench repo_env: {example} declares no environment")
            store = EnvironmentStore(tmp / "envs", index=index.url)
            started = time.monotonic()
            store.ensure(backend, export, spec)
            build_s = time.monotonic() - started
            started = time.monotonic()
            again = store.ensure(backend, export, spec)
            reuse_s = time.monotonic() - started
            print("environment build (uv.lock, 1 dependency + the project, editable)")
            print(f"  baseline  uv on the host, no sandbox : {host_s:7.2f} s")
            print(f"  candidate sandboxed build            : {build_s:7.2f} s   ratio {build_s / host_s:5.2f}x")
            print(f"  same digest again (reused={again.reused})  : {reuse_s * 1000:7.1f} ms")

            if not quick:
                _two_comparisons(tmp, example, index)
        finally:
            index.close()


def _two_comparisons(tmp: Path, example: Path, index: PackageIndex) -> None:
    """Two ``evalrunner compare`` runs of different PRs on the same lock: the second builds
    nothing and asks the index for nothing."""
    from tests.helpers.git_repos import commit_files, git

    repo = tmp / "repo"
    rows = [json.loads(x) for x in (example / "evals/data/capitals.jsonl").read_text().splitlines() if x]
    files: dict[str, str | bytes] = {
        str(p.relative_to(example)): p.read_text()
        for p in example.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    # Until datasets without ids pair by Inspect's positional ids, ids are given here.
    files["evals/data/capitals.jsonl"] = "".join(json.dumps({"id": f"q{i}", **r}) + "\n" for i, r in enumerate(rows))
    commit_files(repo, files, "quiz")
    for branch, prompt in (
        ("precise", "Answer with only the name of the capital city.\n"),
        ("wording", "You are a helpful assistant. Answer the question!\n"),
    ):
        git(repo, "checkout", "-q", "main")
        git(repo, "checkout", "-q", "-b", branch)
        commit_files(repo, {"evals/prompts/system.md": prompt}, branch)
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "EVALRUNNER_LAKE", "EVALRUNNER_ENVS")}
    env.update(EVALRUNNER_HOME=str(tmp / "home"), EVALRUNNER_PACKAGE_INDEX=index.url)
    print("two comparisons on the same lock digest")
    for pr, branch in (("1", "precise"), ("2", "wording")):
        index.requests.clear()
        started = time.monotonic()
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "evalrunner_assets.cli",
                "compare",
                "--repo",
                str(repo),
                "--repo-id",
                "bench/quiz",
                "--base",
                "main",
                "--head",
                branch,
                "--pr",
                pr,
                "--model",
                "quizbot/v1",
                "--cap",
                "40",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        wall = time.monotonic() - started
        if run.returncode != 0:
            print(run.stdout[-2000:], run.stderr[-2000:])
            raise SystemExit(f"compare failed (exit {run.returncode})")
        lake = tmp / "home" / "lake" / "raw" / "bench" / "quiz"
        built = sum(1 for f in lake.glob("*/tasks.json") if json.loads(f.read_text())["environment"]["reused"] is False)
        print(
            f"  PR {pr} ({branch:8s}): {wall:6.1f} s wall, {len(index.requests):3d} index requests, "
            f"environments built so far {built}"
        )
