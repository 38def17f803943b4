"""One engine at a time per comparison: a lease file beside the comparison in the lake.

``evalrunner compare`` and the daemon's ``comparison_job`` runs drive the same engine over the
same lake. Without a guard, a command-line comparison under way looks to the sampling sensor
like one whose run died (undecided, no Dagster run queued or running), and the sensor starts a
second engine on it; and a command typed while the daemon works on a head runs it twice. Both
would do every window's work twice and write the report over each other.

The engine holds ``<comparison>.lease.json`` while it runs: created only if absent (the lake's
create-only write), rewritten every :data:`HEARTBEAT_S` while the engine lives, removed when it
ends. A lease is live while its heartbeat is younger than :data:`TTL_S`; on the holder's own
host a lease whose process is gone is stale at once, so a killed command can be resumed
immediately. A stale lease is taken over (removed, then created again create-only, so two
takers cannot both win). ``evalrunner compare`` waits for a live holder and then continues from
what it landed and decided (two identical commands both end with the same verdict); a daemon
run does not wait (it fails, naming the holder, and the sampling sensor asks again later).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from evalrunner_assets.errors import InputError
from evalrunner_assets.pipeline.spec import ComparisonRequest
from lake import LAYOUT

HEARTBEAT_S = 10.0
POLL_S = 1.0  # how often a waiting engine looks at the lease again
TTL_S = 60.0  # six missed heartbeats: a holder this quiet is gone (a stopped machine, a lost pod)
LEASE_NAME = "lease.json"


class ComparisonBusy(InputError, RuntimeError):
    """Another live engine holds the comparison; the message says who and since when."""

    def __init__(self, key: str, holder: Lease) -> None:
        self.key, self.holder = key, holder
        self.hint = "wait for it to finish (`evalrunner serve` shows its run), or stop that process first"
        super().__init__(
            f"comparison {key} is being run by {holder.describe()}; it continues there "
            f"(a holder that stops heartbeating is taken over after {TTL_S:g} s)"
        )


@dataclass(frozen=True)
class Lease:
    token: str
    owner: str  # what holds it: "evalrunner compare", "comparison_job run <id>", …
    host: str
    pid: int
    started_at: float
    heartbeat_at: float

    def describe(self, now: float | None = None) -> str:
        age = (now if now is not None else time.time()) - self.heartbeat_at
        return f"{self.owner} (pid {self.pid} on {self.host}, last heartbeat {age:.0f} s ago)"

    def is_live(self, now: float | None = None) -> bool:
        now = now if now is not None else time.time()
        if now - self.heartbeat_at >= TTL_S:
            return False
        if self.host == socket.gethostname():
            return _pid_alive(self.pid)
        return True


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def _path(request: ComparisonRequest) -> str:
    return LAYOUT.comparison_artifact(request.repo, request.pr, request.head_sha, LEASE_NAME)


def read_lease(the_lake: Any, request: ComparisonRequest) -> Lease | None:
    """The lease on ``request``'s comparison, or None (absent or unreadable: nobody to wait for)."""
    try:
        raw = json.loads(the_lake.read_bytes(_path(request)))
        return Lease(**{k: raw[k] for k in Lease.__dataclass_fields__})
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        return None  # a damaged lease names no holder


def live_holder(the_lake: Any, request: ComparisonRequest) -> Lease | None:
    """The live holder of ``request``'s comparison, if any."""
    lease = read_lease(the_lake, request)
    return lease if lease is not None and lease.is_live() else None


class ComparisonLease:
    """Holds a comparison's lease while the engine runs (a context manager)."""

    def __init__(self, the_lake: Any, request: ComparisonRequest, owner: str) -> None:
        self.lake, self.request, self.owner = the_lake, request, owner
        self.path = _path(request)
        now = time.time()
        self.lease = Lease(uuid.uuid4().hex, owner, socket.gethostname(), os.getpid(), now, now)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _encode(self, lease: Lease) -> bytes:
        return json.dumps(asdict(lease), sort_keys=True).encode()

    def acquire(self, *, wait: bool = False, on_wait: Callable[[Lease], None] | None = None) -> None:
        """Take the lease. A live holder raises :class:`ComparisonBusy`, or with ``wait`` is
        waited out (polled every :data:`POLL_S`; ``on_wait(holder)`` is told once), so a second
        identical command continues from what the first landed and decided."""
        told = False
        while True:
            try:
                self._take()
                break
            except ComparisonBusy as busy:
                if not wait:
                    raise
                if on_wait is not None and not told:
                    on_wait(busy.holder)
                    told = True
                time.sleep(POLL_S)
        self._thread = threading.Thread(target=self._beat, name="evalrunner-lease", daemon=True)
        self._thread.start()

    def _take(self) -> None:
        for _ in range(2):
            now = time.time()
            self.lease = Lease(**{**asdict(self.lease), "started_at": now, "heartbeat_at": now})
            if self.lake.write_once(self.path, self._encode(self.lease)):
                return
            held = read_lease(self.lake, self.request)
            if held is not None and held.is_live():
                raise ComparisonBusy(self.request.key, held)
            self.lake.remove(self.path)  # stale (or damaged): take it over, create-only again
        held = read_lease(self.lake, self.request)
        raise ComparisonBusy(self.request.key, held or self.lease)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                held = read_lease(self.lake, self.request)
                if held is None or held.token != self.lease.token:
                    return  # taken over after we went quiet: the new holder's lease is not ours to touch
                self.lease = Lease(**{**asdict(self.lease), "heartbeat_at": time.time()})
                self.lake.write_bytes(self.path, self._encode(self.lease))
            except Exception:
                continue  # a lake hiccup: the next beat tries again (the TTL allows several misses)

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            held = read_lease(self.lake, self.request)
            if held is not None and held.token == self.lease.token:
                self.lake.remove(self.path)
        except Exception:
            pass  # left behind, it goes stale: the holder's process is gone once this one exits

    def __enter__(self) -> ComparisonLease:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()
