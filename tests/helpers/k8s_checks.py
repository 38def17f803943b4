"""What the Kubernetes tests check pods and manifests against: the Kubernetes version whose
schemas kubernetes-validate bundles (offline), the Pod Security Standards' "restricted" profile
as rules, and a sandbox config on a placeholder image digest."""

from __future__ import annotations

from evalrunner_assets.execution.kubernetes import KubernetesSandboxConfig

K8S_VERSION = "1.31"


def config(**kw) -> KubernetesSandboxConfig:
    return KubernetesSandboxConfig(image="registry.example/evalrunner-sandbox@sha256:" + "0" * 64, **kw)


# --- Pod Security Standards, "restricted" profile (v1.31), as rules --------------------------

ALLOWED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def psa_restricted_violations(pod_spec: dict) -> list[str]:
    """Every way ``pod_spec`` breaks the restricted profile (empty list: it complies)."""
    bad = []
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if pod_spec.get(flag):
            bad.append(f"{flag} is true")
    for vol in pod_spec.get("volumes", []):
        kinds = set(vol) - {"name"}
        if not kinds <= ALLOWED_VOLUME_TYPES:
            bad.append(f"volume {vol['name']!r} uses {sorted(kinds - ALLOWED_VOLUME_TYPES)}")
    psc = pod_spec.get("securityContext", {})
    if psc.get("runAsUser") == 0:
        bad.append("pod runAsUser is 0")
    if psc.get("sysctls"):
        bad.append("pod sets sysctls")  # restricted allows only the safe set; we use none
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    if pod_seccomp not in (None, "RuntimeDefault", "Localhost"):
        bad.append(f"pod seccompProfile {pod_seccomp}")
    containers = [("container", c) for c in pod_spec.get("containers", [])]
    containers += [("initContainer", c) for c in pod_spec.get("initContainers", [])]
    containers += [("ephemeralContainer", c) for c in pod_spec.get("ephemeralContainers", [])]
    for kind, c in containers:
        where = f"{kind} {c['name']!r}"
        sc = c.get("securityContext", {})
        if sc.get("privileged"):
            bad.append(f"{where} is privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            bad.append(f"{where} does not set allowPrivilegeEscalation: false")
        caps = sc.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            bad.append(f"{where} does not drop ALL capabilities")
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            bad.append(f"{where} adds {sorted(set(caps['add']) - {'NET_BIND_SERVICE'})}")
        if not (
            sc.get("runAsNonRoot") is True or (psc.get("runAsNonRoot") is True and sc.get("runAsNonRoot") is not False)
        ):
            bad.append(f"{where} is not runAsNonRoot")
        if sc.get("runAsUser") == 0:
            bad.append(f"{where} runAsUser is 0")
        seccomp = (sc.get("seccompProfile") or {}).get("type") or pod_seccomp
        if seccomp not in ("RuntimeDefault", "Localhost"):
            bad.append(f"{where} has seccompProfile {seccomp}")
        for p in c.get("ports", []):
            if p.get("hostPort"):
                bad.append(f"{where} uses hostPort")
        if (sc.get("procMount") or "Default") != "Default":
            bad.append(f"{where} sets procMount")
    return bad
