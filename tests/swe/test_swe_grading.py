"""SWE-style grading, cheat policy, gold flake logic and the bubblewrap Inspect provider, with
real bubblewrap sandboxes and real pytest runs over the bundled tinystats repository."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from evalrunner_assets.execution.repo import RepoSource, export_commit
from evalrunner_assets.execution.workspace_pool import WorkspacePool, WorkspaceQueueTimeout
from evalrunner_assets.swe import SweStore
from evalrunner_assets.swe.example import EXAMPLE_TASK_SET, build_tinystats_repo
from evalrunner_assets.swe.flakes import classify_task
from evalrunner_assets.swe.grading import Grade, grade_patch, judge, unified_chunk, workspace_patch
from evalrunner_assets.swe.model import SweError
from evalrunner_assets.swe.policy import check_patch, check_trajectory
from evalrunner_assets.swe.runner import SweContext, register_task_set
from lake import open_lake


@pytest.fixture(scope="module")
def example(tmp_path_factory, bwrap_backend):
    root = tmp_path_factory.mktemp("swe")
    build_tinystats_repo(root / "repo")
    ctx = SweContext(
        SweStore(open_lake(str(root / "lake"))), bwrap_backend, WorkspacePool(root / "ws"), root / "exports"
    )
    ts, _ = register_task_set(ctx, EXAMPLE_TASK_SET, str(root / "repo"))
    export = export_commit(RepoSource(ts.repo, ts.repo_source), ts.tasks[0].commit, root / "exports")
    return ctx, ts, export


def _grade(example, task_id: str, patch: str, dropped=()) -> Grade:
    ctx, ts, export = example
    task = ts.task(task_id)
    return grade_patch(
        ctx.backend, ctx.pool, export, task, patch, ctx.store.hidden_files(task.hidden_tests_ref), dropped
    )


def _gold(example, task_id: str) -> str:
    ctx, ts, _ = example
    return ctx.store.blob(ts.task(task_id).gold_patch_ref).decode()


def test_gold_patch_passes_and_the_unpatched_checkout_fails(example):
    gold = _grade(example, "mean-divisor", _gold(example, "mean-divisor"))
    assert gold.status == "passed", gold.reason
    assert gold.exit_code == 0
    assert gold.results["tests.hidden.test_mean_divisor::test_mean_of_three"] == "passed"
    empty = _grade(example, "mean-divisor", "")
    assert empty.status == "failed"
    assert "fail-to-pass test tests.hidden.test_mean_divisor::test_mean_of_three failed" in empty.reason


def test_printing_passed_cannot_pass(example):
    # The patch makes the module print pytest's success line; the tests still fail.
    patch = (
        "--- a/tinystats/mean.py\n+++ b/tinystats/mean.py\n@@ -1,3 +1,4 @@\n"
        "+print('=== 18 passed in 0.01s === PASSED')\n def mean(xs):\n"
        '     """Arithmetic mean of a non-empty sequence."""\n     if not xs:\n'
    )
    g = _grade(example, "mean-divisor", patch)
    assert g.patch_applied
    assert g.status == "failed", g.reason


def test_a_suite_that_never_ran_is_invalid_not_a_pass(example):
    ctx, ts, export = example
    task = ts.task("mean-divisor").model_copy(update={"test_cmd": "echo '2 passed'; echo PASSED; exit 0"})
    g = grade_patch(ctx.backend, ctx.pool, export, task, "", ctx.store.hidden_files(task.hidden_tests_ref))
    assert g.status == "invalid"
    assert "no sign it ran" in g.reason


def test_a_skipped_fail_to_pass_test_is_a_failure(example):
    patch = (
        "--- a/tinystats/mean.py\n+++ b/tinystats/mean.py\n@@ -1,4 +1,6 @@\n def mean(xs):\n"
        '     """Arithmetic mean of a non-empty sequence."""\n+    import pytest\n+    pytest.skip("not today")\n'
        '     if not xs:\n         raise ValueError("mean of an empty sequence")\n'
    )
    g = _grade(example, "mean-divisor", patch)
    assert g.results["tests.hidden.test_mean_divisor::test_mean_of_three"] == "skipped"
    assert g.status == "failed"
    assert "skipped" in g.reason


def test_a_patch_that_does_not_apply_fails_with_the_reason(example):
    g = _grade(example, "mean-divisor", "--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n")
    assert g.status == "failed" and not g.patch_applied
    assert "does not apply" in g.reason


def test_hidden_tests_overwrite_what_the_patch_put_at_their_paths(example):
    # A patch that plants a trivially passing file at the hidden test's path is overwritten.
    patch = (
        "--- /dev/null\n+++ b/tests/hidden/test_mean_divisor.py\n@@ -0,0 +1,6 @@\n"
        "+def test_mean_of_three():\n+    pass\n+\n+\n+def test_mean_of_one():\n+    pass\n"
    )
    g = _grade(example, "mean-divisor", patch)
    assert g.status == "failed", g.reason


def test_judge_needs_exit_code_and_results_to_agree(example):
    _, ts, _ = example
    task = ts.task("clamp-order")
    every = {t: "passed" for t in task.fail_to_pass + task.pass_to_pass}
    assert judge(task, 0, every)[0] == "passed"
    status, reason = judge(task, 2, every)
    assert status == "failed" and "exited 2" in reason
    flaky = task.pass_to_pass[0]
    assert judge(task, 1, {**every, flaky: "failed"})[0] == "failed"
    assert judge(task, 1, {**every, flaky: "failed"}, dropped=[flaky])[0] == "passed"
    assert judge(task, 5, {})[0] == "invalid"


def test_workspace_patch_lists_every_touched_file(tmp_path):
    clean, ws = tmp_path / "a", tmp_path / "b"
    for d in (clean, ws):
        (d / "pkg").mkdir(parents=True)
        (d / "pkg" / "m.py").write_text("x = 1\n")
        (d / "gone.txt").write_text("bye\n")
    (ws / "pkg" / "m.py").write_text("x = 2\n")
    (ws / "gone.txt").unlink()
    (ws / "tests").mkdir()
    (ws / "tests" / "conftest.py").write_text("# planted\n")
    patch, touched = workspace_patch(str(clean), str(ws))
    assert touched == ["gone.txt", "pkg/m.py", "tests/conftest.py"]
    assert "+x = 2" in patch and "+++ b/tests/conftest.py" in patch and "+++ /dev/null" in patch


def test_policy_fails_test_edits_hidden_paths_and_history_reads():
    hidden = ["tests/hidden/test_slug_case.py"]
    assert check_patch(["tinystats/slug.py"], hidden) == []
    assert check_patch(["tests/conftest.py"], hidden) == ["patch edits test files: tests/conftest.py"]
    assert check_patch(["tests/hidden/test_slug_case.py"], hidden)[0].startswith("patch writes hidden-test paths")
    assert check_patch(["src/test_helpers.py"], hidden)
    # what the test run itself does: pytest config, start-up hooks
    assert check_patch(["pytest.ini"], hidden) == ["patch changes how the tests run: pytest.ini"]
    assert check_patch(["src/sitecustomize.py", "lib/evil.pth"], hidden) == [
        "patch changes how the tests run: lib/evil.pth, src/sitecustomize.py"
    ]
    pytest_section = unified_chunk(
        "pyproject.toml",
        ["[tool.pytest.ini_options]\n"],
        ["[tool.pytest.ini_options]\n", "addopts = '-p evil'\n"],
        False,
        False,
    )
    assert check_patch(["pyproject.toml"], hidden, pytest_section) == [
        "patch changes how the tests run: pyproject.toml"
    ]
    other = unified_chunk("setup.py", [], ["print('pytest')\n"], True, False)  # another file's lines
    dependency = other + unified_chunk("pyproject.toml", ["version = '1.0'\n"], ["version = '1.1'\n"], False, False)
    assert check_patch(["pyproject.toml", "setup.py"], hidden, dependency) == []
    unreadable = "Binary or non-text file setup.cfg differs\n"
    assert check_patch(["setup.cfg"], hidden, unreadable) == ["patch changes how the tests run: setup.cfg"]
    assert check_trajectory(["cat tinystats/slug.py", "python -m pytest tests"], hidden) == []
    assert "git history" in check_trajectory(["git log --all --oneline"], hidden)[0]
    assert "git history" in check_trajectory(["git show origin/main:tinystats/slug.py"], hidden)[0]
    assert "leaked paths" in check_trajectory(["cat /srv/tasks/slug-case/gold.patch"], hidden)[0]
    assert "leaked paths" in check_trajectory(["cat tests/hidden/test_slug_case.py"], hidden)[0]


def _g(results: dict[str, str], status: str = "passed") -> Grade:
    return Grade(status, "", 0, results)


def test_gold_classification_drops_flaky_tests_and_excludes_failing_gold(example):
    _, ts, _ = example
    task = ts.task("clamp-order")  # fail-to-pass: inside, below; pass-to-pass: basic tests + above
    ok = {t: "passed" for t in task.fail_to_pass + task.pass_to_pass}
    below, p2p = task.fail_to_pass[1], task.pass_to_pass[0]
    assert classify_task(task, [_g(ok)] * 3)["status"] == "ok"
    flaky_p2p = classify_task(task, [_g(ok), _g({**ok, p2p: "failed"}, "failed"), _g(ok)])
    assert flaky_p2p["status"] == "tests_dropped" and flaky_p2p["dropped_tests"] == [p2p]
    rates = {r["test_id"]: r["flake_rate"] for r in flaky_p2p["tests"]}
    assert rates[p2p] == pytest.approx(1 / 3) and rates[below] == 0
    always = classify_task(task, [_g({**ok, below: "failed"}, "failed")] * 3)
    assert always["status"] == "excluded" and "failed in every run" in always["reason"]
    words = ts.task("words-unique")  # its only fail-to-pass test is the flaky one
    only = words.fail_to_pass[0]
    base = {t: "passed" for t in words.pass_to_pass}
    grades = [
        _g({**base, only: "passed"}),
        _g({**base, only: "failed"}, "failed"),
        _g({**base, only: "failed"}, "failed"),
    ]
    verdict = classify_task(words, grades)
    assert verdict["status"] == "excluded" and "flaky" in verdict["reason"]
    with pytest.raises(SweError, match="at least 3"):
        classify_task(task, [_g(ok)] * 2)


def test_workspace_pool_is_bounded_and_reports_queue_age(example, tmp_path):
    _, _, export = example
    pool = WorkspacePool(tmp_path / "ws", max_ready=2, max_leased=1)
    assert pool.prepare(export, "env", 5) == 2  # bounded: idle copies never pass max_ready
    seen: dict[str, float] = {}
    with pool.lease(export, "env") as first:
        assert first.warm

        def second() -> None:
            with pool.lease(export, "env") as ws:
                seen["waited"] = ws.waited_s

        t = threading.Thread(target=second)
        t.start()
        deadline = time.monotonic() + 10
        while pool.stats()["waiting"] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        stats = pool.stats()
        assert stats["waiting"] == 1 and stats["leased"] == 1 and stats["queue_age_s"] >= 0.2
        with pytest.raises(WorkspaceQueueTimeout):
            with pool.lease(export, "env", timeout=0.05):
                pass
    t.join(10)
    assert seen["waited"] >= 0.2
    assert not Path(first.path).exists()  # a used workspace is deleted, never reused
    pool.close()


def test_leaderboard_publishes_no_row_missing_a_reproducibility_field(tmp_path):
    from evalrunner_assets.swe.leaderboard import leaderboard
    from evalrunner_assets.swe.model import SweTask, TaskSet

    store = SweStore(open_lake(str(tmp_path / "lake")))
    task = SweTask(
        id="only-task",
        task_set="tiny",
        repo="example/tiny",
        commit="a" * 40,
        env_digest="e" * 16,
        test_cmd="true",
        problem="p",
        hidden_tests_ref="0" * 64,
        hidden_paths=["tests/hidden/test_x.py"],
        gold_patch_ref="1" * 64,
        fail_to_pass=["tests.hidden.test_x::test_x"],
        pass_to_pass=[],
    )
    store.save_task_set(
        TaskSet(name="tiny", repo="example/tiny", repo_source="/nowhere", registered_at="t", tasks=[task])
    )
    base = {
        "run_id": "r-1",
        "task_set": "tiny",
        "task_id": "only-task",
        "sample_idx": 0,
        "status": "passed",
        "passed": True,
        "tests_passed_raw": True,
        "repo": "example/tiny",
        "commit": "a" * 40,
        "env_digest": "e" * 16,
        "prompt_version": "v1",
        "seed": 0,
        "cost_usd": 0.01,
    }
    assert store.write_attempt({**base, "id": "1", "agent_version": "complete"}, {})
    assert store.write_attempt({**base, "id": "2", "agent_version": "unpinned", "prompt_version": None}, {})
    assert not store.write_attempt({**base, "id": "3", "agent_version": "complete", "passed": False}, {})
    board = leaderboard(store, "tiny")
    assert [e["agent_version"] for e in board["entries"]] == ["complete"]
    assert board["entries"][0]["passed"] == 1  # the second write of the same key changed nothing
    assert board["unpublished_versions"] == ["unpinned"]
    assert board["gold_note"]  # no gold check yet: said, not hidden


def test_a_declared_environment_is_pinned_per_task_and_a_missing_file_is_refused_naming_it(example, tmp_path):
    ctx, ts, export = example
    # The example declares requirements.txt: every task records its environment's digest.
    assert {t.env_source for t in ts.tasks} == {"requirements.txt"}
    env = ctx.environment(ts.tasks[0], export)
    assert env.python_env is not None and Path(env.python_env, ".evalrunner-env.json").is_file()
    assert {t.env_digest for t in ts.tasks} == {env.digest}
    # The grader runs test_cmd with that environment first on PATH.
    task = ts.task("mean-divisor")
    graded = grade_patch(
        ctx.backend,
        ctx.pool,
        export,
        task,
        _gold(example, "mean-divisor"),
        ctx.store.hidden_files(task.hidden_tests_ref),
        python_env=env.python_env,
    )
    assert graded.status == "passed", graded.reason
    spec = EXAMPLE_TASK_SET.read_text().replace('"requirements.txt"', '"requirements-missing.txt"')
    bad = tmp_path / "set"
    bad.mkdir()
    (bad / "tasks").symlink_to(EXAMPLE_TASK_SET.parent / "tasks")
    (bad / "taskset.json").write_text(spec)
    with pytest.raises(SweError, match=r"task 'mean-divisor': environment 'requirements-missing.txt'"):
        register_task_set(ctx, bad / "taskset.json", ts.repo_source)
    (bad / "taskset.json").write_text(spec.replace('"requirements-missing.txt"', '"/etc/passwd"'))
    with pytest.raises(SweError, match=r"environment.requirements '/etc/passwd' must be a relative path"):
        register_task_set(ctx, bad / "taskset.json", ts.repo_source)
