"""Inspect tasks run in the bubblewrap sandbox, cold and warm; logs classified by their header."""

from __future__ import annotations

import io
import time
import zipfile
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalrunner_assets.execution.inspect_runner import (
    EMPTY_LOG,
    INVALID_LOG,
    LOG_STATUS,
    MULTIPLE_LOGS,
    NO_LOG,
    InspectRunError,
    TaskRunConfig,
    WarmTaskRunner,
    _window_run,
    config_digest,
    list_sample_ids,
    list_sample_ids_many,
    run_window_cold,
    sample_order,
    window_ids,
)
from evalrunner_assets.execution.repo import RepoSource
from evalrunner_assets.execution.sandbox import Limits, SandboxRequest
from lake.batch import BatchKey, RunSettings
from lake.layout import Window
from tests.helpers.tiny_tasks import TASKS, cfg

IDS = [f"s{i}" for i in range(20)]

# A task file whose import fails, as a PR that forgot to declare a dependency leaves it.
NEEDS_MISSING_DEPENDENCY = """from inspect_ai import Task, task

import no_such_dependency_xyz

@task
def needs_dep():
    return Task(dataset=[], solver=[], scorer=[])
"""


@pytest.fixture(scope="module")
def tiny_export(tmp_path_factory):
    from tests.helpers.git_repos import commit_files

    root = tmp_path_factory.mktemp("tiny")
    sha = commit_files(
        root / "repo",
        {
            "evals/tasks.py": TASKS,
            "evals/needs_dep.py": NEEDS_MISSING_DEPENDENCY,
            "agent.yaml": "name: tiny\n",
            "skills/a/SKILL.md": "answer evens\n",
        },
    )
    return RepoSource("acme/tiny", str(root / "repo")).export(sha, root / "export")


# --- sample order --------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=6), unique=True, max_size=40), st.integers(0, 2**32), st.randoms())
def test_sample_order_is_a_permutation_independent_of_input_order(ids, seed, rnd):
    order = sample_order(ids, seed)
    assert sorted(order) == sorted(ids)
    shuffled = list(ids)
    rnd.shuffle(shuffled)
    assert sample_order(shuffled, seed) == order


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.text(min_size=1, max_size=6), unique=True, min_size=1, max_size=40),
    st.lists(st.text(alphabet="XYZ", min_size=7, max_size=9), unique=True, max_size=10),
    st.integers(0, 2**32),
)
def test_adding_samples_never_reorders_existing_ones(ids, added, seed):
    before = sample_order(ids, seed)
    after = [i for i in sample_order(ids + [a for a in added if a not in ids], seed) if i in set(ids)]
    assert after == before


def test_the_order_depends_on_the_seed_and_is_not_the_dataset_order():
    ids = [f"q{i:04d}" for i in range(200)]
    assert sample_order(ids, 1) != sample_order(ids, 2)
    assert sample_order(ids, 1) != ids
    assert sample_order(ids, 1) == sample_order(list(reversed(ids)), 1)


def test_windows_tile_the_order():
    ids = [f"q{i}" for i in range(10)]
    got = window_ids(ids, 3, Window(0, 4)) + window_ids(ids, 3, Window(4, 8)) + window_ids(ids, 3, Window(8, 12))
    assert got == sample_order(ids, 3)


def test_duplicate_sample_ids_are_refused():
    with pytest.raises(InspectRunError, match="not unique"):
        sample_order(["a", "b", "a"], 0)


def test_config_digest_follows_agent_config_not_unrelated_files(tmp_path):
    (tmp_path / "skills" / "t").mkdir(parents=True)
    (tmp_path / "evals").mkdir()
    (tmp_path / "agent.yaml").write_text("a")
    (tmp_path / "skills/t/SKILL.md").write_text("x")
    (tmp_path / "evals/tasks.py").write_text("t")
    (tmp_path / "README.md").write_text("r")
    d0 = config_digest(tmp_path, ".", "evals/tasks.py@t")
    (tmp_path / "README.md").write_text("changed")
    assert config_digest(tmp_path, ".", "evals/tasks.py@t") == d0
    for f in ("skills/t/SKILL.md", "agent.yaml", "evals/tasks.py"):
        (tmp_path / f).write_text("changed")
        d1 = config_digest(tmp_path, ".", "evals/tasks.py@t")
        assert d1 != d0
        d0 = d1


# --- classification of what a sandbox left behind --------------------------------------------


def _key(commit: str) -> BatchKey:
    return BatchKey(
        repo="acme/tiny",
        commit=commit,
        task="evals/tiny",
        spec="evals/tasks.py@tiny",
        window=Window(0, 1),
        settings=RunSettings(model="none/none", seed=0),
    )


