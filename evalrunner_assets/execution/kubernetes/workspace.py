"""A workspace pod: one long-lived Kubernetes sandbox pod holding one Inspect sample's workspace.

The pod is built by :func:`~evalrunner_assets.execution.kubernetes.build_sandbox_pod`
(``workspace=True``): the same restricted security context, namespace, labels, no service
account token, ``activeDeadlineSeconds`` (``session_max_seconds`` plus the slacks) as the
upper bound of its life, and the repository environment's claim mounted read-only when one
is named. The commit's export is delivered into the repository emptyDir through the ``receive``
init container (a digest-checked tarball over ``pods/attach``), as for every sandbox pod;
there the sandbox container mounts it writable at ``/work/repo``.

Every command is one ``pods/exec`` of ``pod_wrapper exec`` in the sandbox container, which
runs it with its own wall clock (then kills it and everything it started), rlimits and capped
output; files travel through ``pod_wrapper readfile``/``writefile`` over the same exec stream,
confined to the workspace. :meth:`KubernetesWorkspace.close` deletes the pod.

Pods a crashed controller left behind: every workspace pod is labelled with its controller's
host, PID namespace, pid and process start time; :func:`sweep_orphaned_workspaces` deletes the
ones whose controller process in this host's PID namespace is gone, and every workspace pod
that already ended (e.g. past its deadline). Another host's or container's pods are never
judged (their controller may be alive): a crashed run pod's workspace pods end at their
deadline.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from evalrunner_assets.errors import EvalrunnerError
from evalrunner_assets.execution import pod_wrapper
from evalrunner_assets.execution._local import SandboxRequestError, sandbox_env
from evalrunner_assets.execution.kubernetes.backend import KubernetesBackend
from evalrunner_assets.execution.kubernetes.config import (
    MOUNTS,
    ROLE_LABEL,
    SANDBOX_CONTAINER,
    KubernetesSandboxError,
    sanitize_label_name,
    sanitize_label_value,
)
from evalrunner_assets.execution.kubernetes.manifests import _wrapper_command, build_sandbox_pod
from evalrunner_assets.execution.kubernetes.payload import build_repo_tarball
from evalrunner_assets.execution.kubernetes.pod_run import PodRun
from evalrunner_assets.execution.sandbox import Limits, NetworkPolicy, RepoExport, SandboxRequest

WORKSPACE_ROLE = "workspace"
_OWNER_FIELDS = ("controller-host", "controller-pidns", "controller-pid", "controller-start")
STDERR_TAIL_BYTES = 16384


class WorkspaceFileError(EvalrunnerError, Exception):
    """A file operation the pod refused; ``kind`` is the wrapper's reason (``not-found``,
    ``is-a-directory``, ``outside``, ``too-large``, ``unreadable``, ``unwritable``)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


@dataclass(frozen=True)
class ControllerIdentity:
    """Which controller process owns a workspace pod: host and PID namespace (only a process
    that shares both can tell whether the owner lives), pid, and the process's start time
    (clock ticks since boot), so a reused pid is not mistaken for the owner."""

    host: str
    pidns: str
    pid: int
    start: str

    @classmethod
    def current(cls) -> ControllerIdentity:
        try:  # "pid:[4026531836]": the namespace's inode
            pidns = "".join(ch for ch in os.readlink("/proc/self/ns/pid") if ch.isdigit())
        except OSError:
            pidns = "0"
        return cls(socket.gethostname(), pidns, os.getpid(), _process_start(os.getpid()) or "0")

    def labels(self) -> dict[str, str]:
        values = (self.host, self.pidns, str(self.pid), self.start)
        return dict(zip(_OWNER_FIELDS, values, strict=True))

    def alive_here(self) -> bool:
        """True when this process still runs (meaningful only in the owner's PID namespace)."""
        return _process_start(self.pid) == self.start


