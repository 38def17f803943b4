"""Prepared, writable workspaces (a clean copy of one commit's export) for per-sample sandboxes.

A SWE-style attempt edits the repository, so its sandbox needs a writable tree at the pinned
commit, never shared with another attempt. Copying the export is the cold-start cost here (as
an image pull and checkout would be on a cluster), so a pool keeps a few copies ready per
environment digest and commit. The pool is bounded twice: at most ``max_ready`` idle copies in
total (the oldest are removed first, so idle copies cannot pile up) and at most ``max_leased``
workspaces out at once; a lease beyond that waits in a FIFO queue, and the age of the oldest
waiter is what :meth:`WorkspacePool.stats` reports as the queue age.

A leased workspace is never returned to the pool: whatever ran in it may have changed it, so it
is deleted on release and a fresh copy is prepared in its place.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from evalrunner_assets.errors import EvalrunnerError
from evalrunner_assets.execution.sandbox import RepoExport

DEFAULT_MAX_READY = 8
DEFAULT_MAX_LEASED = 4


class WorkspaceQueueTimeout(EvalrunnerError, TimeoutError):
    """No workspace could be leased before the caller's deadline (the pool was full)."""


@dataclass(frozen=True)
class Workspace:
    """A writable copy of ``export`` at ``path`` (same repo, commit and tree digest)."""

    path: str
    export: RepoExport
    env_digest: str
    warm: bool  # taken ready from the pool (True) or prepared for this lease (False)
    waited_s: float  # how long the lease waited in the queue

    def as_export(self) -> RepoExport:
        return RepoExport(
            repo=self.export.repo, commit=self.export.commit, path=self.path, tree_digest=self.export.tree_digest
        )


def copy_export(export: RepoExport, root: Path) -> str:
    """A fresh writable copy of ``export`` under ``root`` (named with our pid, so a crashed
    owner's copies can be told apart)."""
    root.mkdir(parents=True, exist_ok=True)
    dest = root / f"ws-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    shutil.copytree(export.path, dest, symlinks=True)
    os.chmod(dest, 0o755)
    return str(dest)


class LeaseQueue:
    """A FIFO queue of leases, at most ``max_leased`` out at once, with the queue's age: the
    admission both workspace pools (local copies, Kubernetes pods) use."""

    def __init__(self, max_leased: int) -> None:
        self.max_leased = max_leased
        self.leased = 0
        self.waiters: deque[float] = deque()  # monotonic enqueue times of waiting leases
        self.cond = threading.Condition()
        self.max_wait_s = 0.0

    def admit_locked(self, what: str, timeout: float | None) -> float:
        """Wait (holding ``cond``) for this lease's turn and a free slot; returns the seconds
        waited. Raises :class:`WorkspaceQueueTimeout` naming ``what`` after ``timeout``."""
        enqueued = time.monotonic()
        self.waiters.append(enqueued)
        try:
            while self.leased >= self.max_leased or self.waiters[0] != enqueued:
                left = None if timeout is None else timeout - (time.monotonic() - enqueued)
                if left is not None and left <= 0:
                    raise WorkspaceQueueTimeout(
                        f"no {what} within {timeout:.0f} s ({self.leased} leased, pool limit {self.max_leased})"
                    )
                self.cond.wait(left)
        finally:
            self.waiters.remove(enqueued)
            self.cond.notify_all()
        self.leased += 1
        waited = time.monotonic() - enqueued
        self.max_wait_s = max(self.max_wait_s, waited)
        return waited

    def release_locked(self) -> None:
        self.leased -= 1
        self.cond.notify_all()

    def stats_locked(self) -> dict[str, float | int]:
        """Leases out, waiters, the age of the oldest waiter (the queue age) and the longest wait."""
        now = time.monotonic()
        return {
            "leased": self.leased,
            "waiting": len(self.waiters),
            "queue_age_s": round(now - self.waiters[0], 3) if self.waiters else 0.0,
            "max_wait_s": round(self.max_wait_s, 3),
            "max_leased": self.max_leased,
        }


