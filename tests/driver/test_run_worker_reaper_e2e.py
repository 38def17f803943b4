"""A run whose run worker is killed with SIGKILL is failed by the run-worker reaper and picked up
again: on a real `evalrunner serve` (webserver, daemon, code server, a run worker process per
run) a SWE run submitted over the API is relaunched by ``swe_run_sensor`` and ends ``done``; a
comparison whose worker was killed is resumed by the sampling sensor and decided. Bubblewrap
sandboxes, real pytest and Inspect runs, the lake. GitHub is the REST stand-in (mocked:
github.com is not reachable; no delivery is sent here)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from evalrunner_assets.definitions import defs
from evalrunner_assets.driver.swe import RUN_TAG
from evalrunner_assets.example_repo import build_example_repo
from evalrunner_assets.partitions import add_partitions, comparison_commit_keys
from evalrunner_assets.pipeline.assess import load_result
from evalrunner_assets.pipeline.run_workers import (
    WORKER_HOST_TAG,
    WORKER_LOST_TAG,
    WORKER_PID_TAG,
    ProcessInfo,
    ProcTable,
    this_host,
)
from evalrunner_assets.pipeline.spec import ComparisonRequest, open_comparison
from evalrunner_assets.swe.example import build_tinystats_repo
from lake import open_lake
from resources import GitHubResource, LakeResource, RepoResource, SandboxResource
from sensors.run_workers import LAUNCHER_GRACE_S, reap
from sensors.sampling import sampling_sensor
from tests.helpers.git_repos import git
from tests.helpers.github_standin import GitHubStandin
from tests.helpers.served_evalrunner import EVALRUNNER, ServedEvalrunner
from tests.helpers.swe_example_subset import write_subset_task_set

pytestmark = pytest.mark.slow

SUBSET = ("mean-divisor", "median-even")
SPEC = {"task_set": "tinystats-bugs", "samples": 1, "budget_usd": 5.0}
TIMEOUT = 300.0


def wait_for(condition, timeout: float, what: str, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} after {timeout:.0f}s")
        time.sleep(every)


class ListLog:
    """A sensor log that keeps its lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, line: str) -> None:
        self.lines.append(line)

    warning = info


def engine_messages(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    return [e.message or "" for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)]


def failure_message(instance: dg.DagsterInstance, run_id: str) -> str:
    (event,) = instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    return event.message or ""


