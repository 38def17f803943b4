"""`evalrunner compare` as a merge gate for any CI runner: exit 0 on IMPROVED, UNCHANGED and
INCONCLUSIVE, exit 4 on a verdict `--fail-on` names (default: regressed, broken). Real
comparisons in a subprocess, on a repository whose one task scores every sample by a file the
head may change: a wrong answer regresses at the first look that can settle (16 pairs), an
unchanged one is inconclusive once its 16 inputs are spent."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from evalrunner_assets.cli import FAIL_ON_VERDICTS, blocks_merge
from evalrunner_assets.cli.options import fail_on as _fail_on
from tests.helpers.evalrunner_cli import EVALRUNNER, TIMEOUT, cli_env
from tests.helpers.git_repos import commit_files, git

LIST = (
    "#!/bin/sh\n"
    'echo \'{"version": 1, "tasks": [{"id": "answers/yes", "spec": "evals/answers.py@answers", "workdir": "."}]}\'\n'
)
TASK = """\
from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput
from inspect_ai.scorer import includes
from inspect_ai.solver import Generate, TaskState, solver

ANSWER = (Path(__file__).parent / "answer.txt").read_text().strip()


@solver
def answer_from_file():
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        state.output = ModelOutput.from_content(model="none", content=ANSWER)
        state.completed = True
        return state

    return solve


@task
def answers():
    samples = [Sample(id=f"q{i:02d}", input=f"question {i}", target="yes") for i in range(16)]
    return Task(dataset=samples, solver=answer_from_file(), scorer=includes())
"""


@pytest.fixture(scope="module")
def answers_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`main` answers right; `wrong` answers wrong; `same` changes only the README."""
    repo = tmp_path_factory.mktemp("fail-on") / "answers"
    files = {".evals/list": LIST, "evals/answers.py": TASK, "evals/answer.txt": "yes\n", "README.md": "x\n"}
    commit_files(repo, files, executable=(".evals/list",))
    for branch, changed in (("wrong", {"evals/answer.txt": "no\n"}), ("same", {"README.md": "y\n"})):
        git(repo, "checkout", "-q", "-b", branch, "main")
        commit_files(repo, changed, message=branch)
    git(repo, "checkout", "-q", "main")
    return repo


def _compare(repo: Path, home: Path, base: str, head: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [EVALRUNNER, "compare", "--repo", str(repo), "--base", base, "--head", head, *extra],
        env=cli_env(home),
        cwd=home.parent,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def _verdict(home: Path, repo: Path, head: str) -> str:
    sha = git(repo, "rev-parse", head)
    (doc,) = (home / "lake" / "comparisons").rglob(f"{sha}.json")
    return json.loads(doc.read_text())["verdict"]


def _exit(done: subprocess.CompletedProcess) -> int:
    assert "Traceback" not in done.stderr and "unexpected" not in done.stderr, done.stderr[-3000:]
    return done.returncode


@pytest.mark.slow
def test_compare_exits_4_on_a_verdict_fail_on_names_and_0_on_the_others(answers_repo: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    repo = answers_repo

    regressed = _compare(repo, home, "main", "wrong")
    assert _exit(regressed) == 4, regressed.stdout[-3000:] + regressed.stderr[-3000:]
    assert _verdict(home, repo, "wrong") == "REGRESSED"
    assert "REGRESSED" in regressed.stdout  # the summary is printed before the exit code
    last = regressed.stderr.strip().splitlines()[-1]
    assert last == "evalrunner compare: REGRESSED blocks the merge (--fail-on regressed,broken): exit code 4", last

    # Another --fail-on is no other measurement: the same comparison resumes (nothing re-run), only
    # its exit code follows the option.
    for fail_on, code in (("never", 0), ("inconclusive,Broken", 0)):
        again = _compare(repo, home, "main", "wrong", "--fail-on", fail_on)
        assert _exit(again) == code, (fail_on, again.stderr[-3000:])
        assert " ran " not in again.stdout, again.stdout  # decided from the lake alone
        assert "REGRESSED" in again.stdout

    inconclusive = _compare(repo, home, "main", "same")
    assert _exit(inconclusive) == 0, inconclusive.stderr[-3000:]
    assert _verdict(home, repo, "same") == "INCONCLUSIVE"
    blocked = _compare(repo, home, "main", "same", "--fail-on", "inconclusive")
    assert _exit(blocked) == 4, blocked.stderr[-3000:]
    assert "INCONCLUSIVE blocks the merge (--fail-on inconclusive)" in blocked.stderr

    # The other way round the same windows improve: no --fail-on blocks an improvement.
    improved = _compare(repo, home, "wrong", "main", "--fail-on", "regressed,broken,inconclusive")
    assert _exit(improved) == 0, improved.stderr[-3000:]
    assert _verdict(home, repo, "main") == "IMPROVED"


@pytest.mark.parametrize(
    ("verdict", "fail_on", "blocks"),
    [
        ("REGRESSED", "regressed,broken", True),
        ("BROKEN", "regressed,broken", True),  # a task the PR broke
        ("INCONCLUSIVE", "regressed,broken", False),
        ("INCONCLUSIVE", "inconclusive", True),
        ("RUNNING", "inconclusive", True),  # ended before a decision: undecided
        ("IMPROVED", "regressed,broken,inconclusive", False),
        ("UNCHANGED", "regressed,broken,inconclusive", False),
        ("REGRESSED", "never", False),
        ("BROKEN", "regressed", False),
    ],
)
def test_which_verdicts_block_a_merge(verdict: str, fail_on: str, blocks: bool) -> None:
    assert blocks_merge(verdict, _fail_on(fail_on)) is blocks


def test_fail_on_accepts_each_verdict_and_never() -> None:
    assert _fail_on("never") == frozenset()
    for name in FAIL_ON_VERDICTS:
        assert _fail_on(name) == {name}
    assert _fail_on(" Regressed ,inconclusive") == {"regressed", "inconclusive"}


def test_demo_gates_only_when_asked() -> None:
    from evalrunner_assets.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["demo"]).fail_on == frozenset()
    assert parser.parse_args(["demo", "--fail-on", "regressed"]).fail_on == {"regressed"}
    assert parser.parse_args(["compare", "--repo", ".", "--base", "a", "--head", "b"]).fail_on == {
        "regressed",
        "broken",
    }
