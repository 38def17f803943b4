"""The sandbox backend as a Dagster resource: bubblewrap locally, Kubernetes pods at scale.

Switching is configuration only: the same assets call ``backend()`` either way.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import dagster as dg

from evalrunner_assets.execution import sandbox_settings as settings
from evalrunner_assets.execution.backends import default_workers, make_backend
from evalrunner_assets.execution.sandbox import SandboxBackend

if TYPE_CHECKING:  # imported when used: the pool's module loads the warm-session machinery
    from evalrunner_assets.execution.warm_pool import WarmPool

# The environment variables :meth:`SandboxResource.from_env` reads, and the field each sets
# (defined once, with types and defaults, in evalrunner_assets/execution/sandbox_settings.py).
ENV_FIELDS = {s.env: s.resource_field for s in settings.SETTINGS}


def configured_backend_name(env: Mapping[str, str] | None = None) -> str:
    """The sandbox backend this deployment runs (``EVALRUNNER_SANDBOX_BACKEND``, default
    bubblewrap): the kind the UI shows on the assets that run sandboxes."""
    env = os.environ if env is None else env
    return env.get(settings.BACKEND.env) or settings.BACKEND.default


class SandboxResource(dg.ConfigurableResource):
    """``backend``: ``bubblewrap`` (default), ``kubernetes``, or ``unsafe-local`` (no isolation;
    explicit only, refused under CI). The ``k8s_*`` fields configure the Kubernetes backend."""

    # The settings a deployment's environment sets (from_env): defaults from sandbox_settings.py,
    # checked field by field by tests/execution/test_sandbox_settings.py.
    backend_name: str = settings.BACKEND.resource_default
    k8s_namespace: str = settings.NAMESPACE.resource_default
    k8s_image: str = settings.IMAGE.resource_default
    k8s_service_account: str = ""
    k8s_max_concurrent_pods: int = settings.MAX_CONCURRENT_PODS.resource_default
    k8s_in_cluster: bool | None = None
    k8s_kubeconfig: str = ""
    k8s_model_egress_cidr: str = settings.MODEL_EGRESS_CIDR.resource_default
    k8s_model_egress_port: int = settings.MODEL_EGRESS_PORT.resource_default
    # Repository environments on Kubernetes: the StorageClass of their volume claims (it must
    # offer ReadOnlyMany) and the package-index proxy their build pods go through.
    k8s_env_storage_class: str = settings.ENV_STORAGE_CLASS.resource_default
    k8s_package_index_proxy: str = settings.PACKAGE_INDEX_PROXY.resource_default
    # Days an environment claim no pod has mounted is kept (0: never deleted); the sampling
    # sensor's sweep and `evalrunner envs prune` delete older ones.
    k8s_env_retain_days: float = settings.ENV_RETAIN_DAYS.resource_default
    warm_sessions: bool = True
    # Sandboxes running at once for one comparison; 0 means the backend's default: this
    # machine's cores locally, ``k8s_max_concurrent_pods`` (a cluster-wide cap) on Kubernetes.
    max_workers: int = 0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SandboxResource:
        """The resource a deployment configures through its environment (the evalrunner-env
        ConfigMap in deploy/k8s): ``EVALRUNNER_SANDBOX_BACKEND`` (default bubblewrap),
        ``EVALRUNNER_SANDBOX_NAMESPACE``, ``EVALRUNNER_SANDBOX_IMAGE``,
        ``EVALRUNNER_SANDBOX_MAX_CONCURRENT_PODS``, ``EVALRUNNER_MODEL_EGRESS_CIDR``,
        ``EVALRUNNER_MODEL_EGRESS_PORT``, ``EVALRUNNER_SANDBOX_ENV_STORAGE_CLASS``,
        ``EVALRUNNER_PACKAGE_INDEX_PROXY`` and ``EVALRUNNER_SANDBOX_ENV_RETAIN_DAYS``. Unset
        variables keep the defaults."""
        return cls(**settings.settings_from_env(env))

    def worker_count(self) -> int:
        """How many sample windows one comparison runs at once on this backend."""
        if self.max_workers > 0:
            return self.max_workers
        if self.backend_name == "kubernetes":
            return max(1, self.k8s_max_concurrent_pods)
        return default_workers()

    def warm_pool(self) -> WarmPool | None:
        """The process's pool of warm sandboxes (None when disabled): successive windows of the
        same commit and task reuse one live sandbox, across runs in the same process."""
        from evalrunner_assets.execution.warm_pool import PROCESS_POOL

        return PROCESS_POOL if self.warm_sessions else None

    def backend(self, context: Any = None) -> SandboxBackend:
        if self.backend_name != "kubernetes":
            return make_backend(self.backend_name)
        # Imported here: the Kubernetes modules load only in processes that use that backend.
        from evalrunner_assets.execution.kubernetes import KubernetesBackend, KubernetesSandboxConfig
        from resources.kubernetes import PipesPodLauncher

        backend = make_backend("kubernetes", kubernetes=KubernetesSandboxConfig(**self.kubernetes_options()))
        if context is not None and isinstance(backend, KubernetesBackend):
            # A new backend object (same slots) whose pods are launched through Dagster Pipes.
            backend = backend.with_launcher(PipesPodLauncher(context))
        return backend

    def kubernetes_options(self) -> dict[str, Any]:
        """The ``KubernetesSandboxConfig`` fields these settings give."""
        options: dict[str, Any] = {
            "namespace": self.k8s_namespace,
            "image": self.k8s_image,
            "max_concurrent_pods": self.k8s_max_concurrent_pods,
            "in_cluster": self.k8s_in_cluster,
        }
        if self.k8s_service_account:
            options["service_account"] = self.k8s_service_account
        if self.k8s_kubeconfig:
            options["kubeconfig"] = self.k8s_kubeconfig
        if self.k8s_model_egress_cidr:
            options["model_egress_cidr"] = self.k8s_model_egress_cidr
            options["model_egress_port"] = self.k8s_model_egress_port
        if self.k8s_env_storage_class:
            options["env_storage_class"] = self.k8s_env_storage_class
        if self.k8s_package_index_proxy:
            options["package_index_proxy"] = self.k8s_package_index_proxy
        options["env_retain_days"] = self.k8s_env_retain_days
        return options
