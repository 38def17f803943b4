"""The Kubernetes build step of a repository environment (see deploy/README.md).

One environment digest, one ``PersistentVolumeClaim`` (``evalrunner-env-<digest>``) and one
build ``Job``: a sandbox pod (the same PSA-restricted shape, the same repository delivery) whose
command is ``python -m evalrunner_assets.execution._env_build`` in standalone mode, writing the
environment at ``/envs/<digest>`` on that volume (mounted at ``/envs``), the only writable place
besides its scratch. Its pods are labelled ``evalrunner.dev/network=package-index``, the one label
:func:`package_index_network_policy` lets reach the package index (an allow-listing proxy in
the cluster). Sandbox pods of commits with that digest then mount the claim's ``<digest>``
directory read-only at the same path (``build_sandbox_pod`` with ``request.python_env``).
Pure functions: manifests as dicts; :meth:`KubernetesBackend.ensure_environment` runs them.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from evalrunner_assets.execution.environment import BUILD_LIMITS, EnvSpec
from evalrunner_assets.execution.kubernetes.config import (
    ENV_APP_LABEL,
    ENV_DIGEST_LABEL,
    ENV_MOUNT_ROOT,
    ENV_VOLUME,
    NETWORK_LABEL,
    SANDBOX_CONTAINER,
    KubernetesSandboxConfig,
    env_claim_name,
    env_job_name,
    env_mount_path,
)
from evalrunner_assets.execution.kubernetes.manifests import build_sandbox_pod
from evalrunner_assets.execution.sandbox import SANDBOX_REPO_DIR, RepoExport, SandboxRequest

PACKAGE_INDEX_NETWORK = "package-index"
claim_name = env_claim_name


def environment_claim(
    spec: EnvSpec, config: KubernetesSandboxConfig, *, size: str = "2Gi", storage_class: str | None = None
) -> dict[str, Any]:
    """The volume one environment is built into (written once, then mounted read-only)."""
    claim: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": claim_name(spec.digest),
            "namespace": config.namespace,
            "labels": {ENV_APP_LABEL[0]: ENV_APP_LABEL[1], ENV_DIGEST_LABEL: spec.digest},
        },
        "spec": {"accessModes": ["ReadWriteOnce", "ReadOnlyMany"], "resources": {"requests": {"storage": size}}},
    }
    if storage_class:
        claim["spec"]["storageClassName"] = storage_class
    return claim


def environment_build_request(
    spec: EnvSpec, export: RepoExport, *, index: str, index_proxy: str | None = None
) -> SandboxRequest:
    """The sandbox request the build Job's pod runs (standalone ``_env_build``)."""
    plan = {
        "kind": spec.kind,
        "source": spec.source,
        "install_project": spec.install_project,
        "index": index,
        "env": env_mount_path(spec.digest),
        "standalone": True,
        "digest": spec.digest,
        "built_from": f"{export.repo}@{export.commit}",
    }
    env = {
        "UV_CACHE_DIR": "/work/home/uv-cache",
        "UV_LINK_MODE": "copy",
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_NO_PROGRESS": "1",
    }
    if index_proxy:
        env.update(HTTPS_PROXY=index_proxy, HTTP_PROXY=index_proxy, UV_NATIVE_TLS="1")
    return SandboxRequest(
        argv=("python", "-m", "evalrunner_assets.execution._env_build", json.dumps(plan, sort_keys=True)),
        export=export,
        env=env,
        limits=replace(BUILD_LIMITS),
        labels={"step": "environment", "env-digest": spec.digest},
    )


def build_environment_job(
    spec: EnvSpec,
    export: RepoExport,
    config: KubernetesSandboxConfig,
    *,
    index: str,
    index_proxy: str | None = None,
    sandbox_id: str | None = None,
) -> dict[str, Any]:
    """The build Job of ``spec``'s environment for ``export`` (one commit with that digest).
    ``sandbox_id`` labels its pod (the controller finds the pod by it to deliver and collect)."""
    request = environment_build_request(spec, export, index=index, index_proxy=index_proxy)
    name = env_job_name(spec.digest)
    pod = build_sandbox_pod(request, config, sandbox_id=sandbox_id or f"env-{spec.digest}"[:63])
    pod_spec = pod["spec"]
    pod_spec["volumes"].append(
        {"name": ENV_VOLUME, "persistentVolumeClaim": {"claimName": env_claim_name(spec.digest)}}
    )
    for c in pod_spec["containers"]:
        if c["name"] == SANDBOX_CONTAINER:
            # The whole claim: the build creates /envs/<digest> itself (a fresh volume's root
            # may hold lost+found, and uv will not make a virtualenv in a non-empty directory).
            c["volumeMounts"].append({"name": ENV_VOLUME, "mountPath": ENV_MOUNT_ROOT, "readOnly": False})
            if spec.install_project:
                # The project's build writes its metadata into the source tree; this pod's
                # copy of the repository is its own (an emptyDir), so it may.
                for m in c["volumeMounts"]:
                    if m["mountPath"] == SANDBOX_REPO_DIR:
                        m["readOnly"] = False
    labels = dict(pod["metadata"]["labels"])
    labels[NETWORK_LABEL] = PACKAGE_INDEX_NETWORK
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": config.namespace,
            "labels": labels,
            "annotations": pod["metadata"]["annotations"],
        },
        "spec": {
            "backoffLimit": 0,  # a failed install is a finding, not a flake to retry
            "ttlSecondsAfterFinished": 3600,
            "activeDeadlineSeconds": pod_spec["activeDeadlineSeconds"],
            "template": {
                "metadata": {"labels": labels, "annotations": pod["metadata"]["annotations"]},
                "spec": pod_spec,
            },
        },
    }


def package_index_network_policy(
    config: KubernetesSandboxConfig, *, proxy_cidr: str, proxy_port: int
) -> dict[str, Any]:
    """Build pods may reach the package-index proxy (and DNS), nothing else."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "package-index-egress", "namespace": config.namespace},
        "spec": {
            "podSelector": {"matchLabels": {NETWORK_LABEL: PACKAGE_INDEX_NETWORK}},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [
                        {
                            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                        }
                    ],
                    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                },
                {"to": [{"ipBlock": {"cidr": proxy_cidr}}], "ports": [{"protocol": "TCP", "port": proxy_port}]},
            ],
        },
    }


__all__ = [
    "build_environment_job",
    "claim_name",
    "environment_build_request",
    "environment_claim",
    "package_index_network_policy",
]
