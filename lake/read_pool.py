"""A large ``.eval`` log's samples parsed in several processes while it lands.

The direct reader (:mod:`lake.raw_rows`) is Python work under one interpreter lock: a
10,000-sample log costs ~0.6 s of one core, and logs landing side by side in threads (a
comparison's windows, a backfill's points, an import) queue for that one core. A log with at
least :data:`POOL_MIN_SAMPLES` samples is therefore cut into one part per worker and each part is
read in a worker process (compressed member bytes in, Arrow tables out); a smaller log is read
where it lands, since shipping it would cost more than parsing it.

The workers are plain ``python -c`` processes started once per landing process, speaking
length-prefixed pickles over their stdin and stdout, rather than ``multiprocessing``'s: those
re-run the parent's ``__main__`` in every worker (or fork a process whose other threads may hold
locks). Starting them takes a second or two: until they are up, logs are read in the landing
process, so the pool never makes a landing slower than reading it here. A worker that dies
(killed, out of memory) costs only its part's time: the log is read here instead and the next
large log starts new workers. ``EVALRUNNER_LAND_PROCESSES`` sizes the pool (0 or 1: no pool);
unset, one worker per CPU this process may run on.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import IO, Any, TypeVar

from evalrunner_assets.errors import EvalrunnerError
from lake.eval_archive import Member

T = TypeVar("T")

log = logging.getLogger(__name__)

# Below this many samples a log is read where it lands (~50 ms of parsing at 1,000 samples,
# against a few ms of shipping per part).
POOL_MIN_SAMPLES = 1_000

_FRAME = struct.Struct("<Q")
_READY = b"ready"
_BOOT = "import json, sys; sys.path[:] = json.loads(sys.argv[1]); from lake.read_pool import serve; serve()"


class WorkerDied(EvalrunnerError, RuntimeError):
    """A landing worker process exited before answering (caught here: the log is read in the
    landing process instead)."""


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _send(stream: IO[bytes], payload: bytes) -> None:
    stream.write(_FRAME.pack(len(payload)))
    stream.write(payload)
    stream.flush()


def _receive(stream: IO[bytes]) -> bytes:
    head = stream.read(_FRAME.size)
    if len(head) != _FRAME.size:
        raise EOFError
    (size,) = _FRAME.unpack(head)
    payload = stream.read(size)
    if len(payload) != size:
        raise EOFError
    return payload


def serve() -> None:
    """A worker's loop: answer each (function, arguments) request with the function's result or
    its exception, until stdin closes. The function travels by name (pickle imports its module
    here), so this module depends on no reader."""
    requests = sys.stdin.buffer
    # the protocol owns the real stdout; anything the code prints goes to stderr instead
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    _send(replies, _READY)
    while True:
        try:
            fn, args = pickle.loads(_receive(requests))
        except EOFError:
            return
        try:
            reply: tuple[str, Any] = ("ok", fn(*args))
        except Exception as exc:  # noqa: BLE001 - handed back to the landing process, which raises it
            reply = ("error", exc)
        _send(replies, pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))


class _Worker:
    def __init__(self, jobs: queue.Queue[Any], warm: Callable[[], Any]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _BOOT, json.dumps(sys.path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        self.ready = threading.Event()
        self.dead = threading.Event()
        self._jobs = jobs
        self._warm = warm
        threading.Thread(target=self._run, name=f"land-worker-{self.process.pid}", daemon=True).start()

    def _run(self) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            if _receive(self.process.stdout) != _READY:
                raise EOFError
            # what the reader loads on first use, loaded before the worker counts as ready
            _send(self.process.stdin, pickle.dumps((self._warm, ()), protocol=pickle.HIGHEST_PROTOCOL))
            status, value = pickle.loads(_receive(self.process.stdout))
            if status != "ok":
                log.warning("a landing worker could not load the reader: %r", value)
                return
            self.ready.set()
            while True:
                job = self._jobs.get()
                if job is None:
                    return
                future, payload = job
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    _send(self.process.stdin, payload)
                    status, value = pickle.loads(_receive(self.process.stdout))
                except (EOFError, OSError, ValueError) as exc:  # ValueError: its pipe closed by stop()
                    future.set_exception(WorkerDied(f"landing worker {self.process.pid} exited ({exc!r})"))
                    raise
                if status == "ok":
                    future.set_result(value)
                else:
                    future.set_exception(value)
        except (EOFError, OSError, ValueError, pickle.UnpicklingError):
            pass
        finally:
            self.dead.set()

    def stop(self) -> None:
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
        except OSError:
            pass
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


class _Pool:
    def __init__(self, workers: int, warm: Callable[[], Any]) -> None:
        self.jobs: queue.Queue[Any] = queue.Queue()
        self.workers = [_Worker(self.jobs, warm) for _ in range(workers)]

    def ready(self) -> bool:
        """Whether every worker has started and loaded the reader; raises ``WorkerDied`` when
        one exited before that."""
        for worker in self.workers:
            if worker.dead.is_set() and not worker.ready.is_set():
                raise WorkerDied(f"landing worker {worker.process.pid} exited while starting")
        return all(w.ready.is_set() for w in self.workers)

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        if any(w.dead.is_set() for w in self.workers):
            raise WorkerDied("a landing worker has exited")
        future: Future[T] = Future()
        payload = pickle.dumps((fn, args), protocol=pickle.HIGHEST_PROTOCOL)
        self.jobs.put((future, payload))
        return future

    def stop(self) -> None:
        for _ in self.workers:
            self.jobs.put(None)
        for worker in self.workers:
            worker.stop()
        # a job still queued has no worker left to take it
        while True:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None and job[0].set_running_or_notify_cancel():
                job[0].set_exception(WorkerDied("the landing workers were stopped"))


_lock = threading.Lock()
_pool: _Pool | None = None
_failed = False  # the workers could not start here: read every log in the landing process


def _ready_pool(workers: int, warm: Callable[[], Any]) -> _Pool | None:
    """The started pool of ``workers``, or None while it is starting (or cannot start here)."""
    global _pool, _failed
    with _lock:
        if _failed:
            return None
        if _pool is not None and len(_pool.workers) != workers:
            _pool.stop()
            _pool = None
        if _pool is None:
            try:
                _pool = _Pool(workers, warm)
            except OSError as exc:  # no processes left to start
                log.warning("landing parses logs in one process: worker processes cannot start (%s)", exc)
                _failed = True
                return None
        pool = _pool
    try:
        return pool if pool.ready() else None
    except WorkerDied as exc:  # a worker cannot even start here: nothing a retry would change
        log.warning("landing parses logs in one process: %s", exc)
        with _lock:
            _failed = True
        _discard(pool)
        return None


def _discard(pool: _Pool) -> None:
    global _pool
    with _lock:
        if _pool is pool:
            _pool = None
    pool.stop()


def _configured_workers(processes: int | None) -> int:
    if processes is None:
        from evalrunner_assets.lake_settings import lake_settings

        processes = lake_settings().land_processes
    return available_cpus() if processes is None else processes


def wait_ready(workers: int, timeout: float, warm: Callable[[], Any]) -> bool:
    """Start a pool of ``workers`` (if none is running) and wait until it is up or ``timeout``
    seconds pass; whether it is up. For a benchmark or a test that wants the warm path."""
    if _ready_pool(workers, warm) is not None:
        return True
    pool = _pool
    if pool is None:
        return False
    for worker in pool.workers:
        worker.ready.wait(timeout)
    return _ready_pool(workers, warm) is not None


def read_parts(
    read: Callable[[list[Member], list[bytes]], T],
    warm: Callable[[], Any],
    members: Sequence[Member],
    packed: Sequence[bytes],
    processes: int | None = None,
    *,
    min_samples: int = POOL_MIN_SAMPLES,
) -> list[T]:
    """``read`` of an archive's sample members and their compressed bytes, in parts in archive
    order, run in up to ``processes`` worker processes when there are at least ``min_samples``
    members (see the module's docstring). ``read`` and ``warm`` (what a worker runs once before it
    counts as ready) are module-level functions: they travel to the workers by name."""
    n = len(members)
    # a small log (every comparison window) neither reads the setting nor touches the pool
    workers = _configured_workers(processes) if n >= min_samples else 1
    pool = _ready_pool(workers, warm) if workers > 1 else None
    if pool is None:
        return [read(list(members), list(packed))]
    size = math.ceil(n / workers)
    futures: list[Future[T]] = []
    try:
        for i in range(0, n, size):
            futures.append(pool.submit(read, list(members[i : i + size]), list(packed[i : i + size])))
        return [f.result() for f in futures]
    except WorkerDied as exc:
        log.warning("reading the log in this process: %s", exc)
        _discard(pool)
        return [read(list(members), list(packed))]
    finally:
        for f in futures:
            f.cancel()


def shutdown() -> None:
    """Stop the workers (they also stop when this process exits)."""
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.stop()


atexit.register(shutdown)

__all__ = ["POOL_MIN_SAMPLES", "WorkerDied", "available_cpus", "read_parts", "serve", "shutdown", "wait_ready"]
