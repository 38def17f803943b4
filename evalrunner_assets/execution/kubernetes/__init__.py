"""The Kubernetes sandbox backend: one pod per request in a dedicated, locked-down namespace.

Split the way Inspect AI splits its Docker sandbox, one concern per module (none imports Dagster):

- ``config``: :class:`KubernetesSandboxConfig`, the error, and the labels, annotations,
  container names, mounts and environment names the backend writes;
- ``manifests``: the sandbox pod as data (:func:`build_sandbox_pod`);
- ``payload``: the repository tarball delivered to a pod and the signed result collected from it;
- ``observe``: what one read of a pod's status means (:func:`observe_pod`);
- ``pod_run``: one request's pod from creation to deletion (:class:`PodRun`, :class:`PodLauncher`);
- ``backend``: :class:`KubernetesBackend` (the life of a request is in its docstring);
- ``sessions``: warm session pods (:class:`KubernetesWarmSession`);
- ``env`` and ``env_retention``: repository environments' claims, build Jobs and retention sweep;
- ``workspace`` and ``workspace_pool``: long-lived workspace pods, and the pool of them;
- ``inspect_sandbox``: the ``evalrunner-k8s`` Inspect sandbox provider.

This package exports the backend's names; the environment, workspace and Inspect modules are
imported by their own paths (they are not loaded with the backend).
"""

from evalrunner_assets.execution.kubernetes.backend import KubernetesBackend, make_api_client
from evalrunner_assets.execution.kubernetes.config import (
    BACKEND_NAME,
    COLLECTOR_CONTAINER,
    CONFIG_ERRORS,
    ENV_BUILT_ANNOTATION,
    ENV_LAST_USED_ANNOTATION,
    FATAL_PULL_ERRORS,
    INIT_CONTAINER,
    MERGE_PATCH,
    MOUNTS,
    NETWORK_LABEL,
    PULL_ERRORS,
    ROLE_LABEL,
    SANDBOX_CONTAINER,
    SANDBOX_ID_LABEL,
    KubernetesSandboxConfig,
    KubernetesSandboxError,
    env_claim_name,
    env_digest_of,
    env_job_name,
    env_mount_path,
    parse_stamp,
    sanitize_label_name,
    sanitize_label_value,
    utc_stamp,
)
from evalrunner_assets.execution.kubernetes.manifests import build_sandbox_pod, pod_deadline_seconds
from evalrunner_assets.execution.kubernetes.observe import PodObservation, observe_pod
from evalrunner_assets.execution.kubernetes.payload import build_repo_tarball, verify_collected
from evalrunner_assets.execution.kubernetes.pod_run import PodLaunch, PodLauncher, PodRun
from evalrunner_assets.execution.kubernetes.sessions import KubernetesWarmSession

__all__ = [
    "BACKEND_NAME",
    "COLLECTOR_CONTAINER",
    "CONFIG_ERRORS",
    "ENV_BUILT_ANNOTATION",
    "ENV_LAST_USED_ANNOTATION",
    "FATAL_PULL_ERRORS",
    "INIT_CONTAINER",
    "MERGE_PATCH",
    "MOUNTS",
    "NETWORK_LABEL",
    "PULL_ERRORS",
    "ROLE_LABEL",
    "SANDBOX_CONTAINER",
    "SANDBOX_ID_LABEL",
    "KubernetesBackend",
    "KubernetesSandboxConfig",
    "KubernetesSandboxError",
    "KubernetesWarmSession",
    "PodLaunch",
    "PodLauncher",
    "PodObservation",
    "PodRun",
    "build_repo_tarball",
    "build_sandbox_pod",
    "env_claim_name",
    "env_digest_of",
    "env_job_name",
    "env_mount_path",
    "make_api_client",
    "observe_pod",
    "parse_stamp",
    "pod_deadline_seconds",
    "sanitize_label_name",
    "sanitize_label_value",
    "utc_stamp",
    "verify_collected",
]
