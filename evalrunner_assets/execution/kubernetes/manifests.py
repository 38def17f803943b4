"""The Kubernetes sandbox pod as data: the manifest (:func:`build_sandbox_pod`) every path
builds, its containers' security context and commands, and its deadline. No API calls.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from evalrunner_assets.execution import pod_wrapper
from evalrunner_assets.execution._local import SandboxRequestError, sandbox_env
from evalrunner_assets.execution.kubernetes.config import (
    COLLECTOR_CONTAINER,
    ENV_VOLUME,
    INIT_CONTAINER,
    LABEL_PREFIX,
    MOUNTS,
    NETWORK_LABEL,
    ROLE_LABEL,
    SANDBOX_CONTAINER,
    SANDBOX_ID_LABEL,
    KubernetesSandboxConfig,
    KubernetesSandboxError,
    env_claim_name,
    env_digest_of,
    env_mount_path,
    sanitize_label_name,
    sanitize_label_value,
)
from evalrunner_assets.execution.sandbox import (
    NetworkPolicy,
    SandboxRequest,
)


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

    ``workspace``: a workspace pod for one Inspect sample (``kubernetes/workspace.py``) -- the
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
