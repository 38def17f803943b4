"""Retention of repository environment claims on Kubernetes (see deploy/README.md).

Every environment digest keeps a ``PersistentVolumeClaim`` (``evalrunner-env-<digest>``) once
built. Pods that mount one stamp its last use (``evalrunner.dev/env-last-used``, written by
:class:`~evalrunner_assets.execution.kubernetes.KubernetesBackend`); this sweep deletes a claim
only when all of these hold:

- its last use (else, for a claim never built, its creation) is older than the retention;
- no pod in the namespace mounts it (whatever the pod's phase: never delete a claim in use);
- its build Job does not exist (a build in progress);
- it has not changed since it was listed (the delete carries its ``resourceVersion`` as a
  precondition, so a controller that stamps it meanwhile keeps it).

A built claim without a last-use stamp (built before stamps were written) is stamped now and
kept: its retention counts from the first sweep that saw it. A deleted environment is built
again on its next use: ``ensure_environment`` reads the claim, never the lake's
``envs/<digest>/environment.json`` (which stays as the record of a past build).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from evalrunner_assets.execution.kubernetes.config import (
    ENV_APP_LABEL,
    ENV_BUILT_ANNOTATION,
    ENV_DIGEST_LABEL,
    ENV_LAST_USED_ANNOTATION,
    MERGE_PATCH,
    env_claim_name,
    env_job_name,
    parse_stamp,
    utc_stamp,
)
from evalrunner_assets.execution.sandbox import SandboxUnavailable

DAY_S = 86400.0


@dataclass(frozen=True)
class ClaimDecision:
    """What the sweep did with one environment claim, and why."""

    claim: str
    digest: str
    action: str  # "deleted", "would delete" (dry run), "kept", "gone" (deleted by another sweep)
    reason: str
    last_used: str  # the stamp it went by ("" when unknown)

    @property
    def deleted(self) -> bool:
        return self.action == "deleted"


def _when(value: Any) -> float | None:
    if isinstance(value, datetime):  # the client parses creationTimestamp
        return value.timestamp()
    return parse_stamp(value) if isinstance(value, str) else None


def _days(seconds: float) -> str:
    return f"{seconds / DAY_S:.1f} days"


def _refused(what: str, namespace: str, exc: Any) -> SandboxUnavailable:
    return SandboxUnavailable(
        f"the environment retention sweep could not {what} in namespace {namespace!r}: "
        f"{getattr(exc, 'status', '')} {getattr(exc, 'reason', exc)}; apply deploy/k8s/30-sandbox-rbac.yaml "
        "(the controller's Role lists, patches and deletes environment claims)"
    )


def prune_environment_claims(
    core: Any, batch: Any, namespace: str, *, retain_s: float, now: float, dry_run: bool = False
) -> list[ClaimDecision]:
    """One sweep over the environment claims of ``namespace`` (``core``: a ``CoreV1Api``,
    ``batch``: a ``BatchV1Api``). ``retain_s <= 0`` deletes nothing and reads nothing. Returns a
    decision per claim, in name order; with ``dry_run`` nothing is written or deleted."""
    import kubernetes

    if retain_s <= 0:
        return []
    try:
        listed = core.list_namespaced_persistent_volume_claim(
            namespace, label_selector=f"{ENV_APP_LABEL[0]}={ENV_APP_LABEL[1]}"
        ).items
    except kubernetes.client.ApiException as exc:
        raise _refused("list volume claims", namespace, exc) from exc
    decisions: dict[str, ClaimDecision] = {}
    candidates = []  # (claim object, digest, stamp, age)
    for claim in sorted(listed, key=lambda c: c.metadata.name):
        meta = claim.metadata
        name, annotations = meta.name, meta.annotations or {}
        digest = (meta.labels or {}).get(ENV_DIGEST_LABEL) or name.removeprefix(env_claim_name(""))
        stamp = annotations.get(ENV_LAST_USED_ANNOTATION) or ""
        used = _when(stamp)
        if meta.deletion_timestamp is not None:
            decisions[name] = ClaimDecision(name, digest, "kept", "already being deleted", stamp)
            continue
        if used is None and annotations.get(ENV_BUILT_ANNOTATION):
            # Built before last use was stamped: the retention counts from now.
            if not dry_run:
                try:
                    core.patch_namespaced_persistent_volume_claim(
                        name,
                        namespace,
                        {"metadata": {"annotations": {ENV_LAST_USED_ANNOTATION: utc_stamp(now)}}},
                        _content_type=MERGE_PATCH,
                    )
                except kubernetes.client.ApiException as exc:
                    if exc.status != 404:
                        raise _refused("stamp a volume claim", namespace, exc) from exc
            decisions[name] = ClaimDecision(
                name, digest, "kept", "no last use recorded: its retention counts from now", stamp
            )
            continue
        if used is None:  # never built (a failed build): its age is the claim's
            used, stamp = _when(meta.creation_timestamp), ""
            if used is None:
                decisions[name] = ClaimDecision(name, digest, "kept", "neither last use nor creation time known", "")
                continue
            stamp = utc_stamp(used)
            what = "never built; created"
        else:
            what = "last used"
        age = now - used
        if age <= retain_s:
            decisions[name] = ClaimDecision(
                name, digest, "kept", f"{what} {_days(age)} ago (retention {_days(retain_s)})", stamp
            )
            continue
        candidates.append((claim, digest, stamp, f"{what} {_days(age)} ago (retention {_days(retain_s)})"))
    if candidates:
        try:
            pods = core.list_namespaced_pod(namespace).items
        except kubernetes.client.ApiException as exc:
            raise _refused("list pods", namespace, exc) from exc
        mounted: dict[str, str] = {}  # claim -> a pod mounting it (any phase: it still holds it)
        for pod in pods:
            for volume in (pod.spec.volumes if pod.spec else None) or []:
                source = volume.persistent_volume_claim
                if source is not None:
                    mounted.setdefault(
                        source.claim_name, f"{pod.metadata.name} ({(pod.status and pod.status.phase) or '?'})"
                    )
        for claim, digest, stamp, age_text in candidates:
            name = claim.metadata.name
            decisions[name] = _decide_candidate(
                core, batch, namespace, claim, digest, stamp, age_text, mounted.get(name), dry_run
            )
    return [decisions[n] for n in sorted(decisions)]


def _decide_candidate(
    core: Any,
    batch: Any,
    namespace: str,
    claim: Any,
    digest: str,
    stamp: str,
    age_text: str,
    mounted_by: str | None,
    dry_run: bool,
) -> ClaimDecision:
    import kubernetes

    name = claim.metadata.name
    if mounted_by is not None:
        return ClaimDecision(name, digest, "kept", f"{age_text}, but mounted by pod {mounted_by}", stamp)
    job = env_job_name(digest)
    try:
        batch.read_namespaced_job(job, namespace)
        return ClaimDecision(name, digest, "kept", f"{age_text}, but its build Job {job} exists", stamp)
    except kubernetes.client.ApiException as exc:
        if exc.status != 404:
            raise _refused(f"read Job {job}", namespace, exc) from exc
    if dry_run:
        return ClaimDecision(name, digest, "would delete", f"{age_text}; no pod mounts it", stamp)
    options = kubernetes.client.V1DeleteOptions(
        preconditions=kubernetes.client.V1Preconditions(
            resource_version=claim.metadata.resource_version, uid=claim.metadata.uid
        )
    )
    try:
        core.delete_namespaced_persistent_volume_claim(name, namespace, body=options)
    except kubernetes.client.ApiException as exc:
        if exc.status == 404:
            return ClaimDecision(name, digest, "gone", "deleted by someone else meanwhile", stamp)
        if exc.status == 409:  # stamped (used) or rebuilt since it was listed
            return ClaimDecision(name, digest, "kept", "changed since it was listed (used meanwhile)", stamp)
        raise _refused(f"delete volume claim {name}", namespace, exc) from exc
    return ClaimDecision(name, digest, "deleted", f"{age_text}; no pod mounts it", stamp)


__all__ = ["ClaimDecision", "prune_environment_claims"]
