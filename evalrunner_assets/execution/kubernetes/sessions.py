"""Warm sessions: one long-lived sandbox pod per (commit, task) that serves many requests
(:class:`KubernetesWarmSession`, opened by
:meth:`~evalrunner_assets.execution.kubernetes.backend.KubernetesBackend.open_session`).
"""

from __future__ import annotations

import json
import threading
import time

from evalrunner_assets.execution import pod_wrapper
from evalrunner_assets.execution.kubernetes.config import (
    MOUNTS,
    KubernetesSandboxError,
)
from evalrunner_assets.execution.kubernetes.manifests import (
    _wrapper_command,
    build_sandbox_pod,
)
from evalrunner_assets.execution.kubernetes.payload import (
    WRAPPER_STATUS,
    build_repo_tarball,
    verify_collected,
)
from evalrunner_assets.execution.kubernetes.pod_run import (
    PodBackend,
    PodCancelled,
    PodRun,
)
from evalrunner_assets.execution.sandbox import (
    SandboxRequest,
    SandboxResult,
    SandboxStatus,
)


class KubernetesWarmSession:
    """One pod that serves successive requests of one (commit, task): the worker process
    starts once (``pod_wrapper serve``), and each :meth:`call` is one exec of ``pod_wrapper
    call`` in the collector, which hands the request over through the ``inbox`` volume and
    streams back the wrapper's signed reply and the output files.

    The reply is untrusted (task code runs in the worker): it only travels back as
    ``SandboxResult.stdout``. After a timeout, cancellation or crash the session is dead, its
    pod deleted, and every later call returns CRASHED -- as for the local warm sessions."""

    def __init__(self, backend: PodBackend, request: SandboxRequest) -> None:

        self.backend, self.request = backend, request
        self.dead = ""
        self.seq = 0
        started = time.monotonic()
        tarball = build_repo_tarball(request.export.path, backend.config.repo_size_limit_bytes)
        self.pod = PodRun(backend, request, tarball, threading.Event(), started)
        manifest = build_sandbox_pod(
            request, backend.config, sandbox_id=self.pod.sandbox_id, pod_name=self.pod.pod_name, session=True
        )
        self.pod.start(manifest, "warm session")
        self.start_s = time.monotonic() - started

    @property
    def pod_name(self) -> str:
        return self.pod.pod_name

    def call(self, payload: dict, *, timeout: float, cancel: threading.Event | None = None) -> SandboxResult:
        started = time.monotonic()
        result = self.backend._result
        if self.dead:
            return result(SandboxStatus.CRASHED, started, detail=f"warm session is closed: {self.dead}")
        self.seq += 1
        self.backend._count("session_calls")
        line = json.dumps(payload, separators=(",", ":")).encode()
        limits = self.request.limits
        command = [
            *_wrapper_command(),
            "call",
            "--inbox",
            MOUNTS["inbox"],
            "--out",
            MOUNTS["out"],
            "--control",
            MOUNTS["control"],
            "--seq",
            str(self.seq),
            "--timeout",
            f"{timeout:g}",
            "--max-files",
            str(limits.output_files),
            "--max-bytes",
            str(limits.output_bytes),
        ]
        try:
            raw = self.pod._exec_records(
                command, stdin=f"{len(line)}\n".encode() + line, wait_seconds=timeout, cancel=cancel
            )
        except PodCancelled:
            self._die("cancelled")
            return result(SandboxStatus.CANCELLED, started, detail="cancelled by the caller; session pod deleted")
        except Exception as exc:
            cause = self.pod.failure_cause() or f"{type(exc).__name__}: {exc}"
            self._die(cause)
            return result(
                SandboxStatus.TIMEOUT if "deadline exceeded" in cause else SandboxStatus.CRASHED,
                started,
                detail=f"warm session call failed: {cause}",
            )
        try:
            records = pod_wrapper.read_records(raw)
        except pod_wrapper.PayloadError as exc:
            self._die(str(exc))
            return result(SandboxStatus.CRASHED, started, detail=f"warm session reply malformed: {exc}")
        if records and records[0][0].get("timeout"):
            self._die("timeout")
            return result(SandboxStatus.TIMEOUT, started, detail=f"no reply within {timeout:g}s; session pod deleted")
        try:
            reply, stdout, outputs, rejected, _ = verify_collected(raw, self.pod.key, self.request)
            if reply.get("seq") != self.seq:
                raise KubernetesSandboxError(f"signed reply is for request {reply.get('seq')!r}, not {self.seq}")
        except (KubernetesSandboxError, ValueError) as exc:
            self._die(str(exc))
            return result(SandboxStatus.CRASHED, started, detail=f"warm session reply refused: {exc}")
        status = WRAPPER_STATUS.get(str(reply.get("status")), SandboxStatus.CRASHED)
        detail = str(reply.get("detail", ""))
        if status is not SandboxStatus.OK:
            # The worker is gone: as for the local sessions, an exit before replying is a crash.
            status = status if status is SandboxStatus.KILLED else SandboxStatus.CRASHED
            detail = f"warm worker ended: {detail}"
            self._die(detail)
        return result(
            status,
            started,
            exit_code=reply.get("exit_code"),
            stdout=stdout,
            stderr_tail=str(reply.get("stderr_tail", "")),
            outputs=outputs,
            rejected_outputs=rejected,
            detail=detail,
        )

    def _die(self, why: str) -> None:
        self.dead = self.dead or why
        self.pod._delete()

    def close(self) -> None:
        self._die("closed")

    def __enter__(self) -> KubernetesWarmSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