@pytest.mark.parametrize(
    ("script", "kind", "cause"),
    [
        ("true", NO_LOG, "no Inspect log was written (exit code 0)"),
        (": > /work/out/w.eval", EMPTY_LOG, "log 'w.eval' is empty (0 bytes)"),
        ("printf 'PK-not-really' > /work/out/w.eval", INVALID_LOG, "log 'w.eval' is not a valid Inspect log"),
        ("echo a > /work/out/a.eval; echo b > /work/out/b.eval", MULTIPLE_LOGS, "expected one log, found 2"),
    ],
)
def test_each_missing_or_broken_log_is_its_own_infrastructure_failure(bwrap_backend, tiny_export, script, kind, cause):
    result = bwrap_backend.run(SandboxRequest(argv=("sh", "-c", script), export=tiny_export))
    run = _window_run(_key(tiny_export.commit), "cold", result, ["s1"], 1, {})
    assert run.infrastructure_failure and run.failure_kind == kind
    assert cause in run.failure_cause


def test_a_zip_that_is_not_an_inspect_log_is_invalid(bwrap_backend, tiny_export, tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("header.json", "{}")
    (tmp_path / "fake").write_bytes(buf.getvalue())
    from evalrunner_assets.execution.sandbox import SandboxResult, SandboxStatus

    result = SandboxResult(
        status=SandboxStatus.OK,
        exit_code=0,
        stdout=b"",
        stdout_truncated=False,
        stderr_tail="",
        outputs={"x.eval": buf.getvalue()},
        rejected_outputs={},
        duration_s=0.1,
        backend="bubblewrap",
    )
    run = _window_run(_key(tiny_export.commit), "cold", result, ["s1"], 1, {})
    assert run.failure_kind == INVALID_LOG and "not a valid Inspect log" in run.failure_cause


# --- real runs ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_cold_window_runs_in_the_sandbox_and_its_log_is_classified(bwrap_backend, tiny_export):
    c = cfg("tiny")
    name, ids, digests = list_sample_ids(bwrap_backend, tiny_export, c)
    assert name == "tiny" and sorted(ids) == sorted(IDS)
    assert len(set(digests)) == len(ids)
    run = run_window_cold(bwrap_backend, tiny_export, c, Window(0, 4), sample_ids=ids, task_name=name)
    assert run.ok, run.failure_cause
    assert run.mode == "cold" and run.log_status == "success" and run.log_name.endswith(".eval")
    assert run.sample_ids == window_ids(IDS, 7, Window(0, 4)) and run.sample_count == 4
    assert run.key.publishable, run.key.missing_fields
    assert run.key.backend == "bubblewrap" and run.key.runtime_digest == bwrap_backend.runtime_digest()
    assert run.key.config_digest == config_digest(tiny_export.path, ".", "evals/tasks.py@tiny")

    from inspect_ai.log import read_eval_log

    path = tiny_export.path + "-log.eval"
    with open(path, "wb") as f:
        f.write(run.log_bytes)
    log = read_eval_log(path)
    assert sorted(s.id for s in log.samples) == sorted(run.sample_ids)
    for s in log.samples:
        expected = "C" if int(s.id[1:]) % 2 == 0 else "I"
        assert s.scores["match"].value == expected


@pytest.mark.slow
def test_warm_windows_match_cold_and_are_faster(bwrap_backend, tiny_export):
    c = cfg("tiny")
    t0 = time.monotonic()
    cold = run_window_cold(bwrap_backend, tiny_export, c, Window(4, 8), sample_ids=IDS, task_name="tiny")
    cold_s = time.monotonic() - t0
    assert cold.ok, cold.failure_cause
    per_window = []
    with WarmTaskRunner(bwrap_backend, tiny_export, c) as warm:
        runs = []
        for w in (Window(0, 4), Window(4, 8), Window(8, 12), Window(12, 16)):
            t = time.monotonic()
            runs.append(warm.run_window(w))
            per_window.append(time.monotonic() - t)
    assert all(r.ok for r in runs), [r.failure_cause for r in runs]
    assert runs[1].sample_ids == cold.sample_ids and runs[1].key == cold.key
    assert runs[0].timings["sandbox_start_s"] > 0 and runs[1].timings["sandbox_start_s"] == 0
    covered = [i for r in runs for i in r.sample_ids]
    assert covered == sample_order(IDS, 7)[:16]
    steady = sum(per_window[1:]) / 3
    print(f"\ncold window {cold_s:.2f}s; warm first window {per_window[0]:.2f}s, then {steady:.2f}s per window")
    assert steady < cold_s / 3


@pytest.mark.slow
def test_a_solver_that_raises_is_the_agents_failure_not_the_infrastructures(bwrap_backend, tiny_export):
    # Every sample runs and each one that raised is an errored sample in a good log, warm or cold.
    from lake.ingest import read_log_bytes

    with WarmTaskRunner(bwrap_backend, tiny_export, cfg("broken")) as warm:
        run = warm.run_window(Window(0, 2))
    cold = run_window_cold(bwrap_backend, tiny_export, cfg("broken"), Window(2, 4), sample_ids=IDS, task_name="broken")
    for r in (run, cold):
        assert r.ok and not r.infrastructure_failure, r.failure_cause
        assert r.log_status == "success" and r.sample_count == 2
        _, log = read_log_bytes(r.log_bytes, "window")
        assert all(s.error is not None and "planned failure in s" in s.error.message for s in log.samples)


def test_a_task_file_that_fails_at_import_is_named_with_its_error_and_line_not_a_traceback(bwrap_backend, tiny_export):
    # Warm (the engine's listing) and cold: the failure says which spec, what it raised and
    # where in the repository's code, and how to fix it; no traceback text.
    c = replace(cfg("needs_dep"), spec="evals/needs_dep.py@needs_dep")
    warm = list_sample_ids_many(bwrap_backend, tiny_export, [c])[c.task]
    with pytest.raises(InspectRunError) as cold:
        list_sample_ids(bwrap_backend, tiny_export, c)
    for exc in (warm, cold.value):
        assert isinstance(exc, InspectRunError)
        msg = str(exc)
        assert msg.startswith(
            "loading task 'evals/needs_dep.py@needs_dep' raised ModuleNotFoundError: "
            "No module named 'no_such_dependency_xyz' (at evals/needs_dep.py:3); "
            "declare the missing package in the repository's dependencies"
        ), msg
        assert "Traceback" not in msg and 'File "' not in msg


def test_a_window_that_inspect_refuses_before_any_log_names_the_error_not_a_traceback(bwrap_backend, tiny_export):
    with WarmTaskRunner(bwrap_backend, tiny_export, cfg("unknown_sandbox")) as warm:
        run = warm.run_window(Window(0, 2))
    assert run.failure_kind == NO_LOG, run.failure_cause
    assert run.failure_cause.startswith("warm worker reported: ") and "no_such_sandbox_xyz" in run.failure_cause
    assert run.failure_cause.endswith("; no Inspect log was written"), run.failure_cause
    assert "Traceback" not in run.failure_cause and 'File "' not in run.failure_cause


def test_a_task_file_with_a_syntax_error_names_the_line_not_task_not_found(bwrap_backend, tmp_path):
    from tests.helpers.git_repos import commit_files

    sha = commit_files(tmp_path / "repo", {"evals/broken.py": "from inspect_ai import task\n\n@task\ndef t(:\n"})
    export = RepoSource("acme/broken", str(tmp_path / "repo")).export(sha, tmp_path / "export")
    c = replace(cfg("t"), spec="evals/broken.py@t")
    warm = list_sample_ids_many(bwrap_backend, export, [c])[c.task]
    assert isinstance(warm, InspectRunError)
    assert str(warm).startswith(
        "loading task 'evals/broken.py@t' raised SyntaxError: invalid syntax (at evals/broken.py:4)"
    )


@pytest.mark.slow
def test_samples_without_ids_run_under_inspects_positional_ids_with_their_input_digests(bwrap_backend, tiny_export):
    from evalrunner_assets.sample_digest import sample_input_digest

    c = cfg("no_ids")
    name, ids, digests = list_sample_ids(bwrap_backend, tiny_export, c)
    assert name == "no_ids" and ids == ["1", "2", "3", "4", "5", "6"]
    # Computed in the sandbox from the dataset: the same digest the lake computes from a log.
    assert digests == [sample_input_digest(f"say {i}", str(i)) for i in range(6)]
    cold = run_window_cold(bwrap_backend, tiny_export, c, Window(0, 3), sample_ids=ids, task_name=name)
    with WarmTaskRunner(bwrap_backend, tiny_export, c) as warm:
        assert warm.list_ids().ids == ids
        warm_run = warm.run_window(Window(3, 6))
    assert cold.ok and warm_run.ok, (cold.failure_cause, warm_run.failure_cause)
    assert sorted(cold.sample_ids + warm_run.sample_ids) == ids


@pytest.mark.slow
def test_a_cold_run_that_exits_zero_mid_run_is_not_trusted(bwrap_backend, tiny_export):
    """The task process exits 0 half-way: the exit code says success, the log header does not."""
    run = run_window_cold(bwrap_backend, tiny_export, cfg("exits"), Window(0, 2), sample_ids=IDS, task_name="exits")
    assert run.exit_code == 0
    assert run.infrastructure_failure and run.failure_kind == LOG_STATUS
    assert "has status 'started'" in run.failure_cause


@pytest.mark.slow
def test_task_code_that_hangs_times_out_the_warm_session(bwrap_backend, tiny_export):
    c = cfg("sleeper", limits=replace(Limits(), wall_seconds=4))
    with WarmTaskRunner(bwrap_backend, tiny_export, c) as warm:
        warm.list_ids()
        t = time.monotonic()
        run = warm.run_window(Window(0, 1))
        assert time.monotonic() - t < 10
        assert run.failure_kind == "sandbox_timeout" and "no reply within 4s" in run.failure_cause
        dead = warm.run_window(Window(1, 2))
        assert dead.failure_kind == "sandbox_crashed" and "session is closed" in dead.failure_cause


@pytest.mark.slow
def test_task_code_forging_a_second_log_is_caught(bwrap_backend, tiny_export):
    with WarmTaskRunner(bwrap_backend, tiny_export, cfg("forger")) as warm:
        run = warm.run_window(Window(0, 1))
    assert run.failure_kind == MULTIPLE_LOGS and "zz-forged.eval" in run.failure_cause


# --- the bundled example agent, for real ----------------------------------------------------

# Documented in evalrunner_assets/simagent/_behaviour.py for the example's base skills.
EXAMPLE_PROBABILITIES = {
    "triage/runbook_lookup": 0.60,
    "triage/escalation_policy": 0.80,
    "triage/summary_quality": 0.90,
}
EXAMPLE_WINDOW = Window(0, 120)


@pytest.mark.slow
def test_the_example_agent_runs_in_the_sandbox_with_its_documented_scores(bwrap_backend, tmp_path):
    from inspect_ai.log import read_eval_log
    from inspect_ai.scorer import value_to_float

    from evalrunner_assets.discovery import discover
    from evalrunner_assets.example_repo import build_example_repo

    example = build_example_repo(tmp_path / "support-agent", variants=())
    export = RepoSource("acme/support-agent", str(example.path)).export(example.base_sha, tmp_path / "export")
    found = discover(bwrap_backend, export)
    assert found.source == "evals-list"
    assert {t.id for t in found.manifest.tasks} == set(EXAMPLE_PROBABILITIES)
    to_float = value_to_float()
    for t in found.manifest.tasks:
        c = TaskRunConfig(
            repo="acme/support-agent",
            task=t.id,
            spec=t.spec,
            workdir=t.workdir,
            settings=RunSettings(model="simagent/support-agent", seed=11),
        )
        with WarmTaskRunner(bwrap_backend, export, c) as warm:
            ids = warm.list_ids().ids
            assert len(ids) == 300
            run = warm.run_window(EXAMPLE_WINDOW)
        assert run.ok, (t.id, run.failure_cause, run.stderr_tail[-800:])
        assert run.sample_count == EXAMPLE_WINDOW.size and run.key.publishable
        path = tmp_path / f"{t.id.replace('/', '_')}.eval"
        path.write_bytes(run.log_bytes)
        log = read_eval_log(str(path))
        values = [to_float(next(iter(s.scores.values())).value) for s in log.samples]
        mean = sum(values) / len(values)
        p = EXAMPLE_PROBABILITIES[t.id]
        se = (p * (1 - p) / len(values)) ** 0.5
        # 4 standard errors: a false alarm about once in 16,000 runs, a real mismatch caught.
        assert abs(mean - p) <= 4 * se, (t.id, mean, p)
        assert any(e.event == "tool" for s in log.samples[:5] for e in s.events)  # real trajectories


def _listing_result(payload: object):
    import json

    from evalrunner_assets.execution.sandbox import SandboxResult, SandboxStatus

    return SandboxResult(
        status=SandboxStatus.OK,
        exit_code=0,
        stdout=b"",
        stdout_truncated=False,
        stderr_tail="",
        outputs={"sample_ids.json": json.dumps(payload).encode()},
        rejected_outputs={},
        duration_s=0.1,
        backend="bubblewrap",
    )


def test_a_listing_names_positional_ids_with_one_digest_each_or_is_refused():
    from evalrunner_assets.execution.inspect_runner import _parse_ids

    ok = _parse_ids(_listing_result({"task": "t", "ids": [1, 2], "input_digests": ["ab" * 16, "cd" * 16]}))
    assert ok.ids == ["1", "2"] and ok.input_digests == ["ab" * 16, "cd" * 16]
    assert _parse_ids(_listing_result({"task": "t", "ids": [1, 2]})).input_digests == []
    with pytest.raises(InspectRunError, match="one hex input digest per id"):
        _parse_ids(_listing_result({"task": "t", "ids": [1, 2], "input_digests": ["ab" * 16]}))
    with pytest.raises(InspectRunError, match="empty or None sample id"):
        _parse_ids(_listing_result({"task": "t", "ids": [None, 2]}))