def test_a_swe_run_whose_workers_die_is_failed_relaunched_and_done(tmp_path: Path) -> None:
    """First its run worker alone is killed (Dagster's code server, which started it, fails the
    run and the reaper says why and tags it, or the reaper finds it first and fails it), then the relaunch's worker together with the whole
    `evalrunner serve` (nothing is left to notice: the reaper of the next serve fails it). Each
    time ``swe_run_sensor`` relaunches it, and it ends ``done``."""
    home = tmp_path / "home"
    repo = tmp_path / "tinystats"
    build_tinystats_repo(repo)
    spec_file = write_subset_task_set(tmp_path / "set", SUBSET)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALRUNNER_", "DAGSTER_"))}
    subprocess.run(
        [EVALRUNNER, "swe", "register", "--spec", str(spec_file), "--repo", str(repo), "--gold-runs", "3"],
        env={**env, "EVALRUNNER_HOME": str(home)},
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    host = this_host()
    with GitHubStandin(token="reaper-token") as standin:
        served = ServedEvalrunner.start(home, standin, {})
        try:
            status, body = served.call_api("POST", "/v1/runs", {**SPEC, "agent_version": "better"})
            assert status == 202, body
            run_id = body["id"]
            with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:

                def launch(n: int) -> dg.DagsterRun | None:
                    """Launch ``n`` of the SWE run once its worker has recorded itself."""
                    key = run_id if n == 0 else f"{run_id}:launch-{n}"
                    runs = instance.get_runs(filters=dg.RunsFilter(tags={RUN_TAG: run_id, "dagster/run_key": key}))
                    return runs[0] if runs and WORKER_PID_TAG in runs[0].tags else None

                def ended_lost(dagster_run_id: str) -> dg.DagsterRun | None:
                    run = instance.get_run_by_id(dagster_run_id)
                    return run if run is not None and run.is_finished and WORKER_LOST_TAG in run.tags else None

                # 1. The run worker alone is killed.
                first = served.wait_for(lambda: launch(0), TIMEOUT, "the run worker recorded", every=0.1)
                pid = int(first.tags[WORKER_PID_TAG])
                assert first.tags[WORKER_HOST_TAG] == host and pid != served.proc.pid
                killed_at = time.monotonic()
                os.kill(pid, signal.SIGKILL)
                dead = served.wait_for(lambda: ended_lost(first.run_id), 120, "the killed run explained", every=0.5)
                print(f"worker killed: failed and explained {time.monotonic() - killed_at:.1f}s after the kill")
                assert dead.status == dg.DagsterRunStatus.FAILURE
                # The code server that started the worker reaps it within half a second and fails
                # the run; the reaper, finding the worker gone while its launcher lives, leaves the
                # run to it and explains the failure in an engine event. Only were the code server
                # to miss its grace would the reaper fail the run itself. One failure either way,
                # saying how the worker died and what happens next.
                lost = f"Run {first.run_id} (swe_run_job) lost its run worker: pid {pid} on {host} "
                relaunch = f"swe_run_sensor relaunches SWE run {run_id} as {run_id}:launch-1"
                said = [*engine_messages(instance, first.run_id), failure_message(instance, first.run_id)]
                assert any(
                    m.startswith(lost)
                    and (
                        m.startswith(f"{lost}was terminated by signal 9 (SIGKILL); {relaunch}")
                        or m.startswith(
                            f"{lost}is gone (it was terminated by signal 9 (SIGKILL), a zombie awaiting its "
                            f"parent). Marked failed by evalrunner's run_worker_reaper; {relaunch}"
                        )
                    )
                    for m in said
                ), said

                # 2. The relaunch's worker dies with the whole serve (a crash, a reboot).
                second = served.wait_for(lambda: launch(1), TIMEOUT, "the relaunch's worker recorded", every=0.1)
                pid2 = int(second.tags[WORKER_PID_TAG])
                assert pid2 != pid and second.tags["dagster/sensor_name"] == "swe_run_sensor"
                os.killpg(served.proc.pid, signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid2, signal.SIGKILL)
                served.proc.wait(timeout=60)
                wait_for(lambda: (ProcTable().lookup(pid2) or ProcessInfo(None, True)).zombie, 60, "the worker gone")
                assert instance.get_run_by_id(second.run_id).status == dg.DagsterRunStatus.STARTED
                served = ServedEvalrunner.start(home, standin, {})
                restarted_at = time.monotonic()
                dead2 = served.wait_for(lambda: ended_lost(second.run_id), 120, "the orphaned run failed", every=0.5)
                print(f"serve killed: the orphaned run failed {time.monotonic() - restarted_at:.1f}s after restart")
                assert dead2.status == dg.DagsterRunStatus.FAILURE
                message = failure_message(instance, second.run_id)
                assert message.startswith(
                    f"Run {second.run_id} (swe_run_job) lost its run worker: pid {pid2} on {host} is gone ("
                ), message
                assert (
                    f"Marked failed by evalrunner's run_worker_reaper; swe_run_sensor relaunches SWE run {run_id} "
                    f"as {run_id}:launch-2 (lost worker 2 of at most 2 relaunched" in message
                ), message

                def finished() -> dict[str, Any] | None:
                    status, view = served.call_api("GET", f"/v1/runs/{run_id}")
                    assert status == 200, view
                    runs = view["dagster_runs"]
                    return view if len(runs) == 3 and runs[0]["status"] in ("SUCCESS", "FAILURE", "CANCELED") else None

                view = served.wait_for(finished, TIMEOUT, "the relaunched run ended", every=1.0)
                print(f"done {time.monotonic() - killed_at:.1f}s after the first kill")
                assert view["status"] == "done" and view["attempts_landed"] == len(SUBSET), view
                assert [(r["status"], r["run_key"]) for r in view["dagster_runs"]] == [
                    ("SUCCESS", f"{run_id}:launch-2"),
                    ("FAILURE", f"{run_id}:launch-1"),
                    ("FAILURE", run_id),
                ]
                assert view["worker"]["pid"] not in (pid, pid2)
            assert "Traceback" not in served.log_text(), served.log_text()[-3000:]
        finally:
            served.stop()


def test_a_comparison_whose_worker_is_killed_is_failed_and_resumed(tmp_path: Path) -> None:
    """The worker here is an ``execute_in_process`` run of ``comparison_job`` in a process of its
    own (as the CLI runs it): it records itself in its run's tags and takes the comparison's
    lease; killed, its run is failed by ``reap`` and the sampling sensor asks for the next run,
    which decides the comparison."""

    repo = tmp_path / "repo"
    build_example_repo(repo, ["no-op-wording"])
    sha = lambda ref: git(repo, "rev-parse", ref)  # noqa: E731
    home = tmp_path / "home"
    (home / "dagster").mkdir(parents=True)
    the_lake = open_lake(str(home / "lake"))
    RepoResource(cache_dir=str(home / "repos")).register(the_lake, "local/repo", str(repo))

    req = ComparisonRequest(
        repo="local/repo",
        source=str(repo),
        pr="7",
        base_sha=sha("main"),
        head_sha=sha("no-op-wording"),
        base_ref="main",
        head_ref="no-op-wording",
        requested_at=datetime.now(UTC).isoformat(),
        cap=16,
    )
    open_comparison(the_lake, req)
    resources = {
        "lake": LakeResource(root=str(home / "lake")),
        "sandbox": SandboxResource(backend_name="bubblewrap"),
        "repos": RepoResource(cache_dir=str(home / "repos")),
    }
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        add_partitions(instance, "commits", comparison_commit_keys(req))
        add_partitions(instance, "comparisons", [req.key])

        def requested() -> list[dg.RunRequest]:
            result = sampling_sensor(dg.build_sensor_context(instance=instance, resources=resources))
            return list(result.run_requests or [])

        (first,) = requested()
        worker = subprocess.Popen(
            [sys.executable, "-c", RUN_ONE, str(home), req.key, first.run_key or "", repr(first.tags)],
            env={**os.environ, "EVALRUNNER_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        try:

            def worker_run() -> dg.DagsterRun | None:
                runs = instance.get_runs(filters=dg.RunsFilter(job_name="comparison_job"))
                return runs[0] if runs and WORKER_PID_TAG in runs[0].tags else None

            run = wait_for(worker_run, TIMEOUT, "the comparison's run worker recorded")
            assert int(run.tags[WORKER_PID_TAG]) == worker.pid
            assert run.status == dg.DagsterRunStatus.STARTED
            # A live worker is left alone, and the sensor asks for nothing meanwhile.
            log = ListLog()
            assert reap(instance, log) == [] and f"pid {worker.pid} (run tags) is alive" in log.lines[0]
            assert requested() == []
            worker.send_signal(signal.SIGKILL)
            # Its parent (this test) lives and does not reap it: the first tick leaves the run to
            # that parent (a code server would fail it itself), a tick past the grace fails it,
            # saying how the worker died.
            wait_for(lambda: (ProcTable().lookup(worker.pid) or ProcessInfo(None, True)).zombie, 60, "a zombie")
            awaiting: dict[str, float] = {}
            log = ListLog()
            found_at = time.time()
            assert reap(instance, log, now=found_at, awaiting=awaiting) == []
            assert awaiting == {run.run_id: found_at} and "left to its launcher" in log.lines[0], log.lines
            assert reap(instance, ListLog(), now=found_at + LAUNCHER_GRACE_S / 2, awaiting=awaiting) == []
            log = ListLog()
            assert reap(instance, log, now=found_at + LAUNCHER_GRACE_S, awaiting=awaiting) == [run.run_id]
            assert awaiting == {}
        finally:
            if worker.poll() is None:
                worker.kill()
            worker.wait(timeout=TIMEOUT)
        assert worker.returncode == -signal.SIGKILL
        after = instance.get_run_by_id(run.run_id)
        assert after is not None and after.status == dg.DagsterRunStatus.FAILURE
        message = failure_message(instance, run.run_id)
        assert (
            f"pid {worker.pid} on {this_host()} is gone (it was terminated by signal 9 (SIGKILL), "
            "a zombie awaiting its parent)" in message
        ), message
        assert "the sampling sensor requests the comparison's next run" in message and log.lines == [message]
        # The lease its worker held is stale (its process is gone): the sensor resumes it.
        (resume,) = requested()
        assert resume.partition_key == req.key and resume.run_key != first.run_key
        result = defs.resolve_job_def("comparison_job").execute_in_process(
            instance=instance,
            partition_key=req.key,
            tags={**resume.tags, "dagster/run_key": resume.run_key or ""},
            resources={**resources, "github": GitHubResource()},
            raise_on_error=False,
        )
        assert result.success

        saved = load_result(the_lake, req.repo, req.pr, req.head_sha)
        assert saved is not None and saved.status in ("complete", "budget_spent"), saved
        assert requested() == []


# The comparison's run worker: comparison_job executed in this process, as the sensor asked.
RUN_ONE = """
import sys, ast
import dagster as dg
from evalrunner_assets.definitions import defs
home, key, run_key, tags = sys.argv[1], sys.argv[2], sys.argv[3], ast.literal_eval(sys.argv[4])
with dg.DagsterInstance.get() as instance:
    defs.resolve_job_def("comparison_job").execute_in_process(
        instance=instance, partition_key=key, tags={**tags, "dagster/run_key": run_key}, raise_on_error=False
    )
"""
