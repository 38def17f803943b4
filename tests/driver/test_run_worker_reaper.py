"""The run-worker reaper sensor on a real Dagster instance (no daemon): which launcher it acts
on, and how a run Dagster's run monitoring failed on Kubernetes reaches ``swe_run_sensor``.
No cluster here: the monitoring daemon's failure is written as that daemon writes it (its text,
dagster/_daemon/monitoring/run_monitoring.py), named as such in the test."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import dagster as dg

from evalrunner_assets.jobs import SWE_RUN_TAG, swe_run_key
from evalrunner_assets.pipeline.run_workers import (
    LAUNCHER_PID_TAG,
    LAUNCHER_STARTED_TAG,
    WORKER_LOST_TAG,
    WORKER_PID_TAG,
    WORKER_STARTED_TAG,
    worker_tags,
)
from evalrunner_assets.swe import RunSpec, SweStore
from lake import open_lake
from resources import LakeResource
from sensors.run_workers import LAUNCHER_GRACE_S, run_worker_reaper
from sensors.swe import MAX_WORKER_LOSS_RELAUNCHES, swe_run_sensor

K8S_LAUNCHER = {
    "module": "dagster_k8s",
    "class": "K8sRunLauncher",
    "config": {"job_namespace": "evalrunner", "instance_config_map": "dagster-instance", "load_incluster_config": True},
}


def _swe_run(instance: dg.DagsterInstance, run_id: str, key: str, tags: dict[str, str] | None = None) -> dg.DagsterRun:
    from dagster._core.test_utils import create_run_for_test

    return create_run_for_test(
        instance,
        job_name="swe_run_job",
        status=dg.DagsterRunStatus.STARTED,
        tags={SWE_RUN_TAG: run_id, "dagster/run_key": key, **(tags or {})},
    )


def _submitted_swe_run(tmp_path) -> tuple[SweStore, str, dict[str, LakeResource]]:
    """A SWE run submitted to a lake under ``tmp_path``: (its store, its id, the sensors' resources)."""
    store = SweStore(open_lake(str(tmp_path / "lake")))
    record, _ = store.save_run(RunSpec(agent_version="better", task_set="tinystats-bugs", budget_usd=1.0))
    return store, record["id"], {"lake": LakeResource(root=str(tmp_path / "lake"))}


def _dead_worker_tags(launcher: bool = False) -> dict[str, str]:
    """Tags naming a killed (and reaped) worker; with ``launcher``, naming this test's process,
    alive, as the process that started it (as a code server is for the runs it launches)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    tags = {**worker_tags(), WORKER_PID_TAG: str(proc.pid)}
    tags.pop(WORKER_STARTED_TAG)
    tags.pop(LAUNCHER_PID_TAG, None)
    tags.pop(LAUNCHER_STARTED_TAG, None)
    if launcher:
        tags[LAUNCHER_PID_TAG] = str(os.getpid())
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=300)
    return tags


def test_a_dead_worker_whose_launcher_lives_is_left_to_it_for_the_grace_then_failed(tmp_path) -> None:
    """Dagster's code server fails a run whose worker it saw die; the reaper failing it as well
    would report one death twice. So the first tick that finds the worker dead remembers it in
    the cursor and leaves the run; a tick past ``LAUNCHER_GRACE_S`` fails it once."""
    store, run_id, lake = _submitted_swe_run(tmp_path)
    with dg.instance_for_test() as instance:
        run = _swe_run(instance, run_id, run_id, _dead_worker_tags(launcher=True))
        context = dg.build_sensor_context(instance=instance)
        skip = str(run_worker_reaper(context).skip_message)
        assert f"left 1 run(s) whose run worker is gone to the live process that started it: {run.run_id}" in skip
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED
        cursor = json.loads(context.cursor or "")
        found_at = cursor["awaiting"][run.run_id]
        # The next tick, as soon as the grace has passed (the cursor aged instead of waiting).
        aged = {**cursor, "awaiting": {run.run_id: found_at - LAUNCHER_GRACE_S}}
        context = dg.build_sensor_context(instance=instance, cursor=json.dumps(aged))
        skip = str(run_worker_reaper(context).skip_message)
        assert f"marked 1 run(s) failed whose run worker was gone: {run.run_id}" in skip, skip
        assert json.loads(context.cursor or "")["awaiting"] == {}
        (failure,) = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
        assert f"swe_run_sensor relaunches SWE run {run_id}" in (failure.message or "")


def test_a_launcher_that_fails_the_run_itself_leaves_one_failure_explained(tmp_path) -> None:
    """Within the grace the launcher (here: this test, as Dagster's code server does) fails the
    run, with the code server's words; the next tick only explains it, and fails nothing."""
    store, run_id, lake = _submitted_swe_run(tmp_path)
    with dg.instance_for_test() as instance:
        run = _swe_run(instance, run_id, run_id, _dead_worker_tags(launcher=True))
        context = dg.build_sensor_context(instance=instance)
        run_worker_reaper(context)
        pid = run.tags[WORKER_PID_TAG]
        instance.report_engine_event(
            f"[DagsterApiServer] Run execution process for {run.run_id} was terminated by signal 9 (SIGKILL).", run
        )
        instance.report_run_failed(run, "This run has been marked as failed from outside the execution context.")
        cursor = json.loads(context.cursor or "")
        aged = {**cursor, "awaiting": {k: v - LAUNCHER_GRACE_S for k, v in cursor["awaiting"].items()}}
        context = dg.build_sensor_context(instance=instance, cursor=json.dumps(aged))
        skip = str(run_worker_reaper(context).skip_message)
        assert "marked" not in skip and f"explained 1 run(s) failed when their worker died: {run.run_id}" in skip
        assert len(instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)) == 1
        said = [e.message or "" for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)]
        assert any(f"lost its run worker: pid {pid}" in m and "was terminated by signal 9 (SIGKILL)" in m for m in said)
        assert json.loads(context.cursor or "")["awaiting"] == {}