def _process_start(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            line = fh.read()
    except OSError:
        return None
    fields = line[line.rfind(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else None  # field 22 of stat: starttime


@dataclass(frozen=True)
class WorkspaceExec:
    """What one command in the workspace did (the output is the command's: untrusted)."""

    status: str  # ok | exit_nonzero | killed | timeout | refused
    exit_code: int | None
    stdout: bytes
    stdout_truncated: bool
    stderr_tail: bytes
    detail: str
    duration_s: float


class KubernetesWorkspace:
    """One sample's workspace pod: created and delivered on construction (blocking), deleted
    by :meth:`close`. Commands may run concurrently (each is its own exec)."""

    def __init__(
        self,
        backend: KubernetesBackend,
        export: RepoExport,
        *,
        limits: Limits,
        python_env: str | None = None,  # a built environment's /envs/<digest> (its claim is mounted)
        labels: dict[str, str] | None = None,
        owner: ControllerIdentity | None = None,
    ) -> None:

        self.backend, self.config = backend, backend.config
        self.limits = limits
        self.owner = owner or ControllerIdentity.current()
        self.python_env = python_env
        self.request = SandboxRequest(
            argv=(),
            export=export,
            network=NetworkPolicy.NONE,
            limits=limits,
            labels={**(labels or {}), **self.owner.labels()},
            python_env=python_env,
        )
        self.closed = threading.Event()
        started = time.monotonic()
        # Stamps the environment claim's last use (the retention sweep keeps it), or refuses a
        # claim that is gone -- before the pod, which would otherwise wait unschedulable.
        backend._note_environment_use(self.request)
        tarball = build_repo_tarball(export.path, self.config.repo_size_limit_bytes)
        self.pod = PodRun(backend, self.request, tarball, threading.Event(), started)
        self.pod.pod_name = f"evalrunner-ws-{self.pod.sandbox_id}"
        self.manifest = build_sandbox_pod(
            self.request, self.config, sandbox_id=self.pod.sandbox_id, pod_name=self.pod.pod_name, workspace=True
        )
        self.pod.start(self.manifest, "workspace")
        self.start_s = round(time.monotonic() - started, 3)

    @property
    def pod_name(self) -> str:
        return self.pod.pod_name

    # -- commands

    def exec(
        self,
        argv: list[str],
        *,
        stdin: bytes | None = None,
        workdir: str = ".",
        env: dict[str, str] | None = None,
        timeout: float,
    ) -> WorkspaceExec:
        """Run ``argv`` in the workspace (``workdir`` relative to it). Raises
        :class:`KubernetesSandboxError` when the pod cannot run it (gone, past its deadline)."""
        if not argv:
            raise ValueError("exec needs a command")
        probe = SandboxRequest(argv=tuple(argv), export=self.request.export, env=dict(env or {}))
        try:  # the same environment policy as every sandbox (valid names, nothing credential-like)
            sandbox_env(probe, home="", tmp="", repo="", out="", path="")
        except SandboxRequestError as exc:
            raise ValueError(f"exec env: {exc}") from exc
        limits = self.limits
        command = [
            *_wrapper_command(),
            "exec",
            "--repo",
            MOUNTS["repo"],
            "--scratch",
            MOUNTS["scratch"],
            "--tmp",
            MOUNTS["tmp"],
            "--workdir",
            workdir,
            *(["--python-env", self.python_env] if self.python_env else []),
            "--timeout",
            f"{timeout:g}",
            "--cpu-seconds",
            str(int(timeout) + 5),
            "--file-size-bytes",
            str(limits.file_size_bytes),
            "--stdout-bytes",
            str(limits.stdout_bytes),
            "--stderr-tail-bytes",
            str(STDERR_TAIL_BYTES),
            *(["--stdin"] if stdin is not None else []),
        ]
        for name, value in sorted((env or {}).items()):
            command += ["--env", f"{name}={value}"]
        command += ["--", *argv]
        raw = self._exec(
            command,
            stdin=None if stdin is None else _framed(stdin),
            wait_seconds=timeout,
            cap=limits.stdout_bytes + STDERR_TAIL_BYTES + (1 << 20),
        )
        records = _records(raw, ("exec-result", "stdout", "stderr"))
        result = json.loads(records[0][1])
        return WorkspaceExec(
            status=str(result.get("status")),
            exit_code=result.get("exit_code"),
            stdout=records[1][1],
            stdout_truncated=bool(result.get("stdout_truncated")),
            stderr_tail=records[2][1],
            detail=str(result.get("detail", "")),
            duration_s=float(result.get("duration_s", 0.0)),
        )

    def read_file(self, path: str, max_bytes: int) -> bytes:
        """The bytes of ``path`` (relative to the workspace); raises :class:`WorkspaceFileError`."""
        command = [*_wrapper_command(), "readfile", "--repo", MOUNTS["repo"], "--path", path]
        command += ["--max-bytes", str(max_bytes)]
        [(header, data)] = _records(self._exec(command, cap=max_bytes + (1 << 20)), ("file",))
        if header.get("error"):
            raise WorkspaceFileError(str(header["error"]), str(header.get("detail", "")))
        return data

    def write_file(self, path: str, data: bytes, max_bytes: int) -> None:
        """Write ``data`` at ``path`` (relative; parents created); raises :class:`WorkspaceFileError`."""
        if len(data) > max_bytes:
            raise WorkspaceFileError("too-large", f"{path!r}: {len(data)} bytes exceed the {max_bytes}-byte cap")
        command = [*_wrapper_command(), "writefile", "--repo", MOUNTS["repo"], "--path", path]
        command += ["--max-bytes", str(max_bytes)]
        [(header, _)] = _records(self._exec(command, stdin=_framed(data), cap=1 << 20), ("written",))
        if header.get("error"):
            raise WorkspaceFileError(str(header["error"]), str(header.get("detail", "")))

    def _exec(self, command: list[str], *, stdin: bytes | None = None, wait_seconds: float = 0.0, cap: int) -> bytes:
        if self.closed.is_set():
            raise KubernetesSandboxError(f"workspace pod {self.pod_name} is closed")
        try:
            return self.pod._exec_records(
                command, stdin=stdin, wait_seconds=wait_seconds, container=SANDBOX_CONTAINER, cap=cap
            )
        except Exception as exc:
            cause = self.pod.failure_cause()
            raise KubernetesSandboxError(
                f"exec in workspace pod {self.pod_name} failed: {cause or f'{type(exc).__name__}: {exc}'}"
            ) from exc

    # -- lifecycle

    def close(self) -> None:
        """Delete the pod (idempotent)."""
        if not self.closed.is_set():
            self.closed.set()
            self.pod._delete()

    def __enter__(self) -> KubernetesWorkspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _framed(data: bytes) -> bytes:
    return f"{len(data)}\n".encode() + data


def _records(raw: bytes, kinds: tuple[str, ...]) -> list[tuple[dict, bytes]]:
    try:
        records = pod_wrapper.read_records(raw)
    except pod_wrapper.PayloadError as exc:
        raise KubernetesSandboxError(f"workspace pod reply malformed: {exc}") from exc
    if tuple(h.get("kind") for h, _ in records) != kinds:
        raise KubernetesSandboxError(
            f"workspace pod reply has records {[h.get('kind') for h, _ in records]}, expected {list(kinds)}"
        )
    return records


def sweep_orphaned_workspaces(backend: KubernetesBackend, *, me: ControllerIdentity | None = None) -> list[str]:
    """Delete workspace pods left behind: those owned by a controller process of this host and
    PID namespace that is gone, and every workspace pod that already ended. Returns the
    deleted pods' names."""
    import kubernetes

    me = me or ControllerIdentity.current()
    core = backend._core()
    namespace = backend.config.namespace
    pods = core.list_namespaced_pod(namespace, label_selector=f"{ROLE_LABEL}={WORKSPACE_ROLE}").items
    deleted = []
    for pod in pods:
        labels: dict[str, Any] = pod.metadata.labels or {}
        owner = [labels.get(sanitize_label_name(f), "") for f in _OWNER_FIELDS]
        ended = (pod.status.phase if pod.status else "") in ("Succeeded", "Failed")
        ours_to_judge = owner[0] == sanitize_label_value(me.host) and owner[1] == me.pidns
        pid = int(owner[2]) if owner[2].isdigit() else 0
        orphan = ours_to_judge and not ControllerIdentity(me.host, me.pidns, pid, owner[3]).alive_here()
        if not (ended or orphan):
            continue
        try:
            core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
            deleted.append(pod.metadata.name)
        except kubernetes.client.ApiException as exc:
            if exc.status != 404:
                raise
    return deleted
