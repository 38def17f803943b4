"""The Kubernetes backend's configuration and the names it writes: labels, annotations,
container names, mounts, the environment claims' and jobs' names, and the backend's error.
No API calls; :mod:`.manifests` builds the pod from these, the backend (:mod:`.backend`) runs it,
and the environment modules (:mod:`.env`, :mod:`.env_retention`) name and label claims and
jobs with the same helpers.
"""

from __future__ import annotations

import hashlib
import re
import time
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from evalrunner_assets.errors import EvalrunnerError
from evalrunner_assets.execution import sandbox_settings as settings
from evalrunner_assets.execution.sandbox import (
    SANDBOX_HOME_DIR,
    SANDBOX_OUT_DIR,
    SANDBOX_REPO_DIR,
)

BACKEND_NAME = "kubernetes"
LABEL_PREFIX = "evalrunner.dev/"
SANDBOX_ID_LABEL = LABEL_PREFIX + "sandbox-id"
NETWORK_LABEL = LABEL_PREFIX + "network"  # selected by the model-egress NetworkPolicy
ROLE_LABEL = LABEL_PREFIX + "role"
INIT_CONTAINER = "receive"
SANDBOX_CONTAINER = "sandbox"  # first container: the one a Pipes launcher (dagster-k8s) watches
COLLECTOR_CONTAINER = "collector"
PULL_ERRORS = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "RegistryUnavailable"}
FATAL_PULL_ERRORS = {"InvalidImageName", "ErrImageNeverPull"}  # retrying cannot help
CONFIG_ERRORS = {"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}

# Repository environments (kubernetes/env.py): one PersistentVolumeClaim per environment
# digest, written once by a build Job, then mounted read-only at the same path everywhere.
ENV_MOUNT_ROOT = "/envs"
ENV_VOLUME = "env"
ENV_BUILT_ANNOTATION = LABEL_PREFIX + "env-record"  # set on the claim once the build succeeded
# When a pod last mounted the claim (UTC, ISO 8601), written at most once per
# env_last_used_interval_seconds per digest; the retention sweep reads it.
ENV_LAST_USED_ANNOTATION = LABEL_PREFIX + "env-last-used"
ENV_APP_LABEL = ("app.kubernetes.io/name", "evalrunner-env")  # every environment claim carries it
ENV_DIGEST_LABEL = LABEL_PREFIX + "env-digest"
# Annotation writes are JSON merge patches (RFC 7386): only the keys named change.
MERGE_PATCH = "application/merge-patch+json"
_ENV_PATH = re.compile(r"^/envs/([0-9a-f]{8,64})$")


def env_mount_path(digest: str) -> str:
    return f"{ENV_MOUNT_ROOT}/{digest}"


def env_claim_name(digest: str) -> str:
    return f"evalrunner-env-{digest}"


def env_job_name(digest: str) -> str:
    """The build Job of an environment (one name per digest: a second builder finds it)."""
    return env_claim_name(digest)[:63]


def utc_stamp(when: float | None = None) -> str:
    """``when`` (epoch seconds; default now) as the annotations write it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if when is None else when))


def env_digest_of(python_env: str) -> str:
    """The digest of a Kubernetes environment path (``/envs/<digest>``); raises
    :class:`KubernetesSandboxError` naming the path otherwise."""
    m = _ENV_PATH.match(python_env)
    if m is None:
        raise KubernetesSandboxError(
            f"request.python_env {python_env!r} is not a Kubernetes environment ({ENV_MOUNT_ROOT}/<digest>, "
            "from KubernetesBackend.ensure_environment): a local directory cannot be mounted into a pod"
        )
    return m.group(1)


MOUNTS = {
    "repo": SANDBOX_REPO_DIR,
    "out": SANDBOX_OUT_DIR,
    "scratch": SANDBOX_HOME_DIR,
    "control": "/work/control",  # wrapper <-> collector hand-off; not part of the sandbox contract
    "tmp": "/tmp",
    "inbox": "/work/inbox",  # warm sessions: requests from the collector, read-only for the sandbox
}


class KubernetesSandboxConfig(BaseModel):
    """Where and how sandbox pods run. Every field has a working default except ``image``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # The fields a deployment sets through its environment take their defaults and
    # descriptions from sandbox_settings.py, where each is defined once.
    namespace: str = Field(settings.NAMESPACE.default, description=settings.NAMESPACE.help)
    image: str = Field(description=settings.IMAGE.help)
    image_pull_policy: str = Field("IfNotPresent", description="Container imagePullPolicy.")
    service_account: str = Field(
        "evalrunner-sandbox", description="Service account of sandbox pods: no RBAC, token not mounted."
    )
    run_as_user: int = Field(10001, gt=0, description="Non-root uid of every container.")
    run_as_group: int = Field(
        10001, gt=0, description="Non-root gid of every container and the fsGroup of the volumes."
    )
    cpu_request: str = Field("500m", description="CPU request of the sandbox container.")
    cpu_limit: str = Field("2", description="CPU limit of the sandbox container.")
    memory_request_fraction: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Memory request as a fraction of Limits.memory_bytes (1.0: Guaranteed QoS, least likely evicted).",
    )
    repo_size_limit_bytes: int = Field(
        1 << 30, gt=0, description="Largest repository export accepted (tarball bytes) and the repo emptyDir sizeLimit."
    )
    tmp_size_limit_bytes: int = Field(512 << 20, gt=0, description="emptyDir sizeLimit of /tmp.")
    startup_slack_seconds: float = Field(
        300.0, ge=0, description="Pod deadline allowance for scheduling, image pull and delivery."
    )
    collect_slack_seconds: float = Field(
        120.0, ge=0, description="Pod deadline allowance for collecting outputs after the child exited."
    )
    image_pull_timeout_seconds: float = Field(
        120.0, gt=0, description="How long ErrImagePull/ImagePullBackOff may last before the request is CRASHED."
    )
    schedule_timeout_seconds: float = Field(
        600.0, gt=0, description="How long a pod may stay unschedulable before the request is CRASHED."
    )
    quota_wait_seconds: float = Field(
        900.0,
        ge=0,
        description="How long to retry pod creation while the namespace ResourceQuota (the cluster-wide cap) is full.",
    )
    max_concurrent_pods: int = Field(
        settings.MAX_CONCURRENT_PODS.default, gt=0, description=settings.MAX_CONCURRENT_PODS.help
    )
    poll_interval_seconds: float = Field(2.0, gt=0, description="Seconds between pod status reads.")
    in_cluster: bool | None = Field(
        None,
        description="Use the in-cluster service account; None: in-cluster when KUBERNETES_SERVICE_HOST is set and no kubeconfig is given.",
    )
    kubeconfig: str | None = Field(None, description="Kubeconfig file for out-of-cluster use (the CLI).")
    kube_context: str | None = Field(None, description="Kubeconfig context.")
    model_egress_cidr: str | None = Field(
        settings.MODEL_EGRESS_CIDR.default, description=settings.MODEL_EGRESS_CIDR.help
    )
    # No default here: the resource gives settings.MODEL_EGRESS_PORT's default with a CIDR only.
    model_egress_port: int | None = Field(None, description=settings.MODEL_EGRESS_PORT.help)
    runtime_class_name: str | None = Field(
        None, description="Optional RuntimeClass (e.g. gVisor 'gvisor') for a second isolation layer."
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="nodeSelector for sandbox pods (e.g. a dedicated node pool)."
    )
    tolerations: list[dict[str, Any]] = Field(default_factory=list, description="Tolerations for sandbox pods.")
    use_pipes: bool = Field(
        True,
        description="Launch through the bound PodLauncher (Dagster Pipes inside a Dagster step) when one is bound.",
    )
    session_max_seconds: float = Field(
        4 * 3600.0,
        gt=0,
        description="Longest life of a warm session pod (its activeDeadlineSeconds, plus the slacks); the warm pool closes sessions of decided tasks long before.",
    )
    env_claim_size: str = Field("2Gi", description="Size of each repository environment's volume claim.")
    env_storage_class: str | None = Field(
        settings.ENV_STORAGE_CLASS.default, description=settings.ENV_STORAGE_CLASS.help
    )
    package_index_proxy: str | None = Field(
        settings.PACKAGE_INDEX_PROXY.default, description=settings.PACKAGE_INDEX_PROXY.help
    )
    env_build_wait_seconds: float = Field(
        3600.0, gt=0, description="How long to wait for another controller's build of the same environment."
    )
    env_retain_days: float = Field(settings.ENV_RETAIN_DAYS.default, ge=0, description=settings.ENV_RETAIN_DAYS.help)
    env_last_used_interval_seconds: float = Field(
        3600.0,
        gt=0,
        description="At most this often per environment a pod's use is written on its claim (evalrunner.dev/env-last-used); also how long this process trusts that an environment it found still exists.",
    )

    @model_validator(mode="after")
    def _retention_outlasts_the_use_interval(self) -> KubernetesSandboxConfig:
        # A claim in use is stamped at least once per interval: a retention of at least twice
        # that never deletes a claim a controller is using between two stamps.
        if 0 < self.env_retain_days * 86400 < 2 * self.env_last_used_interval_seconds:
            raise ValueError(
                f"env_retain_days={self.env_retain_days:g} is shorter than twice env_last_used_interval_seconds="
                f"{self.env_last_used_interval_seconds:g}: a claim in use could be deleted; use 0 (never) or more"
            )
        return self


