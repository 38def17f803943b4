"""The Dagster code location loads: every asset, check, job, sensor and resource resolves."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg

from evalrunner_assets.definitions import defs

PIPELINE_ASSETS = {"eval_manifest", "task_samples", "comparison", "pr_report"}
PIPELINE_JOBS = {"eval_manifest_job", "task_samples_job", "comparison_job"}
SENSORS = {"pr_sensor", "sampling_sensor"}


def test_definitions_resolve_every_asset_job_and_sensor() -> None:
    repo = defs.get_repository_def()  # resolves assets, jobs, sensors and resource bindings
    asset_keys = {k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()}
    assert PIPELINE_ASSETS <= asset_keys
    assert PIPELINE_JOBS <= {j.name for j in repo.get_all_jobs()}
    assert SENSORS <= {s.name for s in repo.sensor_defs}
    for name in PIPELINE_JOBS:
        assert defs.get_job_def(name).name == name
    assert set(defs.resources) >= {"lake", "sandbox", "repos", "github"}


def test_sensors_target_the_pipeline_jobs() -> None:
    repo = defs.get_repository_def()
    sampling = repo.get_sensor_def("sampling_sensor")
    # One run per comparison: the comparison asset drives the engine over all its windows.
    assert {t.job_name for t in sampling.targets} == {"comparison_job"}
    assert sampling.default_status == dg.DefaultSensorStatus.RUNNING


def test_task_samples_declares_its_data_quality_checks() -> None:
    repo = defs.get_repository_def()
    checks = {k.name for k in repo.asset_graph.asset_check_keys if k.asset_key == dg.AssetKey("task_samples")}
    assert {"reproducibility_fields_present", "no_error_logs"} <= checks


def test_dagster_cli_validates_the_code_location(tmp_path: Path) -> None:
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path), "EVALRUNNER_HOME": str(tmp_path / "home")}
    dagster = Path(sys.executable).with_name("dagster")
    proc = subprocess.run(
        [str(dagster), "definitions", "validate", "-m", "evalrunner_assets.definitions"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Validation successful" in proc.stdout + proc.stderr
