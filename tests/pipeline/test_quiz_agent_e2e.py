"""The second example repository end to end: its own lock, dependency and model provider, a
dataset without ids, and a model-graded task whose grader is reached through the model gateway
(the upstream is a stand-in OpenAI server on loopback; the key stays on the host).

``examples/quiz-agent`` is made into a git repository (base: vague instructions; head: precise
ones), its dependency ``quizkit`` and the setuptools its project build needs are served by a
package index on loopback, and ``evalrunner compare`` runs in bubblewrap. The environment is
built once for the lock's digest: a second comparison of other commits with the same lock asks
the index for nothing and records the environment as reused.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.git_repos import commit_files, git
from tests.helpers.openai_standin import OpenAIStandIn
from tests.helpers.package_index_standin import PackageIndex, wheel_from_installed, wheel_from_source

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
KEY = "sk-standin-quiz-grader-key-3b9e"
PRECISE = "Answer with only the name of the capital city. Double-check which country is asked about.\n"


def _example_files() -> dict[str, str]:
    """The example as it is: its dataset has no sample ids (Inspect numbers them 1..n)."""
    root = EXAMPLES / "quiz-agent"
    return {
        str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    }


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("index")
    wheels = tmp_path_factory.mktemp("wheels")
    idx = PackageIndex(root)
    idx.add(wheel_from_source(EXAMPLES / "wheels-src" / "quizkit", wheels))
    idx.add(wheel_from_installed("setuptools", wheels))
    yield idx
    idx.close()


def _compare(
    home: Path, repo: Path, index: PackageIndex, base: str, head: str, pr: str, grader: OpenAIStandIn | None = None
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "EVALRUNNER_LAKE", "EVALRUNNER_ENVS")}
    env.update(EVALRUNNER_HOME=str(home), EVALRUNNER_PACKAGE_INDEX=index.url)
    extra: list[str] = []
    if grader is not None:
        env.update(OPENAI_API_KEY=KEY, OPENAI_BASE_URL=grader.openai_base)
        extra = ["--model-gateway"]
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "evalrunner_assets.cli",
            "compare",
            "--repo",
            str(repo),
            "--repo-id",
            "acme/quiz",
            "--base",
            base,
            "--head",
            head,
            "--pr",
            pr,
            "--model",
            "quizbot/v1",
            "--cap",
            "40",
            *extra,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _facts(home: Path, sha: str) -> dict:
    return json.loads((home / "lake" / "raw" / "acme" / "quiz" / sha / "tasks.json").read_text())


def test_quiz_agent_compares_with_its_own_dependencies_and_provider_and_reuses_the_environment(index, tmp_path):
    repo = tmp_path / "quiz"
    base = commit_files(repo, _example_files(), "quiz agent")
    git(repo, "checkout", "-q", "-b", "precise")
    head = commit_files(repo, {"evals/prompts/system.md": PRECISE}, "precise instructions")
    home = tmp_path / "home"

    with OpenAIStandIn() as grader:
        first = _compare(home, repo, index, "main", "precise", "1", grader=grader)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    doc = json.loads((home / "lake" / "comparisons" / "acme" / "quiz" / "1" / f"{head}.json").read_text())
    labels = {t.rsplit("/", 1)[-1]: d["decision"]["label"] for t, d in doc["tasks"].items()}
    assert labels["capitals"] == "improved"
    # The grader (a stand-in that always answers GRADE: C) ties every pair: 40 samples are too
    # few to establish "unchanged" within ±0.05, so that task may end inconclusive, and with it
    # the run verdict; never a change.
    assert labels["capitals_graded"] in ("unchanged", "inconclusive")
    assert doc["verdict"] in ("IMPROVED", "INCONCLUSIVE")
    assert "capitals" in first.stdout and "improved" in first.stdout
    # The graded task ran on both arms with the grader model answering through the gateway.
    graded = next(t for t in doc["tasks"] if t.endswith("capitals_graded"))
    assert doc["tasks"][graded]["decision"]["pairs"] == 40
    assert doc["tasks"][graded]["decision"]["head_mean"] == 1.0
    assert "openai/gpt-4o-mini" in doc["execution"]["gateway"]["models"]
    for path in (home / "lake").rglob("*"):
        assert not path.is_file() or KEY.encode() not in path.read_bytes(), path
    assert KEY not in first.stdout + first.stderr

    envs = [p for p in (home / "envs").iterdir() if not p.name.startswith(".")]
    assert len(envs) == 1  # one lock, one environment for both commits
    record = json.loads((home / "lake" / "envs" / envs[0].name / "environment.json").read_text())
    assert record["kind"] == "uv.lock" and "quizkit==0.1.0" in record["packages"]
    assert "quiz-agent==0.1.0" in record["packages"]
    assert any(r.startswith("/files/quizkit-") for r in index.requests)
    for sha in (base, head):
        facts = _facts(home, sha)
        assert facts["environment"]["digest"] == envs[0].name
        assert all(t["env_digest"] == envs[0].name for t in facts["tasks"].values())
    assert [_facts(home, sha)["environment"]["reused"] for sha in (base, head)].count(False) == 1

    # A second PR on the same lock: new commits, no install, nothing asked of the index.
    git(repo, "checkout", "-q", "main")
    git(repo, "checkout", "-q", "-b", "wording")
    other = commit_files(
        repo, {"evals/prompts/system.md": "You are a helpful assistant. Answer the question!\n"}, "wording"
    )
    index.requests.clear()
    with OpenAIStandIn() as grader:
        second = _compare(home, repo, index, "main", "wording", "2", grader=grader)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert index.requests == []
    assert _facts(home, other)["environment"]["reused"] is True
    assert [p.name for p in (home / "envs").iterdir() if not p.name.startswith(".")] == [envs[0].name]


def test_a_dependency_missing_from_the_index_fails_discovery_with_one_clear_line(index, tmp_path):
    files = _example_files()
    files["uv.lock"] = files["uv.lock"].replace(
        'name = "quizkit"\nversion = "0.1.0"', 'name = "quizkit"\nversion = "9.9.9"'
    )
    files["pyproject.toml"] = files["pyproject.toml"].replace("quizkit==0.1.0", "quizkit==9.9.9")
    files["uv.lock"] = files["uv.lock"].replace('specifier = "==0.1.0"', 'specifier = "==9.9.9"')
    repo = tmp_path / "quiz"
    commit_files(repo, files, "quiz agent")
    git(repo, "checkout", "-q", "-b", "head")
    commit_files(repo, {"evals/prompts/system.md": PRECISE}, "precise")
    home = tmp_path / "home"
    run = _compare(home, repo, index, "main", "head", "1")
    assert run.returncode != 0
    out = run.stdout + run.stderr
    assert "uv.lock: no version of `quizkit" in out
    assert not [p for p in (home / "envs").iterdir() if not p.name.endswith(".lock")]  # nothing half-built
    shutil.rmtree(home, ignore_errors=True)
