"""Which runs under way have lost their run worker (``pipeline.run_workers``), against the real
process table of this host: real processes, started and killed with SIGKILL here."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from evalrunner_assets.pipeline.run_workers import (
    LAUNCHER_PID_TAG,
    WORKER_HOST_TAG,
    WORKER_PID_TAG,
    WORKER_STARTED_TAG,
    ProcessInfo,
    ProcTable,
    RunUnderWay,
    WorkerProcess,
    judge_run,
    launcher_from_tags,
    this_host,
    worker_tags,
    workers_from_tags,
)

HOST = this_host()
TIMEOUT = 300.0


def _run(*workers: WorkerProcess, host: str | None = HOST, status: str = "STARTED", since: float | None = None):
    return RunUnderWay("run-1", "swe_run_job", status, since if since is not None else time.time(), host, workers)


def _dead_pid() -> int:
    """The pid of a process that existed and was killed (and reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=TIMEOUT)
    return proc.pid


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield proc
    proc.kill()
    proc.wait(timeout=TIMEOUT)


def test_a_killed_worker_is_dead_and_named() -> None:
    pid = _dead_pid()
    verdict = judge_run(_run(WorkerProcess(pid, "engine event")), ProcTable(), HOST, time.time(), 300)
    assert verdict.dead and verdict.reason == "no such process" and verdict.worker.pid == pid


def test_a_live_worker_is_left_alone(sleeper) -> None:
    table = ProcTable()
    info = table.lookup(sleeper.pid)
    assert info is not None and not info.zombie and info.started_at is not None
    assert abs(info.started_at - time.time()) < 120, info
    worker = WorkerProcess(sleeper.pid, "run tags", started_at=info.started_at)
    verdict = judge_run(_run(worker), table, HOST, time.time(), 300)
    assert not verdict.dead and f"pid {sleeper.pid}" in verdict.reason and "alive" in verdict.reason


def test_a_killed_worker_not_yet_reaped_by_its_parent_is_dead() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        os.kill(proc.pid, signal.SIGKILL)
        # Not waited for: it stays a zombie, which kill(pid, 0) still finds.
        deadline = time.monotonic() + TIMEOUT
        while not (ProcTable().lookup(proc.pid) or ProcessInfo(None, False)).zombie:
            assert time.monotonic() < deadline, "the killed process never became a zombie"
            time.sleep(0.05)
        verdict = judge_run(_run(WorkerProcess(proc.pid, "engine event")), ProcTable(), HOST, time.time(), 300)
        # How it died, in the words Dagster's code server would use had it reaped it first.
        assert (
            verdict.dead and verdict.reason == "it was terminated by signal 9 (SIGKILL), a zombie awaiting its parent"
        )
    finally:
        proc.wait(timeout=TIMEOUT)


def test_a_worker_that_exited_on_its_own_says_with_which_code() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    try:
        deadline = time.monotonic() + TIMEOUT
        while not (ProcTable().lookup(proc.pid) or ProcessInfo(None, False)).zombie:
            assert time.monotonic() < deadline, "the process never became a zombie"
            time.sleep(0.05)
        verdict = judge_run(_run(WorkerProcess(proc.pid, "engine event")), ProcTable(), HOST, time.time(), 300)
        assert verdict.dead and verdict.reason == "it exited with code 3, a zombie awaiting its parent"
    finally:
        proc.wait(timeout=TIMEOUT)


def test_a_pid_reused_by_a_later_process_is_dead(sleeper) -> None:
    table = ProcTable()
    info = table.lookup(sleeper.pid)
    assert info is not None and info.started_at is not None
    # The worker was recorded with another start time / seen before this process existed: the
    # kernel gave its pid to the sleeper afterwards.
    recorded = WorkerProcess(sleeper.pid, "run tags", started_at=info.started_at - 3600)
    verdict = judge_run(_run(recorded), table, HOST, time.time(), 300)
    assert verdict.dead and "another process" in verdict.reason and "time.sleep" in verdict.reason
    seen = WorkerProcess(sleeper.pid, "engine event", seen_at=info.started_at - 3600)
    verdict = judge_run(_run(seen), table, HOST, time.time(), 300)
    assert verdict.dead and "started later" in verdict.reason


