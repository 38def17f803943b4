"""The sandbox backend as a Dagster resource: bubblewrap locally, Kubernetes pods at scale.

Switching is configuration only: the same assets call ``backend()`` either way.
"""

from __future__ import annotations

from typing import Any

import dagster as dg

from evalrunner_assets.execution.backends import make_backend
from evalrunner_assets.execution.sandbox import SandboxBackend


class SandboxResource(dg.ConfigurableResource):
    """``backend``: ``bubblewrap`` (default), ``kubernetes``, or ``unsafe-local`` (no isolation;
    explicit only, refused under CI). The ``k8s_*`` fields configure the Kubernetes backend."""

    backend_name: str = "bubblewrap"
    k8s_namespace: str = "evalrunner-sandbox"
    k8s_image: str = ""
    k8s_service_account: str = ""
    k8s_max_concurrent_pods: int = 16
    k8s_in_cluster: bool | None = None
    k8s_kubeconfig: str = ""
    k8s_model_egress_cidr: str = ""
    k8s_model_egress_port: int = 443
    warm_sessions: bool = True
    # Sandboxes running at once for one comparison; 0 means the backend's default: this
    # machine's cores locally, ``k8s_max_concurrent_pods`` (a cluster-wide cap) on Kubernetes.
    max_workers: int = 0

    def worker_count(self) -> int:
        """How many sample windows one comparison runs at once on this backend."""
        if self.max_workers > 0:
            return self.max_workers
        if self.backend_name == "kubernetes":
            return max(1, self.k8s_max_concurrent_pods)
        from evalrunner_assets.pipeline.scheduler import default_workers

        return default_workers()

    def warm_pool(self):
        """The process's pool of warm sandboxes (None when disabled): successive windows of the
        same commit and task reuse one live sandbox, across runs in the same process."""
        from evalrunner_assets.execution.warm_pool import PROCESS_POOL

        return PROCESS_POOL if self.warm_sessions else None

    def backend(self, context: Any = None) -> SandboxBackend:
        if self.backend_name != "kubernetes":
            return make_backend(self.backend_name)
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
        backend = make_backend("kubernetes", **options)
        if context is not None and hasattr(backend, "bind_context"):
            backend.bind_context(context)
        return backend