class WorkspacePool:
    """Ready workspaces per (environment digest, commit export), bounded, with a FIFO lease queue."""

    def __init__(self, root: str | Path, max_ready: int = DEFAULT_MAX_READY, max_leased: int = DEFAULT_MAX_LEASED):
        if max_ready < 0 or max_leased < 1:
            raise ValueError(f"max_ready must be >= 0 and max_leased >= 1, got {max_ready}, {max_leased}")
        self.root = Path(root)
        self.max_ready = max_ready
        self.max_leased = max_leased
        self._ready: dict[tuple[str, str, str], deque[str]] = {}
        self._order: deque[tuple[tuple[str, str, str], str]] = deque()  # ready copies, oldest first
        self._queue = LeaseQueue(max_leased)
        self._cond = self._queue.cond  # one lock for the queue and the ready copies
        self.cold_starts = 0
        self.warm_hits = 0
        self._refills: list[threading.Thread] = []
        self._closed = False

    @staticmethod
    def _key(export: RepoExport, env_digest: str) -> tuple[str, str, str]:
        return (env_digest, export.commit, export.tree_digest)

    def prepare(self, export: RepoExport, env_digest: str, count: int = 1) -> int:
        """Copy up to ``count`` ready workspaces (within ``max_ready``); returns how many."""
        made = 0
        for _ in range(count):
            with self._cond:
                if self._closed or len(self._order) >= self.max_ready:
                    break
            path = copy_export(export, self.root)
            with self._cond:
                if self._closed:
                    shutil.rmtree(path, ignore_errors=True)
                    break
                key = self._key(export, env_digest)
                self._ready.setdefault(key, deque()).append(path)
                self._order.append((key, path))
                made += 1
                self._trim_locked()
        return made

    def _trim_locked(self) -> None:
        while len(self._order) > self.max_ready:
            key, path = self._order.popleft()
            self._ready[key].remove(path)
            shutil.rmtree(path, ignore_errors=True)

    @contextmanager
    def lease(self, export: RepoExport, env_digest: str, timeout: float | None = None) -> Iterator[Workspace]:
        """A workspace for one sample; deleted (and replaced by a fresh ready copy) afterwards."""
        with self._cond:
            waited = self._queue.admit_locked(f"workspace for {export.repo}@{export.commit[:7]}", timeout)
            ready = self._ready.get(self._key(export, env_digest))
            path = ready.popleft() if ready else None
            if path is not None:
                self._order.remove((self._key(export, env_digest), path))
                self.warm_hits += 1
        warm = path is not None
        try:
            if path is None:
                self.cold_starts += 1
                path = copy_export(export, self.root)
            yield Workspace(path=path, export=export, env_digest=env_digest, warm=warm, waited_s=waited)
        finally:
            if path is not None:
                shutil.rmtree(path, ignore_errors=True)
            with self._cond:
                self._queue.release_locked()
        # Refill in the background: the copy overlaps the caller's next work (grading, the next
        # attempt), so the next lease of this commit starts warm.
        refill = threading.Thread(
            target=self.prepare, args=(export, env_digest, 1), name="workspace-refill", daemon=True
        )
        with self._cond:
            self._refills = [r for r in self._refills if r.is_alive()] + [refill]
        refill.start()

    def stats(self) -> dict[str, float | int]:
        """Ready copies, leases out, waiters, the age of the oldest waiter (the queue age, the
        pool's SLO), and counts of warm and cold leases."""
        with self._cond:
            return {
                "ready": len(self._order),
                **self._queue.stats_locked(),
                "warm_hits": self.warm_hits,
                "cold_starts": self.cold_starts,
                "max_ready": self.max_ready,
            }

    def close(self) -> None:
        """Remove every ready copy (after refills in flight finish; none start afterwards)."""
        with self._cond:
            self._closed = True
            refills = list(self._refills)
        for r in refills:
            r.join(timeout=60)
        with self._cond:
            paths = [p for _, p in self._order]
            self._order.clear()
            self._ready.clear()
        for p in paths:
            shutil.rmtree(p, ignore_errors=True)
