"""The sandbox settings a deployment sets through its environment, each defined once.

Every setting has one name, type, default, environment variable and help text here. The
Kubernetes backend's configuration (``KubernetesSandboxConfig`` in ``kubernetes/config.py``) takes
its defaults and descriptions from these, the Dagster resource (``resources/sandbox.py``) its
fields and its environment mapping, and the CLI its choices, defaults and help. The deploy
files (``deploy/k8s/40-lake-and-config.yaml``) are checked against them by
``tests/execution/test_sandbox_settings.py``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The backends by name (backends.make_backend builds them); this module imports nothing else of
# the package, so every module may read the settings.
DEFAULT_BACKEND = "bubblewrap"
BACKENDS = ("bubblewrap", "unsafe-local", "kubernetes")


@dataclass(frozen=True)
class SandboxSetting:
    """One setting. ``default`` None means unset (the backend's own behaviour: the cluster's
    default StorageClass, no model egress, ...); the resource spells an unset string ``""``.
    ``config_field`` is the ``KubernetesSandboxConfig`` field it sets (None: not a backend
    option); ``resource_field`` the ``SandboxResource`` field; ``choices`` what the CLI offers
    (the backend's name is checked when the backend is made, not when it is read)."""

    name: str
    type: type
    default: Any
    env: str
    help: str
    resource_field: str
    config_field: str | None = None
    choices: tuple[str, ...] = ()

    def parse(self, value: str) -> Any:
        """``value`` (an environment variable's text) as this setting's type; raises
        ValueError naming the variable."""
        if self.type is int:
            try:
                return int(value)
            except ValueError:
                raise ValueError(f"environment variable {self.env}={value!r} is not an integer") from None
        if self.type is float:
            try:
                return float(value)
            except ValueError:
                raise ValueError(f"environment variable {self.env}={value!r} is not a number") from None
        return value

    @property
    def resource_default(self) -> Any:
        """The ``SandboxResource`` field's default: an unset string is ``""`` there."""
        return "" if self.default is None and self.type is str else self.default


BACKEND = SandboxSetting(
    name="backend",
    type=str,
    default=DEFAULT_BACKEND,
    env="EVALRUNNER_SANDBOX_BACKEND",
    help="sandbox backend (unsafe-local has no isolation and is refused under CI)",
    resource_field="backend_name",
    choices=BACKENDS,
)
NAMESPACE = SandboxSetting(
    name="namespace",
    type=str,
    default="evalrunner-sandbox",
    env="EVALRUNNER_SANDBOX_NAMESPACE",
    help="Dedicated namespace for sandbox pods (PSA restricted, deny-all network).",
    resource_field="k8s_namespace",
    config_field="namespace",
)
IMAGE = SandboxSetting(
    name="image",
    type=str,
    default=None,  # required by the Kubernetes backend
    env="EVALRUNNER_SANDBOX_IMAGE",
    help="Sandbox image; pin it by digest (repo@sha256:...) so the runtime digest means something.",
    resource_field="k8s_image",
    config_field="image",
)
MAX_CONCURRENT_PODS = SandboxSetting(
    name="max_concurrent_pods",
    type=int,
    default=8,
    env="EVALRUNNER_SANDBOX_MAX_CONCURRENT_PODS",
    help="Pods this controller process runs at once (and a run's sandboxes at once on Kubernetes); "
    "the namespace ResourceQuota caps the cluster.",
    resource_field="k8s_max_concurrent_pods",
    config_field="max_concurrent_pods",
)
MODEL_EGRESS_CIDR = SandboxSetting(
    name="model_egress_cidr",
    type=str,
    default=None,
    env="EVALRUNNER_MODEL_EGRESS_CIDR",
    help="CIDR of the model endpoint the model-egress NetworkPolicy allows (must match deploy/k8s).",
    resource_field="k8s_model_egress_cidr",
    config_field="model_egress_cidr",
)
MODEL_EGRESS_PORT = SandboxSetting(
    name="model_egress_port",
    type=int,
    default=443,  # given to the backend only with a CIDR; the backend's own field has no default
    env="EVALRUNNER_MODEL_EGRESS_PORT",
    help="TCP port of the model endpoint.",
    resource_field="k8s_model_egress_port",
    config_field="model_egress_port",
)
ENV_STORAGE_CLASS = SandboxSetting(
    name="env_storage_class",
    type=str,
    default=None,
    env="EVALRUNNER_SANDBOX_ENV_STORAGE_CLASS",
    help="StorageClass of environment claims; it must offer ReadWriteOnce and ReadOnlyMany "
    "(e.g. a Filestore/NFS class). None: the cluster default.",
    resource_field="k8s_env_storage_class",
    config_field="env_storage_class",
)
PACKAGE_INDEX_PROXY = SandboxSetting(
    name="package_index_proxy",
    type=str,
    default=None,
    env="EVALRUNNER_PACKAGE_INDEX_PROXY",
    help="http://host:port of the allow-listing proxy in front of the package index that environment "
    "build pods use (the package-index NetworkPolicy admits only it).",
    resource_field="k8s_package_index_proxy",
    config_field="package_index_proxy",
)
ENV_RETAIN_DAYS = SandboxSetting(
    name="env_retain_days",
    type=float,
    default=14.0,
    env="EVALRUNNER_SANDBOX_ENV_RETAIN_DAYS",
    help="Days an environment claim no pod has mounted is kept; the retention sweep then deletes it "
    "(it is rebuilt on its next use). 0: never deleted.",
    resource_field="k8s_env_retain_days",
    config_field="env_retain_days",
)

SETTINGS: tuple[SandboxSetting, ...] = (
    BACKEND,
    NAMESPACE,
    IMAGE,
    MAX_CONCURRENT_PODS,
    MODEL_EGRESS_CIDR,
    MODEL_EGRESS_PORT,
    ENV_STORAGE_CLASS,
    PACKAGE_INDEX_PROXY,
    ENV_RETAIN_DAYS,
)
BY_ENV: dict[str, SandboxSetting] = {s.env: s for s in SETTINGS}


def settings_from_env(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The ``SandboxResource`` fields the environment sets (default ``os.environ``), parsed to
    their types; unset or empty variables are left out (their defaults hold)."""
    env = os.environ if env is None else env
    fields: dict[str, Any] = {}
    for setting in SETTINGS:
        value = env.get(setting.env)
        if value is None or value == "":
            continue
        fields[setting.resource_field] = setting.parse(value)
    return fields
