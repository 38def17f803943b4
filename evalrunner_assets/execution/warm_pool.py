"""Warm sandboxes kept alive across windows (and across Dagster runs in one process).

A warm sandbox serves one (backend, commit export, task config) only — isolation between
different commits or tasks is never shared. The pool bounds how many live at once (least
recently used idle ones are closed first) and how long one may sit idle; whoever drives a
comparison closes the sessions of decided tasks and everything when it ends. Every live
session's process group is killed at interpreter exit, and :meth:`WarmPool.kill_all` kills
sessions that are in use too (cancellation: the window running in one ends as cancelled).

A local sandbox is started with ``--die-with-parent``, which Linux ties to the *thread* that
started it: a session opened on a worker thread dies when that thread ends. Drivers keep their
worker threads alive for as long as they use the pool (a thread pool's threads are).
"""

from __future__ import annotations

import atexit
import json
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict

from evalrunner_assets.execution.inspect_runner import TaskRunConfig, WarmTaskRunner
from evalrunner_assets.execution.sandbox import RepoExport, SandboxBackend

DEFAULT_MAX_SESSIONS = 8
DEFAULT_IDLE_SECONDS = 600.0


def _config_id(cfg: TaskRunConfig) -> str:
    rec = asdict(cfg)
    rec["limits"] = asdict(cfg.limits)
    return json.dumps(rec, sort_keys=True, default=str)


class _Entry:
    def __init__(self, runner: WarmTaskRunner, commit: str, task: str) -> None:
        self.runner = runner
        self.commit = commit
        self.task = task
        self.in_use = False
        self.last_used = time.monotonic()


class WarmPool:
    """Live :class:`WarmTaskRunner` sessions, keyed so that nothing is shared across commits/tasks."""

    def __init__(self, max_sessions: int = DEFAULT_MAX_SESSIONS, idle_seconds: float = DEFAULT_IDLE_SECONDS) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, got {max_sessions}")
        self.max_sessions = max_sessions
        self.idle_seconds = idle_seconds
        self._entries: dict[tuple, _Entry] = {}
        self._lock = threading.Lock()
        self.started = 0  # sessions started over the pool's life (for measurements and tests)
        self._closers: list[threading.Thread] = []  # background closes started by retain()

    @staticmethod
    def _key(backend: SandboxBackend, export: RepoExport, cfg: TaskRunConfig) -> tuple:
        return (backend.name, backend.runtime_digest(), export.commit, export.path, export.tree_digest, _config_id(cfg))

    @contextmanager
    def session(
        self, backend: SandboxBackend, export: RepoExport, cfg: TaskRunConfig, cancel: threading.Event | None = None
    ) -> Iterator[WarmTaskRunner]:
        """A warm runner for this (commit, task config), started if none is live (``cancel``
        stops the start: until it is up, :meth:`kill_all` cannot reach it). If the block raises,
        the session is discarded (its state is unknown) rather than reused."""
        key = self._key(backend, export, cfg)
        to_close: list[_Entry] = []
        with self._lock:
            to_close += self._expire_locked()
            entry = self._entries.get(key)
            if entry is not None and entry.in_use:
                raise RuntimeError(f"warm session for {cfg.task}@{export.commit[:7]} is already in use")
            if entry is None:
                to_close += self._evict_locked(room_for=1)
            else:
                entry.in_use = True  # claimed under the lock: one user per session
        for old in to_close:
            old.runner.close()
        if entry is None:
            runner = WarmTaskRunner(backend, export, cfg, cancel=cancel)
            entry = _Entry(runner, export.commit, cfg.task)
            entry.in_use = True
            with self._lock:
                self._entries[key] = entry
                self.started += 1
        ok = False
        try:
            yield entry.runner
            ok = True
        finally:
            entry.in_use = False
            entry.last_used = time.monotonic()
            if not ok:
                with self._lock:
                    self._entries.pop(key, None)
                entry.runner.close()

    def discard(self, backend: SandboxBackend, export: RepoExport, cfg: TaskRunConfig) -> None:
        """Close this session now (e.g. after an infrastructure failure left it in doubt)."""
        with self._lock:
            entry = self._entries.pop(self._key(backend, export, cfg), None)
        if entry is not None:
            entry.runner.close()

    @staticmethod
    def supports(backend: SandboxBackend) -> bool:
        from evalrunner_assets.execution.sandbox import SandboxBackend as _Base

        return type(backend).open_session is not _Base.open_session

    def _expire_locked(self) -> list[_Entry]:
        now = time.monotonic()
        stale = [k for k, e in self._entries.items() if not e.in_use and now - e.last_used > self.idle_seconds]
        return [self._entries.pop(k) for k in stale]

    def _evict_locked(self, room_for: int) -> list[_Entry]:
        out = []
        idle = sorted((e.last_used, k) for k, e in self._entries.items() if not e.in_use)
        while len(self._entries) + room_for > self.max_sessions and idle:
            _, k = idle.pop(0)
            out.append(self._entries.pop(k))
        return out

    def retain(self, live: Iterable[tuple[str, str]]) -> int:
        """Close every idle session whose (commit, task) is not in ``live`` (decided tasks).

        The sessions leave the pool at once and are closed on a background thread: a polite
        close waits for the worker to exit (~0.3 s), which the planner calling this should not.
        :meth:`close_all` and :meth:`kill_all` wait for those closes."""
        keep = set(live)
        with self._lock:
            gone = [k for k, e in self._entries.items() if not e.in_use and (e.commit, e.task) not in keep]
            closing = [self._entries.pop(k) for k in gone]
        if closing:

            def close_each() -> None:
                for e in closing:
                    e.runner.close()

            closer = threading.Thread(target=close_each, name="evalrunner-close", daemon=True)
            with self._lock:
                self._closers = [t for t in self._closers if t.is_alive()] + [closer]
            closer.start()
        return len(closing)

    def _join_closers(self, timeout: float) -> None:
        with self._lock:
            closers, self._closers = self._closers, []
        deadline = time.monotonic() + timeout
        for t in closers:
            t.join(timeout=max(0.0, deadline - time.monotonic()))

    def close_all(self) -> None:
        with self._lock:
            closing = list(self._entries.values())
            self._entries.clear()
        for e in closing:
            e.runner.close()
        self._join_closers(timeout=30)

    def kill_all(self) -> None:
        """Kill every session, in use or not (cancellation). A window running in a killed
        session returns as cancelled or crashed; its sandbox's process group is gone."""
        with self._lock:
            closing = list(self._entries.values())
            self._entries.clear()
        threads = [threading.Thread(target=e.runner.close, daemon=True) for e in closing]
        for t in threads:  # in parallel: each close waits a little for a polite exit
            t.start()
        for t in threads:
            t.join(timeout=12)
        self._join_closers(timeout=12)

    def __len__(self) -> int:
        return len(self._entries)


PROCESS_POOL = WarmPool()
atexit.register(PROCESS_POOL.close_all)
