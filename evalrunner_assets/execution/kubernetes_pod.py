"""The Kubernetes sandbox pod as data: the names, labels and annotations the backend writes,
the backend's configuration, and the pod manifest (:func:`build_sandbox_pod`) every path
builds. No API calls: :mod:`evalrunner_assets.execution.kubernetes` (the backend) runs pods
built here, and the environment modules (``kubernetes_env.py``,
``kubernetes_env_retention.py``) name and label claims and jobs with the same helpers.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from evalrunner_assets.errors import EvalrunnerError
from evalrunner_assets.execution import pod_wrapper
from evalrunner_assets.execution import sandbox_settings as settings
from evalrunner_assets.execution._local import SandboxRequestError, sandbox_env
from evalrunner_assets.execution.sandbox import (
    SANDBOX_HOME_DIR,
    SANDBOX_OUT_DIR,
    SANDBOX_REPO_DIR,
    NetworkPolicy,
    SandboxRequest,
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

# Repository environments (kubernetes_env.py): one PersistentVolumeClaim per environment
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


def _quantity(n_bytes: int) -> str:
    return f"{(int(n_bytes) + (1 << 20) - 1) >> 20}Mi"


def pod_deadline_seconds(request: SandboxRequest, config: KubernetesSandboxConfig, *, session: bool = False) -> int:
    busy = config.session_max_seconds if session else request.limits.wall_seconds
    return int(math.ceil(busy + config.startup_slack_seconds + config.collect_slack_seconds))


def _container_security(config: KubernetesSandboxConfig) -> dict:
    return {
        "runAsNonRoot": True,
        "runAsUser": config.run_as_user,
        "runAsGroup": config.run_as_group,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _wrapper_command() -> list[str]:
    return ["python", "-m", "evalrunner_assets.execution.pod_wrapper"]


def _collector_container(common: dict, deadline: int, resources: dict, session: bool) -> dict:
    """The ``collector``: never runs untrusted code; reads the output volume read-only."""
    return {
        **common,
        "name": COLLECTOR_CONTAINER,
        "command": _wrapper_command(),
        "args": ["hold", "--max-seconds", str(deadline)],
        "resources": resources,
        "volumeMounts": [
            {"name": "out", "mountPath": MOUNTS["out"], "readOnly": True},
            {"name": "control", "mountPath": MOUNTS["control"], "readOnly": True},
            *([{"name": "inbox", "mountPath": MOUNTS["inbox"]}] if session else []),
        ],
    }


def build_sandbox_pod(
    request: SandboxRequest,
    config: KubernetesSandboxConfig,
    *,
    sandbox_id: str,
    pod_name: str | None = None,
    session: bool = False,
    workspace: bool = False,
) -> dict:
    """The V1Pod manifest (as a dict) for ``request``. Pure: same inputs, same manifest.

    ``session``: a warm session pod -- the wrapper serves successive requests (``serve``) that
    the collector hands it through the ``inbox`` volume, instead of running ``argv`` once.

    ``workspace``: a workspace pod for one Inspect sample (``kubernetes_workspace.py``) -- the
    sandbox container only holds, with the repository volume writable (the sample's
    workspace), and every command arrives through ``exec``; no collector, no output volume.
    ``request.argv`` is not run (it may be empty); the deadline is ``session_max_seconds``."""
    if session and workspace:
        raise KubernetesSandboxError("a pod is either a warm session or a workspace, not both")
    if not request.argv and not workspace:
        raise KubernetesSandboxError("request.argv is empty")
    workdir = Path(request.workdir)
    if workdir.is_absolute() or ".." in workdir.parts:
        raise KubernetesSandboxError(f"request.workdir {request.workdir!r} must be relative and stay inside the export")
    try:
        # The same environment policy as the local backends (valid names, nothing credential-like).
        sandbox_env(request, home=MOUNTS["scratch"], tmp=MOUNTS["tmp"], repo=MOUNTS["repo"], out=MOUNTS["out"], path="")
    except SandboxRequestError as exc:
        raise KubernetesSandboxError(f"request.env: {exc}") from exc
    if request.network is NetworkPolicy.MODEL_EGRESS and not (config.model_egress_cidr and config.model_egress_port):
        raise KubernetesSandboxError(
            "request.network is model-egress but KubernetesSandboxConfig.model_egress_cidr/model_egress_port "
            "are not set: configure them (and the matching NetworkPolicy in deploy/k8s)"
        )
    env_digest = env_digest_of(request.python_env) if request.python_env else None
    limits = request.limits
    labels = {
        "app.kubernetes.io/name": "evalrunner-sandbox",
        "app.kubernetes.io/component": "sandbox",
        ROLE_LABEL: "workspace" if workspace else "session" if session else "sandbox",
        SANDBOX_ID_LABEL: sanitize_label_value(sandbox_id),
        NETWORK_LABEL: request.network.value,
        LABEL_PREFIX + "repo-commit": sanitize_label_value(request.export.commit),
    }
    annotations = {
        LABEL_PREFIX + "repo": request.export.repo,
        LABEL_PREFIX + "commit": request.export.commit,
        LABEL_PREFIX + "tree-digest": request.export.tree_digest,
    }
    for key, value in sorted(request.labels.items()):
        name = sanitize_label_name(key)
        if name in labels:
            raise KubernetesSandboxError(f"request label {key!r} collides with the reserved label {name!r}")
        labels[name] = sanitize_label_value(str(value))
        annotations[name] = str(value)  # the full value; labels only carry a selector-safe form

    common = {
        "image": config.image,
        "imagePullPolicy": config.image_pull_policy,
        "securityContext": _container_security(config),
    }
    mem_limit = limits.memory_bytes
    out_size = limits.output_bytes + (64 << 20)
    control_size = limits.stdout_bytes + (64 << 20) + (0 if request.stdin is None else len(request.stdin))
    small = {
        "requests": {"cpu": "50m", "memory": "64Mi", "ephemeral-storage": "16Mi"},
        "limits": {"cpu": "250m", "memory": "256Mi", "ephemeral-storage": "64Mi"},
    }
    ephemeral = limits.scratch_bytes + config.tmp_size_limit_bytes + out_size + control_size
    deadline = pod_deadline_seconds(request, config, session=session or workspace)
    run_args = [
        "serve" if session else "run",
        "--repo",
        MOUNTS["repo"],
        "--out",
        MOUNTS["out"],
        "--scratch",
        MOUNTS["scratch"],
        "--tmp",
        MOUNTS["tmp"],
        "--control",
        MOUNTS["control"],
        *(["--inbox", MOUNTS["inbox"]] if session else []),
        # The environment's bin goes first on the child's PATH (as the local backends do).
        *(["--python-env", env_mount_path(env_digest)] if env_digest else []),
        "--workdir",
        request.workdir,
        *([] if session else ["--wall-seconds", f"{limits.wall_seconds:g}"]),
        "--cpu-seconds",
        str(limits.cpu_seconds),
        "--file-size-bytes",
        str(limits.file_size_bytes),
        "--stdout-bytes",
        str(limits.stdout_bytes),
    ]
    for name, value in sorted(request.env.items()):
        run_args += ["--env", f"{name}={value}"]
    run_args += ["--", *request.argv]
    if workspace:
        run_args = ["hold", "--max-seconds", str(deadline)]

    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": deadline,
        "terminationGracePeriodSeconds": 5,
        "serviceAccountName": config.service_account,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "hostNetwork": False,
        "hostPID": False,
        "hostIPC": False,
        "shareProcessNamespace": False,  # the child must not see or signal the collector
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": config.run_as_user,
            "runAsGroup": config.run_as_group,
            "fsGroup": config.run_as_group,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "initContainers": [
            {
                **common,
                "name": INIT_CONTAINER,
                "command": _wrapper_command(),
                "args": [
                    "receive",
                    "--repo",
                    MOUNTS["repo"],
                    "--control",
                    MOUNTS["control"],
                    "--max-bytes",
                    str(config.repo_size_limit_bytes + (0 if request.stdin is None else len(request.stdin))),
                ],
                "stdin": True,
                "stdinOnce": True,  # the attach session that delivers the payload is the only writer
                "tty": False,
                "resources": {
                    "requests": {"cpu": "100m", "memory": "256Mi", "ephemeral-storage": "16Mi"},
                    "limits": {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "64Mi"},
                },
                "volumeMounts": [
                    {"name": "repo", "mountPath": MOUNTS["repo"]},
                    {"name": "control", "mountPath": MOUNTS["control"]},
                    {"name": "tmp", "mountPath": MOUNTS["tmp"]},
                ],
            }
        ],
        "containers": [
            {
                **common,
                "name": SANDBOX_CONTAINER,
                "command": _wrapper_command(),
                "args": run_args,
                "workingDir": MOUNTS["scratch"],
                "resources": {
                    "requests": {
                        "cpu": config.cpu_request,
                        "memory": _quantity(int(mem_limit * config.memory_request_fraction)),
                        "ephemeral-storage": _quantity(ephemeral),
                    },
                    "limits": {
                        "cpu": config.cpu_limit,
                        "memory": _quantity(mem_limit),
                        "ephemeral-storage": _quantity(ephemeral),
                    },
                },
                "volumeMounts": [
                    {"name": "repo", "mountPath": MOUNTS["repo"], **({} if workspace else {"readOnly": True})},
                    *([] if workspace else [{"name": "out", "mountPath": MOUNTS["out"]}]),
                    {"name": "scratch", "mountPath": MOUNTS["scratch"]},
                    *([] if workspace else [{"name": "control", "mountPath": MOUNTS["control"]}]),
                    {"name": "tmp", "mountPath": MOUNTS["tmp"]},
                    *([{"name": "inbox", "mountPath": MOUNTS["inbox"], "readOnly": True}] if session else []),
                    *(
                        [
                            {
                                "name": ENV_VOLUME,
                                "mountPath": env_mount_path(env_digest),
                                "subPath": env_digest,  # the build wrote it there on the claim
                                "readOnly": True,
                            }
                        ]
                        if env_digest
                        else []
                    ),
                ],
            },
            *([] if workspace else [_collector_container(common, deadline, small, session)]),
        ],
        "volumes": [
            {"name": "repo", "emptyDir": {"sizeLimit": _quantity(config.repo_size_limit_bytes * 2)}},
            *([] if workspace else [{"name": "out", "emptyDir": {"sizeLimit": _quantity(out_size)}}]),
            {"name": "scratch", "emptyDir": {"sizeLimit": _quantity(limits.scratch_bytes)}},
            {"name": "control", "emptyDir": {"sizeLimit": _quantity(control_size)}},
            {"name": "tmp", "emptyDir": {"sizeLimit": _quantity(config.tmp_size_limit_bytes)}},
            *(
                [{"name": "inbox", "emptyDir": {"sizeLimit": _quantity(2 * pod_wrapper.MAX_REQUEST_BYTES)}}]
                if session
                else []
            ),
            *(
                [
                    {
                        "name": ENV_VOLUME,
                        "persistentVolumeClaim": {"claimName": env_claim_name(env_digest), "readOnly": True},
                    }
                ]
                if env_digest
                else []
            ),
        ],
    }
    if config.runtime_class_name:
        spec["runtimeClassName"] = config.runtime_class_name
    if config.node_selector:
        spec["nodeSelector"] = dict(config.node_selector)
    if config.tolerations:
        spec["tolerations"] = [dict(t) for t in config.tolerations]
    metadata: dict[str, Any] = {"namespace": config.namespace, "labels": labels, "annotations": annotations}
    if pod_name:
        metadata["name"] = pod_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def parse_stamp(stamp: str | None) -> float | None:
    """Epoch seconds of a Kubernetes timestamp / :func:`utc_stamp` (``2026-12-01T10:00:00Z``)."""
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
