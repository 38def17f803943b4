"""Prepared workspace pods on Kubernetes: the cluster's counterpart of
:class:`~evalrunner_assets.execution.workspace_pool.WorkspacePool`, with the same interface
(``lease``/``prepare``/``stats``/``close``) and the same bounds.

A SWE attempt, its grading and its gold runs each need a fresh workspace pod holding one
commit's export (and, when the task declares one, its environment claim mounted read-only).
Starting a pod -- scheduling, image, init container, the export's delivery -- is the cold-start
cost here, so the pool keeps pods ready per (environment digest, commit, tree digest): created
and delivered, the sandbox container running, no command run in them yet. Bounds: at most
``max_ready`` ready pods (counting those being prepared) in total and at most ``max_leased``
leased at once; a lease beyond that waits in a FIFO queue whose oldest waiter's age is the
queue age :meth:`KubernetesWorkspacePool.stats` reports. So the pool never has more than
``max_ready + max_leased`` pods.

A leased pod is never returned: whatever ran in it may have changed it, so it is deleted on
release. Its replacement is started when a lease takes one (not when it ends, as locally: a pod
start takes seconds, so it overlaps the caller's work and the next lease of that commit --
the attempt's grading, the next sample -- finds it ready). A ready pod older than
``max_idle_seconds`` (its ``activeDeadlineSeconds`` is the upper bound of its life) or no
longer running is deleted instead of leased. :meth:`close` deletes every ready pod.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from evalrunner_assets.execution.kubernetes.backend import KubernetesBackend
from evalrunner_assets.execution.kubernetes.workspace import KubernetesWorkspace
from evalrunner_assets.execution.sandbox import Limits, RepoExport
from evalrunner_assets.execution.workspace_pool import DEFAULT_MAX_LEASED, DEFAULT_MAX_READY, LeaseQueue

DEFAULT_MEMORY_BYTES = 2 * 1024**3

_Key = tuple[str, str, str]


@dataclass(frozen=True)
class LeasedPod:
    """A workspace pod for one sample: ``warm`` when it was taken ready from the pool."""

    workspace: KubernetesWorkspace
    export: RepoExport
    env_digest: str
    warm: bool
    waited_s: float  # how long the lease waited in the queue


@dataclass
class _Ready:
    workspace: KubernetesWorkspace
    made: float  # monotonic


class KubernetesWorkspacePool:
    """Ready workspace pods per (environment digest, commit export), bounded, with a FIFO queue."""

    def __init__(
        self,
        backend: KubernetesBackend,
        max_ready: int = DEFAULT_MAX_READY,
        max_leased: int = DEFAULT_MAX_LEASED,
        *,
        memory_bytes: int = DEFAULT_MEMORY_BYTES,
        max_idle_seconds: float | None = None,
        labels: dict[str, str] | None = None,
    ) -> None:
        if max_ready < 0 or max_leased < 1:
            raise ValueError(f"max_ready must be >= 0 and max_leased >= 1, got {max_ready}, {max_leased}")
        self.backend = backend
        self.max_ready = max_ready
        self.max_leased = max_leased
        # Every exec brings its own wall clock; the pod's limits give memory and output caps.
        self.limits = Limits(memory_bytes=memory_bytes)
        self.max_idle_seconds = (
            max_idle_seconds if max_idle_seconds is not None else backend.config.session_max_seconds / 2
        )
        self.labels = {"pool": "swe", **(labels or {})}
        self._ready: dict[_Key, deque[_Ready]] = {}
        self._order: deque[tuple[_Key, _Ready]] = deque()  # ready pods, oldest first
        self._preparing = 0
        self._queue = LeaseQueue(max_leased)
        self._cond = self._queue.cond  # one lock for the queue and the ready pods
        self._threads: list[threading.Thread] = []
        self._closed = False
        self.cold_starts = 0
        self.warm_hits = 0
        self.discarded = 0  # ready pods deleted unleased (too old, not running, over the bound)
        self.prepare_failures = 0

    @staticmethod
    def _key(export: RepoExport, env_digest: str) -> _Key:
        return (env_digest, export.commit, export.tree_digest)

    def _new_pod(self, export: RepoExport, python_env: str | None) -> KubernetesWorkspace:
        labels = {**self.labels, "commit": export.commit[:12]}
        return KubernetesWorkspace(self.backend, export, limits=self.limits, python_env=python_env, labels=labels)

    # -- preparing ------------------------------------------------------------------------------
    def _reserve_locked(self) -> bool:
        """Count one pod as being prepared if the bound allows it (ready + preparing)."""
        if self._closed or len(self._order) + self._preparing >= self.max_ready:
            return False
        self._preparing += 1
        return True

    def _make_reserved(self, export: RepoExport, env_digest: str, python_env: str | None) -> bool:
        """Create the pod a reservation stands for; True when it joined the ready pods."""
        try:
            pod = self._new_pod(export, python_env)
        except Exception:
            with self._cond:
                self._preparing -= 1
                self.prepare_failures += 1
                self._cond.notify_all()
            raise
        with self._cond:
            self._preparing -= 1
            closed = self._closed
            if not closed:
                ready = _Ready(pod, time.monotonic())
                key = self._key(export, env_digest)
                self._ready.setdefault(key, deque()).append(ready)
                self._order.append((key, ready))
            self._cond.notify_all()
        if closed:
            pod.close()
        return not closed

    def prepare(self, export: RepoExport, env_digest: str, count: int = 1, *, python_env: str | None = None) -> int:
        """Start up to ``count`` ready pods (within ``max_ready``), blocking until they are
        delivered; returns how many were made."""
        made = 0
        for _ in range(count):
            with self._cond:
                if not self._reserve_locked():
                    break
            if not self._make_reserved(export, env_digest, python_env):
                break
            made += 1
        return made

    def _prepare_in_background(self, export: RepoExport, env_digest: str, python_env: str | None) -> None:
        def run() -> None:
            try:
                self._make_reserved(export, env_digest, python_env)
            except Exception:  # counted in prepare_failures; the next lease starts cold
                pass

        thread = threading.Thread(target=run, name="workspace-pod-prepare", daemon=True)
        with self._cond:
            # Reserved here, not in the thread: the bound and stats() count it at once.
            if not self._reserve_locked():
                return
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    # -- leasing --------------------------------------------------------------------------------
    def _take_ready_locked(self, key: _Key, stale: list[KubernetesWorkspace]) -> KubernetesWorkspace | None:
        """A ready pod of ``key`` still young enough, or None; older ones go to ``stale``."""
        queue = self._ready.get(key)
        now = time.monotonic()
        while queue:
            ready = queue.popleft()
            self._order.remove((key, ready))
            if now - ready.made > self.max_idle_seconds:
                stale.append(ready.workspace)
                continue
            return ready.workspace
        return None

    def _running(self, workspace: KubernetesWorkspace) -> bool:
        try:
            pod = self.backend._core().read_namespaced_pod(workspace.pod_name, self.backend.config.namespace)
        except Exception:
            return False
        return bool(pod.status and pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None)

    @contextmanager
    def lease(
        self, export: RepoExport, env_digest: str, timeout: float | None = None, *, python_env: str | None = None
    ) -> Iterator[LeasedPod]:
        """A workspace pod for one sample (a ready one when there is one); deleted afterwards.
        ``python_env``: the environment claim's ``/envs/<digest>`` the pod mounts read-only
        (pods of one key share it: ``env_digest`` names the environment)."""
        key = self._key(export, env_digest)
        with self._cond:
            if self._closed:
                raise RuntimeError("the workspace pod pool is closed")
            waited = self._queue.admit_locked(f"workspace pod for {export.repo}@{export.commit[:7]}", timeout)
            stale: list[KubernetesWorkspace] = []
            taken = self._take_ready_locked(key, stale)
        workspace: KubernetesWorkspace | None = None
        try:
            while taken is not None and not self._running(taken):
                stale.append(taken)  # evicted, past its deadline, deleted by someone else
                with self._cond:
                    taken = self._take_ready_locked(key, stale)
            for pod in stale:
                pod.close()
            with self._cond:
                self.discarded += len(stale)
                if taken is not None:
                    self.warm_hits += 1
                else:
                    self.cold_starts += 1
            # The replacement starts now, while this lease's pod works.
            self._prepare_in_background(export, env_digest, python_env)
            workspace = taken if taken is not None else self._new_pod(export, python_env)
            yield LeasedPod(workspace, export, env_digest, warm=taken is not None, waited_s=waited)
        finally:
            if workspace is not None:
                workspace.close()
            with self._cond:
                self._queue.release_locked()

    # -- reporting and closing ------------------------------------------------------------------
    def stats(self) -> dict[str, float | int]:
        """Ready pods, pods being prepared, leases out, waiters, the age of the oldest waiter
        (the queue age), and counts of warm and cold leases (the keys of ``WorkspacePool.stats``
        plus ``preparing``, ``discarded`` and ``prepare_failures``)."""
        with self._cond:
            return {
                "ready": len(self._order),
                "preparing": self._preparing,
                **self._queue.stats_locked(),
                "warm_hits": self.warm_hits,
                "cold_starts": self.cold_starts,
                "discarded": self.discarded,
                "prepare_failures": self.prepare_failures,
                "max_ready": self.max_ready,
            }

    def close(self, timeout: float = 120.0) -> None:
        """Delete every ready pod, after preparations in flight finish (none start afterwards;
        a pod one of them makes after this is deleted by it). Leased pods are deleted when
        their lease ends."""
        with self._cond:
            self._closed = True
            threads = list(self._threads)
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        with self._cond:
            pods = [r.workspace for _, r in self._order]
            self._order.clear()
            self._ready.clear()
        for pod in pods:
            pod.close()