def test_a_worker_on_another_host_is_not_judged() -> None:
    pid = _dead_pid()
    verdict = judge_run(_run(WorkerProcess(pid, "run tags"), host="other-host"), ProcTable(), HOST, time.time(), 300)
    assert not verdict.dead and "other-host" in verdict.reason and HOST in verdict.reason


def test_unknown_pid_or_host_is_not_judged() -> None:
    verdict = judge_run(_run(), ProcTable(), HOST, time.time(), 300)
    assert not verdict.dead and verdict.reason == "no worker pid recorded yet"
    pid = _dead_pid()
    verdict = judge_run(_run(WorkerProcess(pid, "engine event"), host=None), ProcTable(), HOST, time.time(), 300)
    assert not verdict.dead and "not recorded" in verdict.reason and str(pid) in verdict.reason


def test_a_run_is_dead_only_when_every_process_it_names_is_gone(sleeper) -> None:
    dead = WorkerProcess(_dead_pid(), "run tags")
    alive = WorkerProcess(sleeper.pid, "engine event")
    verdict = judge_run(_run(dead, alive), ProcTable(), HOST, time.time(), 300)
    assert not verdict.dead and verdict.worker == alive


def test_starting_runs_are_judged_only_past_the_timeout() -> None:
    worker = WorkerProcess(_dead_pid(), "engine event")
    now = time.time()
    early = judge_run(_run(worker, status="STARTING", since=now - 10), ProcTable(), HOST, now, 300)
    assert not early.dead and "starting for 10 s" in early.reason
    late = judge_run(_run(worker, status="STARTING", since=now - 400), ProcTable(), HOST, now, 300)
    assert late.dead


def test_worker_tags_name_this_process_and_read_back() -> None:
    tags = worker_tags()
    assert tags[WORKER_PID_TAG] == str(os.getpid()) and tags[WORKER_HOST_TAG] == HOST
    host, worker = workers_from_tags(tags)
    assert host == HOST and worker is not None and worker.pid == os.getpid()
    # Read back against the process table, this very process is its own live worker.
    assert worker.started_at == pytest.approx(float(tags[WORKER_STARTED_TAG]))
    assert not judge_run(_run(worker), ProcTable(), HOST, time.time(), 300).dead
    assert workers_from_tags({WORKER_PID_TAG: "x"}) == (None, None)


def test_worker_tags_are_hidden_from_the_runs_list_and_older_runs_names_still_read() -> None:
    from dagster._core.storage.tags import TagType, get_tag_type  # the UI's own rule, checked here only

    tags = worker_tags()
    assert all(get_tag_type(tag) == TagType.HIDDEN for tag in tags), tags
    # Runs tagged before the tags were hidden are judged the same.
    legacy = {tag.removeprefix(".dagster/"): value for tag, value in tags.items()}
    assert workers_from_tags(legacy) == workers_from_tags(tags)


def test_a_dead_worker_whose_recorded_launcher_lives_awaits_it(sleeper) -> None:
    """The launcher recorded in the worker's tags (its parent: the code server for a launched
    run) is alive: the run is dead, awaiting that launcher; with the launcher gone too, not."""
    tags = worker_tags()
    assert tags[LAUNCHER_PID_TAG] == str(os.getppid())
    assert launcher_from_tags(tags) is not None and launcher_from_tags({}) is None
    dead = WorkerProcess(_dead_pid(), "run tags")
    alive_launcher = WorkerProcess(sleeper.pid, "launcher tag")
    run = RunUnderWay("run-1", "swe_run_job", "STARTED", time.time(), HOST, (dead,), alive_launcher)
    verdict = judge_run(run, ProcTable(), HOST, time.time(), 300)
    assert verdict.dead and verdict.awaiting_parent and verdict.reason == "no such process"
    gone_launcher = WorkerProcess(_dead_pid(), "launcher tag")
    run = RunUnderWay("run-1", "swe_run_job", "STARTED", time.time(), HOST, (dead,), gone_launcher)
    verdict = judge_run(run, ProcTable(), HOST, time.time(), 300)
    assert verdict.dead and not verdict.awaiting_parent
