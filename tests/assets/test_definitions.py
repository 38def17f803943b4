"""The Dagster code location loads: every asset, check, job, sensor and resource resolves."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from evalrunner_assets.definitions import defs

PIPELINE_ASSETS = {
    "eval_manifest",
    "task_samples",
    "sample_scores",
    "trajectories",
    "baselines",
    "comparison",
    "pr_report",
}
# The design card's nouns, each an asset: (asset, what it is downstream of).
CARD_NOUNS = {
    "sample_scores": {"task_samples"},
    "trajectories": {"task_samples"},
    "baselines": {"task_samples"},
    "comparison": {"task_samples", "baselines"},
    "pr_report": {"comparison"},
    "cohort_series": set(),
    "candidate_measurements": set(),
    "continuum_frontier": {"candidate_measurements"},
}
PIPELINE_JOBS = {"eval_manifest_job", "task_samples_job", "comparison_job"}
SENSORS = {"pr_sensor", "sampling_sensor", "swe_run_sensor", "run_worker_reaper"}


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
    # API-submitted SWE runs go through the daemon's run queue, launched by this sensor.
    swe = repo.get_sensor_def("swe_run_sensor")
    assert {t.job_name for t in swe.targets} == {"swe_run_job"}
    assert swe.default_status == dg.DefaultSensorStatus.RUNNING
    # Runs whose run worker died are failed (a local instance) and tagged, by default.
    reaper = repo.get_sensor_def("run_worker_reaper")
    assert not reaper.targets and reaper.default_status == dg.DefaultSensorStatus.RUNNING


def test_every_sensor_and_schedule_says_what_it_does() -> None:
    # The UI's Automation page shows the description; without one a sensor is just a name.
    for definition in [*defs.sensors, *defs.schedules]:
        assert definition.description and len(definition.description) > 40, definition.name


def test_task_samples_declares_its_data_quality_checks() -> None:
    repo = defs.get_repository_def()
    checks = {k.name for k in repo.asset_graph.asset_check_keys if k.asset_key == dg.AssetKey("task_samples")}
    assert {"reproducibility_fields_present", "no_error_logs"} <= checks


@pytest.mark.slow
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


def test_the_card_nouns_are_assets_in_the_lineage() -> None:
    graph = defs.get_repository_def().asset_graph
    for noun, upstream in CARD_NOUNS.items():
        node = graph.get(dg.AssetKey(noun))
        assert {k.to_user_string() for k in node.parent_keys} >= upstream, noun


def test_every_asset_says_what_it_is_who_owns_it_and_which_noun_it_is() -> None:
    graph = defs.get_repository_def().asset_graph
    for key in graph.get_all_asset_keys():
        spec = graph.get(key)
        name = key.to_user_string()
        assert spec.description and len(spec.description) > 40, name
        assert spec.group_name and spec.group_name != "default", name
        assert spec.kinds, name
        assert spec.owners == ["team:evals"], name
        assert spec.tags.get("evalrunner/noun"), name


def test_materializing_from_the_ui_needs_no_run_config() -> None:
    """Every job's run config has defaults for everything (the lake supplies the rest), as the
    UI's Materialize and Backfill buttons launch them with none."""
    names = [j.name for j in defs.get_repository_def().get_all_jobs() if not j.name.startswith("__")]
    assert set(names) >= PIPELINE_JOBS
    for name in names:
        dg.validate_run_config(defs.get_job_def(name), {})  # raises naming the missing field


@pytest.mark.slow
def test_assets_that_run_sandboxes_show_the_configured_backend_as_their_kind():
    import subprocess
    import sys

    probe = (
        "from evalrunner_assets.definitions import defs\n"
        "import dagster as dg\n"
        "for key in ('eval_manifest', 'swe_attempts', 'swe_gold_check'):\n"
        "    spec = next(iter(defs.resolve_assets_def(dg.AssetKey(key)).specs))\n"
        "    print(key, sorted(spec.kinds))\n"
    )
    for backend in ("kubernetes", None):
        env = {k: v for k, v in os.environ.items() if k != "EVALRUNNER_SANDBOX_BACKEND"}
        if backend:
            env["EVALRUNNER_SANDBOX_BACKEND"] = backend
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout
        lines = out.strip().splitlines()
        assert len(lines) == 3, out
        assert all((backend or "bubblewrap") in line for line in lines), out
