"""deploy/dagster.yaml loaded by the libraries that consume it, with the environment the
deployment gives the pods (the evalrunner-env ConfigMap plus the Postgres password Secret).

- The whole file goes through Dagster's own instance loading (``InstanceRef.from_dir``: the
  instance schema, the storage/coordinator/launcher split), then every configurable class is
  imported and its config processed by its own ``config_type`` -- the steps of
  ``ConfigurableClassData.rehydrate``. The run coordinator is built for real.
- The run launcher is built for real too (``K8sRunLauncher``), but from a kubeconfig instead of
  the in-cluster service account (no cluster here): the same config with
  ``load_incluster_config: false`` and ``kubeconfig_file`` pointing at a loopback stand-in.
- The Postgres storage is not connected (no Postgres here): its config is processed by
  ``DagsterPostgresStorage.config_type()`` with the environment resolved, and the connection URL
  built from it by dagster-postgres is checked against the ConfigMap's values.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def configmap_env() -> dict[str, str]:
    docs = yaml.safe_load_all((DEPLOY / "k8s" / "40-lake-and-config.yaml").read_text())
    return next(d for d in docs if d and d["kind"] == "ConfigMap" and d["metadata"]["name"] == "evalrunner-env")["data"]


@pytest.fixture
def deployed_env(monkeypatch):
    """The environment of a pod with envFrom evalrunner-env and DAGSTER_PG_PASSWORD from the Secret."""
    for name, value in configmap_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "from-the-evalrunner-postgresql-secret")


def instance_ref(tmp_path):
    from dagster._core.instance.ref import InstanceRef

    return InstanceRef.from_dir(str(tmp_path), config_dir=str(DEPLOY))


def process(data, config: dict | None = None):
    """``ConfigurableClassData.rehydrate`` up to (not including) construction."""
    import importlib

    from dagster._config import process_config, resolve_to_config_type

    klass = getattr(importlib.import_module(data.module_name), data.class_name)
    result = process_config(
        resolve_to_config_type(klass.config_type()), config if config is not None else data.config_dict
    )
    assert result.success, result.errors
    return klass, result.value


def test_dagster_yaml_loads_as_a_dagster_instance_with_the_deployed_environment(deployed_env, tmp_path):
    from dagster._core.run_coordinator import QueuedRunCoordinator

    ref = instance_ref(tmp_path)
    coordinator = ref.run_coordinator  # imported and constructed by Dagster itself
    assert isinstance(coordinator, QueuedRunCoordinator)
    assert coordinator.get_run_queue_config().max_concurrent_runs == 20
    assert ref.settings["telemetry"]["enabled"] is False


def test_run_launcher_is_built_by_dagster_k8s_from_the_same_config(deployed_env, tmp_path):
    from dagster._serdes import ConfigurableClassData
    from dagster_k8s import K8sRunLauncher

    from tests.helpers.k8s_standin import KubernetesStandIn

    data = instance_ref(tmp_path).run_launcher_data
    klass, value = process(data)
    assert klass is K8sRunLauncher and value["load_incluster_config"] is True
    standin = KubernetesStandIn()
    standin.start()
    try:
        kubeconfig = standin.write_kubeconfig(tmp_path / "kubeconfig")
        outside = {**data.config_dict, "load_incluster_config": False, "kubeconfig_file": str(kubeconfig)}
        launcher = ConfigurableClassData(data.module_name, data.class_name, yaml.safe_dump(outside)).rehydrate()
    finally:
        standin.stop()
    assert isinstance(launcher, K8sRunLauncher)
    assert launcher.instance_config_map == "dagster-instance"
    assert launcher.postgres_password_secret == "evalrunner-postgresql"
    assert launcher.job_namespace == "evalrunner"
    assert list(launcher.env_config_maps) == ["evalrunner-env"]
    assert list(launcher.env_secrets) == ["evalrunner-github-app"]
    # Dagster's run monitoring (enabled in the same file) can check this launcher's run workers.
    assert launcher.supports_check_run_worker_health


def test_run_monitoring_is_on_and_leaves_relaunching_to_evalrunners_sensors(deployed_env, tmp_path):
    """The file's run_monitoring, read by a Dagster instance (SQLite here, not Postgres): a run
    whose Job died is failed by the daemon, which resumes nothing itself."""
    import dagster as dg

    settings = instance_ref(tmp_path).settings["run_monitoring"]
    with dg.instance_for_test(overrides={"run_monitoring": settings}) as instance:
        assert instance.run_monitoring_enabled
        assert instance.run_monitoring_max_resume_run_attempts == 0
        assert instance.run_monitoring_start_timeout_seconds == 300
        assert instance.run_monitoring_cancel_timeout_seconds == 300
        assert instance.run_monitoring_poll_interval_seconds == 60


def test_postgres_storage_config_resolves_from_the_configmap_and_secret(deployed_env, tmp_path):
    from dagster_postgres import DagsterPostgresStorage
    from dagster_postgres.utils import pg_url_from_config

    klass, value = process(instance_ref(tmp_path).storage_data)
    assert klass is DagsterPostgresStorage
    url = pg_url_from_config(value)
    env = configmap_env()
    assert (
        url
        == f"postgresql://{env['DAGSTER_PG_USER']}:from-the-evalrunner-postgresql-secret@{env['DAGSTER_PG_HOST']}:5432/{env['DAGSTER_PG_DB']}"
    )


def test_without_the_deployed_environment_the_storage_config_is_refused(monkeypatch, tmp_path):
    from dagster._config import process_config, resolve_to_config_type
    from dagster_postgres import DagsterPostgresStorage

    for name in ("DAGSTER_PG_HOST", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD", "DAGSTER_PG_DB"):
        monkeypatch.delenv(name, raising=False)
    data = instance_ref(tmp_path).storage_data
    result = process_config(resolve_to_config_type(DagsterPostgresStorage.config_type()), data.config_dict)
    assert not result.success
    assert "DAGSTER_PG_HOST" in str(result.errors)


def test_a_module_dagster_cannot_import_fails_this_loading(tmp_path, monkeypatch):
    text = (
        (DEPLOY / "dagster.yaml")
        .read_text()
        .replace("module: dagster._core.run_coordinator", "module: dagster_k8s.run_coordinators")
    )
    (tmp_path / "dagster.yaml").write_text(text)
    from dagster._core.instance.ref import InstanceRef

    for name, value in configmap_env().items():
        monkeypatch.setenv(name, value)
    ref = InstanceRef.from_dir(str(tmp_path))
    with pytest.raises(Exception, match="Couldn.t import module dagster_k8s.run_coordinators"):
        ref.run_coordinator  # noqa: B018


def test_the_legacy_dagster_core_module_name_is_mapped_by_dagster_itself():
    """``dagster.core.run_coordinator`` (what the chart's instance template writes) cannot be
    imported directly in dagster 1.13, but Dagster's instance loading rewrites ``dagster.core``
    to ``dagster._core`` before importing; deploy/dagster.yaml names the module that imports
    either way."""
    import importlib

    from dagster._serdes import ConfigurableClassData

    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("dagster.core.run_coordinator")
    data = ConfigurableClassData("dagster.core.run_coordinator", "QueuedRunCoordinator", "{}")
    assert data.module_name == "dagster._core.run_coordinator"
    assert "module: dagster._core.run_coordinator" in (DEPLOY / "dagster.yaml").read_text()