class KubernetesSandboxError(EvalrunnerError, RuntimeError):
    """A request cannot be turned into a pod; the message names the offending field."""


# --- pure helpers ---------------------------------------------------------------------------

_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9._-]+")
_LABEL_NAME_BAD = re.compile(r"[^a-z0-9._-]+")


def sanitize_label_value(value: str) -> str:
    """Map any string to valid label-value syntax (<=63 chars, alnum at both ends); long or
    rewritten values keep a short digest so distinct inputs stay distinct."""
    clean = _LABEL_VALUE_BAD.sub("-", value).strip("-._")
    if clean == value and len(clean) <= 63:
        return clean
    digest = hashlib.sha256(value.encode()).hexdigest()[:8]
    head = clean[: 63 - 9].rstrip("-._")
    return f"{head}-{digest}" if head else digest


def sanitize_label_name(key: str) -> str:
    name = _LABEL_NAME_BAD.sub("-", key.lower()).strip("-._")[:63].rstrip("-._")
    if not name:
        raise KubernetesSandboxError(f"request label {key!r} has no usable characters for a label name")
    return LABEL_PREFIX + name


def parse_stamp(stamp: str | None) -> float | None:
    """Epoch seconds of a Kubernetes timestamp / :func:`utc_stamp` (``2026-12-01T10:00:00Z``)."""
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