def test_the_reaper_reads_the_bare_timestamp_cursor_of_earlier_versions() -> None:
    from sensors.run_workers import read_cursor, write_cursor

    assert read_cursor("1764000000.125") == (1764000000.125, {})
    assert read_cursor(write_cursor(5.0, {"r": 2.0})) == (5.0, {"r": 2.0})
    assert read_cursor("not json") == (None, {}) and read_cursor(None) == (None, {})


def test_on_a_local_instance_a_dead_workers_run_is_failed_and_the_swe_sensor_relaunches_it(tmp_path) -> None:
    store, run_id, lake = _submitted_swe_run(tmp_path)
    with dg.instance_for_test() as instance:
        dead = _swe_run(instance, run_id, run_id, _dead_worker_tags())
        alive = _swe_run(instance, "r-other", "r-other", worker_tags())  # this test's own process
        skip = run_worker_reaper(dg.build_sensor_context(instance=instance))
        assert f"marked 1 run(s) failed whose run worker was gone: {dead.run_id}" in str(skip.skip_message)
        assert instance.get_run_by_id(dead.run_id).status == dg.DagsterRunStatus.FAILURE
        assert instance.get_run_by_id(alive.run_id).status == dg.DagsterRunStatus.STARTED
        (failure,) = instance.all_logs(dead.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
        assert f"swe_run_sensor relaunches SWE run {run_id} as {swe_run_key(run_id, 1)}" in (failure.message or "")
        result = swe_run_sensor(dg.build_sensor_context(instance=instance, resources=lake))
        assert [r.run_key for r in result.run_requests or []] == [f"{run_id}:launch-1"]


def test_on_kubernetes_the_reaper_leaves_runs_to_run_monitoring_and_tags_what_it_failed_mocked_cluster(
    tmp_path,
) -> None:
    store, run_id, lake = _submitted_swe_run(tmp_path)
    with dg.instance_for_test(overrides={"run_launcher": K8S_LAUNCHER}) as instance:
        # A STARTED run whose recorded worker is gone from this host: not judged on this launcher.
        under_way = _swe_run(instance, "r-other", "r-other", _dead_worker_tags())
        # What Dagster's run monitoring writes when the launcher's health check finds a Job failed.
        pod_died = _swe_run(instance, run_id, run_id)
        instance.report_run_failed(
            pod_died,
            f"Detected run worker status CheckRunHealthResult(status=<WorkerStatus.FAILED: 'FAILED'>, "
            f"msg='Run failed: pod OOMKilled'). Marking run {pod_died.run_id} as failed.",
        )
        skip = str(run_worker_reaper(dg.build_sensor_context(instance=instance)).skip_message)
        assert "the run launcher is K8sRunLauncher, not the DefaultRunLauncher" in skip, skip
        assert f"explained 1 run(s) failed when their worker died: {pod_died.run_id}" in skip, skip
        assert instance.get_run_by_id(under_way.run_id).status == dg.DagsterRunStatus.STARTED
        assert instance.get_run_by_id(pod_died.run_id).tags[WORKER_LOST_TAG] == "true"
        said = [e.message or "" for e in instance.all_logs(pod_died.run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)]
        assert any("was found dead by Dagster's run monitoring" in m and f"{run_id}:launch-1" in m for m in said)
        # The next tick explains nothing again; swe_run_sensor relaunches it once.
        assert "explained" not in str(run_worker_reaper(dg.build_sensor_context(instance=instance)).skip_message)
        result = swe_run_sensor(dg.build_sensor_context(instance=instance, resources=lake))
        assert [r.run_key for r in result.run_requests or []] == [f"{run_id}:launch-1"]


def test_a_swe_run_that_keeps_losing_its_worker_is_relaunched_at_most_twice(tmp_path) -> None:
    store, run_id, lake = _submitted_swe_run(tmp_path)
    with dg.instance_for_test() as instance:
        for launch in range(MAX_WORKER_LOSS_RELAUNCHES + 1):
            run = _swe_run(instance, run_id, swe_run_key(run_id, launch), _dead_worker_tags())
            run_worker_reaper(dg.build_sensor_context(instance=instance))
            (failure,) = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
            requests = swe_run_sensor(dg.build_sensor_context(instance=instance, resources=lake)).run_requests or []
            if launch < MAX_WORKER_LOSS_RELAUNCHES:
                assert [r.run_key for r in requests] == [swe_run_key(run_id, launch + 1)]
                store.dequeue_run(run_id)  # as once its run exists
            else:
                assert requests == []
                assert "lost its run worker 3 times and is not relaunched again" in (failure.message or "")
