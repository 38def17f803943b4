"""What one read of a sandbox pod's status means for the controller (:func:`observe_pod`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evalrunner_assets.execution.kubernetes.config import (
    CONFIG_ERRORS,
    FATAL_PULL_ERRORS,
    INIT_CONTAINER,
    PULL_ERRORS,
    SANDBOX_CONTAINER,
    KubernetesSandboxConfig,
)
from evalrunner_assets.execution.sandbox import (
    SandboxStatus,
)


@dataclass(frozen=True)
class PodObservation:
    """What one read of the pod status means for the controller."""

    phase: str  # "waiting" | "deliver" | "running" | "main-exited" | "failed"
    status: SandboxStatus | None = None
    detail: str = ""
    exit_code: int | None = None
    reason: str = ""


def _get(obj: Any, *path: str) -> Any:
    for attr in path:
        if obj is None:
            return None
        obj = obj.get(attr) if isinstance(obj, dict) else getattr(obj, attr, None)
    return obj


def observe_pod(
    pod: Any,
    *,
    pull_error_since: float | None,
    unschedulable_since: float | None,
    now: float,
    config: KubernetesSandboxConfig,
) -> PodObservation:
    """Classify one pod status (a ``V1Pod``). Time-bounded states use the ``*_since`` stamps
    the caller keeps; pure otherwise."""
    phase = _get(pod, "status", "phase") or "Pending"
    reason = _get(pod, "status", "reason") or ""
    message = _get(pod, "status", "message") or ""
    if phase == "Failed" and reason == "DeadlineExceeded":
        return PodObservation(
            "failed",
            SandboxStatus.TIMEOUT,
            f"pod deadline exceeded (activeDeadlineSeconds): {message}".strip(": "),
            reason=reason,
        )
    if phase == "Failed" and reason == "Evicted":
        return PodObservation("failed", SandboxStatus.CRASHED, f"pod evicted: {message}".strip(": "), reason=reason)
    init = {s.name: s for s in (_get(pod, "status", "init_container_statuses") or [])}
    main = {s.name: s for s in (_get(pod, "status", "container_statuses") or [])}
    for status in list(init.values()) + list(main.values()):
        waiting = _get(status, "state", "waiting")
        wreason = _get(waiting, "reason") or ""
        if wreason in PULL_ERRORS:
            bounded = pull_error_since is not None and now - pull_error_since >= config.image_pull_timeout_seconds
            if wreason in FATAL_PULL_ERRORS or bounded:
                return PodObservation(
                    "failed",
                    SandboxStatus.CRASHED,
                    f"image pull failed for {_get(status, 'image') or config.image!r} in container {status.name!r}: {wreason}: {_get(waiting, 'message') or ''}".rstrip(
                        ": "
                    ),
                    reason=wreason,
                )
            return PodObservation("waiting", reason=wreason)
        if (
            wreason in CONFIG_ERRORS
            and pull_error_since is not None
            and now - pull_error_since >= config.image_pull_timeout_seconds
        ):
            return PodObservation(
                "failed",
                SandboxStatus.CRASHED,
                f"container {status.name!r} cannot start: {wreason}: {_get(waiting, 'message') or ''}",
                reason=wreason,
            )
    receive = init.get(INIT_CONTAINER)
    terminated = _get(receive, "state", "terminated")
    if terminated is not None and terminated.exit_code != 0:
        return PodObservation(
            "failed",
            SandboxStatus.CRASHED,
            f"repository delivery failed: init container exited {terminated.exit_code} ({terminated.reason or ''} {terminated.message or ''})".strip(),
            reason="InitFailed",
        )
    sandbox = main.get(SANDBOX_CONTAINER)
    sterm = _get(sandbox, "state", "terminated")
    if sterm is not None:
        return PodObservation(
            "main-exited", exit_code=sterm.exit_code, reason=sterm.reason or "", detail=sterm.message or ""
        )
    if phase == "Failed":
        return PodObservation(
            "failed",
            SandboxStatus.CRASHED,
            f"pod failed: {reason or 'unknown reason'} {message}".strip(),
            reason=reason,
        )
    if _get(receive, "state", "running") is not None:
        return PodObservation("deliver")
    for cond in _get(pod, "status", "conditions") or []:
        if cond.type == "PodScheduled" and cond.status == "False" and cond.reason == "Unschedulable":
            if unschedulable_since is not None and now - unschedulable_since >= config.schedule_timeout_seconds:
                return PodObservation(
                    "failed",
                    SandboxStatus.CRASHED,
                    f"pod unschedulable for {config.schedule_timeout_seconds:g}s: {cond.message or ''}",
                    reason="Unschedulable",
                )
            return PodObservation("waiting", reason="Unschedulable")
    if _get(sandbox, "state", "running") is not None:
        return PodObservation("running")
    return PodObservation("waiting", reason=phase)
