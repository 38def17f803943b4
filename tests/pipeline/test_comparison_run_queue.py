"""Runs that write one head's comparison document and check run are serialised by Dagster's
run queue (issue: an overlapping older run must not leave its verdict on the PR last).

The instance configs are loaded by Dagster itself (``InstanceRef.from_dir`` builds the run
coordinator), and the run requests come from the sensors' own code paths.
"""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
import pytest

from evalrunner_assets import home
from evalrunner_assets.jobs import REPORT_LOCK_TAG, comparison_job, comparison_run_request, comparison_run_tags

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
KEY = "octo/agent#7@" + "a" * 40


def _one_per_comparison(limits) -> bool:
    return any(
        limit["key"] == REPORT_LOCK_TAG
        and limit["limit"] == 1
        and (limit.get("value") or {}).get("applyLimitPerUniqueValue") is True
        for limit in limits
    )


def test_a_new_local_instance_queues_runs_one_report_per_head_and_one_run_per_core(tmp_path, monkeypatch):
    from dagster._core.instance.ref import InstanceRef
    from dagster._core.run_coordinator import QueuedRunCoordinator

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    path = home.ensure_dagster_home()
    coordinator = InstanceRef.from_dir(str(path)).run_coordinator  # built by Dagster from the file
    assert isinstance(coordinator, QueuedRunCoordinator)
    queue = coordinator.get_run_queue_config()
    assert queue.max_concurrent_runs == (os.cpu_count() or 1)
    assert _one_per_comparison(queue.tag_concurrency_limits)


def test_the_file_an_earlier_version_wrote_is_upgraded(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    earlier = "# The Dagster instance evalrunner's command line records its runs in (SQLite storage here).\n"
    (tmp_path / "dagster.yaml").write_text(earlier + "telemetry:\n  enabled: false\n")
    home.ensure_dagster_home()
    assert REPORT_LOCK_TAG in (tmp_path / "dagster.yaml").read_text()


def test_an_existing_dagster_yaml_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    (tmp_path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    home.ensure_dagster_home()
    assert (tmp_path / "dagster.yaml").read_text() == "telemetry:\n  enabled: false\n"


@pytest.mark.parametrize("env", [{"DAGSTER_PG_HOST": "pg", "DAGSTER_PG_USER": "u", "DAGSTER_PG_DB": "d"}])
def test_the_deployed_instance_serialises_reports_per_head_too(tmp_path, monkeypatch, env):
    from dagster._core.instance.ref import InstanceRef

    for name, value in {**env, "DAGSTER_PG_PASSWORD": "p"}.items():
        monkeypatch.setenv(name, value)
    queue = InstanceRef.from_dir(str(tmp_path), config_dir=str(DEPLOY)).run_coordinator.get_run_queue_config()
    assert _one_per_comparison(queue.tag_concurrency_limits)


def test_every_comparison_run_the_sensors_request_carries_the_head_tag():
    # The PR sensor and the sampling sensor both build their requests with this function.
    request = comparison_run_request(KEY, f"evaluate:{KEY}:running:64:256")
    assert (request.job_name, request.partition_key) == (comparison_job.name, KEY)
    assert request.tags[REPORT_LOCK_TAG] == KEY


def test_a_new_local_instance_starts_a_queued_run_within_a_second(tmp_path, monkeypatch):
    from dagster._core.instance.ref import InstanceRef

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    coordinator = InstanceRef.from_dir(str(home.ensure_dagster_home())).run_coordinator
    assert coordinator.dequeue_interval_seconds == 1


def test_the_file_the_previous_version_wrote_is_upgraded(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    previous = home.new_dagster_yaml().replace("    dequeue_interval_seconds: 1\n", "")
    (tmp_path / "dagster.yaml").write_text(previous)
    home.ensure_dagster_home()
    assert (tmp_path / "dagster.yaml").read_text() == home.new_dagster_yaml()


def test_dagster_accepts_the_tags_on_a_run():
    # Dagster validates a run's tags when the run is created: the key (with '#' and '@') passes.
    @dg.op
    def noop() -> None:
        pass

    @dg.job
    def one_op() -> None:
        noop()

    with dg.DagsterInstance.ephemeral() as instance:
        run = instance.create_run_for_job(one_op, tags=comparison_run_tags(KEY))
        assert instance.get_run_by_id(run.run_id).tags[REPORT_LOCK_TAG] == KEY
