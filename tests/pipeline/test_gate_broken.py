"""The gate fails what is broken, end to end through `evalrunner compare` (real git, real
bubblewrap sandboxes, real Inspect, the real lake; a repository of deterministic tasks that
call no model, so nothing here is simulated):

- a head whose solver raises on every sample, a head whose task file has a syntax error, and a
  head whose manifest names a file that does not exist are BROKEN: check run ``failure`` titled
  with the task, the exception type, where it was raised and how many samples; exit 4;
- a task broken on both arms is INCONCLUSIVE with an ``action_required`` check, exit 0;
- a task the PR adds is run on head alone and reported with its score and interval (a new eval
  that raises is BROKEN too); a task the PR removes is listed as removed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.compare_runs import lake, run_compare
from tests.helpers.gate_tasks import RAISES, SOLVE, TASKS
from tests.helpers.git_repos import commit_files, git

pytestmark = pytest.mark.slow

EXIT_BLOCKED = 4


MANIFEST = '#!/bin/sh\necho \'{"version": 1, "tasks": [{"id": "qa/kept", "spec": "%s", "workdir": "."}]}\'\n'


def _repo(tmp_path: Path, base: dict[str, str], head: dict[str, str], executable: tuple[str, ...] = ()) -> Path:
    repo = tmp_path / "repo"
    commit_files(repo, base, "base", executable=executable)
    git(repo, "checkout", "-q", "-b", "head")
    commit_files(repo, head, "head", executable=executable)
    return repo


def _compare(tmp_path: Path, repo: Path, *extra: str) -> tuple[Path, object]:
    home = tmp_path / "home"
    home.mkdir()
    return home, run_compare(home, repo, "--head", "head", *extra, timeout=600)


def _artifacts(home: Path) -> tuple[dict, dict, str]:
    root = lake(home) / "comparisons"
    doc = next(p for p in root.rglob("*.json") if p.name.count(".") == 1)
    check = json.loads(next(root.rglob("*.check_run.json")).read_text())
    comment = next(root.rglob("*.comment.md")).read_text()
    return json.loads(doc.read_text()), check, comment


def test_a_head_whose_solver_raises_on_every_sample_is_broken_and_blocks(tmp_path: Path) -> None:
    repo = _repo(tmp_path, {"evals/qa.py": TASKS}, {"evals/qa.py": TASKS.replace(SOLVE, RAISES)})
    home, done = _compare(tmp_path, repo)
    assert done.returncode == EXIT_BLOCKED, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    doc, check, comment = _artifacts(home)
    task = "evals/qa/kept"
    assert doc["verdict"] == "BROKEN" and doc["final_verdict"]["broken"] == [task]
    decision = doc["tasks"][task]["decision"]
    assert decision["label"] == "broken" and decision["broken_arms"] == ["head"]
    cause = "16/16 samples raised RuntimeError('boom') in solver 'answer'"
    assert check["conclusion"] == "failure"
    assert check["title"].startswith(f"broken by this PR: {task} — {cause}"), check["title"]
    assert "## ⛔ evalrunner: BROKEN" in comment and f"broken by this PR: head: {cause}" in comment
    assert "BROKEN:" in done.stdout and cause in done.stdout
    # Not infrastructure: nothing was recorded as a failure.
    assert not (lake(home) / "failures").exists()


def test_a_head_with_a_syntax_error_in_its_task_file_is_broken_naming_the_file_and_line(tmp_path: Path) -> None:
    broken = TASKS.replace("def kept():", "def kept(:")
    repo = _repo(tmp_path, {"evals/qa.py": TASKS}, {"evals/qa.py": broken})
    home, done = _compare(tmp_path, repo)
    assert done.returncode == EXIT_BLOCKED, (done.stdout[-2000:], done.stderr[-2000:])
    doc, check, comment = _artifacts(home)
    task = "evals/qa/kept"
    assert doc["verdict"] == "BROKEN", doc["final_verdict"]
    load_error = doc["tasks"][task]["load_errors"]["head"]
    assert "SyntaxError" in load_error and "qa.py" in load_error, load_error
    assert not doc["tasks"][task]["failures"]  # the repository's code, not the infrastructure's
    assert check["conclusion"] == "failure" and "SyntaxError" in check["title"] and task in check["title"]
    assert "cannot be loaded" in comment and "SyntaxError" in comment
    assert doc["samples_run"] == 0  # nothing ran on either arm: the task stops where it cannot load


def test_a_head_whose_manifest_names_a_missing_file_is_broken(tmp_path: Path) -> None:
    base = {"evals/qa.py": TASKS, ".evals/list": MANIFEST % "evals/qa.py@kept"}
    head = {".evals/list": MANIFEST % "evals/missing.py@kept"}
    repo = _repo(tmp_path, base, head, executable=(".evals/list",))
    home, done = _compare(tmp_path, repo)
    assert done.returncode == EXIT_BLOCKED, (done.stdout[-2000:], done.stderr[-2000:])
    doc, check, _ = _artifacts(home)
    assert doc["verdict"] == "BROKEN", doc["final_verdict"]
    assert "missing.py" in doc["tasks"]["qa/kept"]["load_errors"]["head"]
    assert check["conclusion"] == "failure" and "qa/kept" in check["title"]


def test_a_task_broken_on_both_arms_is_inconclusive_and_asks_for_action(tmp_path: Path) -> None:
    raising = TASKS.replace(SOLVE, RAISES)
    repo = _repo(tmp_path, {"evals/qa.py": raising}, {"evals/qa.py": raising + "\n# touched\n"})
    home, done = _compare(tmp_path, repo)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    doc, check, _ = _artifacts(home)
    task = "evals/qa/kept"
    assert doc["verdict"] == "INCONCLUSIVE" and doc["final_verdict"]["broken_on_both"] == [task]
    assert doc["tasks"][task]["decision"]["reason"].startswith("broken on both head and base: head: 16/16 samples")
    assert check["conclusion"] == "action_required"
    assert task in check["title"] and "broken on both" in check["title"]


def test_a_new_eval_is_measured_on_head_alone_and_a_removed_one_listed(tmp_path: Path) -> None:
    base = TASKS + "\n@task\ndef old():\n    return _task()\n"
    head = TASKS + "\n@task\ndef probe():\n    return _task(24)\n"
    repo = _repo(tmp_path, {"evals/qa.py": base}, {"evals/qa.py": head})
    home, done = _compare(tmp_path, repo)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    doc, check, comment = _artifacts(home)
    assert doc["new_tasks"] == ["evals/qa/probe"] and doc["removed_tasks"] == ["evals/qa/old"]
    assert list(doc["tasks"]) == ["evals/qa/kept"]  # never paired
    probe = doc["new_task_results"]["evals/qa/probe"]
    # 24 inputs, every fourth answered wrong: 18/24 right; all run (the dataset is under the cap).
    assert probe["status"] == "measured" and probe["inputs"] == 24 and probe["head"]["samples"] == 24
    assert probe["mean"] == pytest.approx(0.75)
    lo, hi = probe["interval"]
    assert 0.0 < lo < 0.75 < hi <= 1.0
    assert doc["verdict"] in ("UNCHANGED", "INCONCLUSIVE"), doc["final_verdict"]  # qa/kept alone decides
    line = f"new: evals/qa/probe 0.75 ({lo:.2f}, {hi:.2f}), 24 samples"
    assert f"  {line}\n" in done.stdout
    assert f"`evals/qa/probe`: 0.75 ({lo:.2f}, {hi:.2f}), 24 samples" in comment
    assert "**Removed on this PR:** `evals/qa/old`" in comment
    assert check["conclusion"] in ("success", "neutral")
    assert doc["samples_possible"] == 2 * 16 + 24


def test_a_new_eval_that_raises_is_broken(tmp_path: Path) -> None:
    head = TASKS + "\n@task\ndef probe():\n    return _task(solver=answer_raising())\n"
    repo = _repo(tmp_path, {"evals/qa.py": TASKS}, {"evals/qa.py": head})
    home, done = _compare(tmp_path, repo)
    assert done.returncode == EXIT_BLOCKED, (done.stdout[-2000:], done.stderr[-2000:])
    doc, check, _ = _artifacts(home)
    probe = doc["new_task_results"]["evals/qa/probe"]
    assert probe["status"] == "broken" and probe["errored"] == 16
    assert doc["verdict"] == "BROKEN" and doc["final_verdict"]["broken"] == ["evals/qa/probe"]
    assert check["conclusion"] == "failure" and "evals/qa/probe" in check["title"]
    assert "RuntimeError('boom')" in check["title"]
