"""A model provider's health across a whole comparison: the gateway's circuit breaker.

Every upstream attempt the gateway makes to a provider (from any sandbox of the comparison)
reports here: a **success** is any answer that is not a failure (a 400 included: the provider
is up); a **failure** is a 408/409/429/5xx answer, a connection error or a timeout. Rules:

- **Probing.** While the provider has failed and not succeeded since (a failure streak), its
  attempts go one at a time, spaced by a backoff that doubles with each probe (``base_s``,
  2×, 4× … up to ``max_probe_gap_s``; a longer ``Retry-After`` wins, up to ``max_wait_s``). The
  first success ends the streak and every waiting request goes on at once. So a few 500s or
  429s cost one short pause, and a dead provider sees one call per backoff step, not one per
  request and retry.
- **Outage.** The circuit opens once the streak holds at least ``trip_failures`` failed
  attempts spanning at least ``trip_after_s`` seconds, with no success in between: the
  provider is down. Both conditions: many parallel failures in one brief blip do not open it,
  nor does one slow failure.
- **Refused key.** An upstream 401 or 403 opens it at once: no retry can fix the key.

Once open, the circuit stays open for the comparison: every waiting and further request is
answered at once, and ``on_open`` (the engine) is told, once, with the :class:`CircuitTrip`.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from evalrunner_assets.errors import EvalrunnerError

# Defaults (``GatewaySettings`` may override them): a provider failing on every attempt is
# probed at ~0.5, 1.5, 3.5, 7.5, 11.5 … s and its circuit opens ~20 s after its first failure,
# after about ``max_concurrency`` + 7 upstream calls. A blip of a few failures spread over less
# than 20 s (with one success after it) never opens it.
TRIP_FAILURES = 8
TRIP_AFTER_S = 20.0
PROBE_BASE_S = 0.5
PROBE_MAX_GAP_S = 4.0  # probes at least this often (unless Retry-After asks for longer)
AUTH_STATUSES = frozenset({401, 403})
WAIT_DIGITS = 3  # a probe's wait is rounded to the millisecond
WAIT_RESOLUTION_S = 10.0**-WAIT_DIGITS


class CircuitOpen(EvalrunnerError, Exception):
    """The provider's circuit is open: the request is answered without calling it."""

    def __init__(self, trip: CircuitTrip) -> None:
        super().__init__(trip.describe())
        self.trip = trip


@dataclass
class CircuitTrip:
    """Why a provider's circuit opened: an outage (``kind="outage"``) or a refused key
    (``kind="auth"``); ``failures`` counts the streak's failed attempts by status code or
    error name (``{"500": 6}``, ``{"ConnectError": 7}``)."""

    provider: str
    key_env: str  # the host variable holding the provider's key
    kind: str  # "outage" | "auth"
    failures: dict[str, int]
    streak: int
    window_s: float  # first failure of the streak → the trip
    opened_at: float  # time.time()
    detail: str = ""  # the provider's error type/code for a refused key (never its message)
    upstream_calls: int = 0  # every upstream attempt to this provider so far

    def statuses(self) -> str:
        return ", ".join(f"{n}× {k}" for k, n in sorted(self.failures.items(), key=lambda kv: (-kv[1], kv[0])))

    def describe(self) -> str:
        if self.kind == "auth":
            (status,) = list(self.failures) or ["401"]
            what = "refused the key" if status == "401" else "refused access with the key"
            detail = f" ({self.detail})" if self.detail else ""
            return f"model provider {self.provider} {what} in {self.key_env}: HTTP {status}{detail}"
        return (
            f"model provider {self.provider} is down: {self.streak} consecutive failed calls over "
            f"{self.window_s:.0f}s with no success in between ({self.statuses()})"
        )

    def hint(self) -> str | None:
        if self.kind != "auth":
            return None
        return f"set {self.key_env} to a valid key for {self.provider} where evalrunner runs (sandboxes never see it)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "model_provider_auth" if self.kind == "auth" else "model_provider_outage",
            "provider": self.provider,
            "key_env": self.key_env,
            "failures": dict(sorted(self.failures.items())),
            "consecutive_failures": self.streak,
            "window_s": round(self.window_s, 3),
            "upstream_calls": self.upstream_calls,
            "opened_at": datetime.fromtimestamp(self.opened_at, UTC).isoformat(),
            "detail": self.detail,
            "reason": self.describe(),
        }


@dataclass(frozen=True)
class Admission:
    """An attempt let through: how long it waited for the probe backoff, and whether it is the
    streak's probe (the one attempt in flight while the provider is failing)."""

    waited_s: float
    probe: bool


@dataclass
class _Streak:
    failures: dict[str, int] = field(default_factory=dict)
    count: int = 0
    first_at: float = 0.0
    probes: int = 0


class ProviderCircuit:
    """One provider's circuit (see the module docstring). Thread-safe."""

    def __init__(
        self,
        provider: str,
        key_env: str,
        *,
        trip_failures: int = TRIP_FAILURES,
        trip_after_s: float = TRIP_AFTER_S,
        base_s: float = PROBE_BASE_S,
        max_wait_s: float = 30.0,
        max_probe_gap_s: float = PROBE_MAX_GAP_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        on_open: Callable[[CircuitTrip], None] | None = None,
    ) -> None:
        self.provider, self.key_env = provider, key_env
        self.trip_failures, self.trip_after_s = trip_failures, trip_after_s
        self.base_s, self.max_wait_s, self.max_probe_gap_s = base_s, max_wait_s, max_probe_gap_s
        self._clock, self._sleep = clock, sleep
        self.on_open = on_open
        self._cond = threading.Condition()
        self._streak: _Streak | None = None
        self._probing = False  # an attempt of the streak is in flight
        self._waiting: deque[object] = deque()  # requests waiting for their probe, in arrival order
        self._not_before = 0.0  # the next probe waits until then
        self.trip: CircuitTrip | None = None
        self.upstream_calls = 0
        self.successes = 0  # grows with every success: a request can tell one happened meanwhile

    @property
    def failing(self) -> bool:
        return self._streak is not None

    def admit(self, alive: Callable[[], bool] = lambda: True) -> Admission | None:
        """Wait until an attempt may go upstream (its :class:`Admission`), or None (no attempt)
        when ``alive()`` turns False while waiting (the window that asked has ended). Raises
        :class:`CircuitOpen` once the circuit is open."""
        ticket = object()
        with self._cond:
            self._waiting.append(ticket)
            try:
                while True:
                    if self.trip is not None:
                        raise CircuitOpen(self.trip)
                    if not alive():
                        return None
                    if self._streak is None:
                        self.upstream_calls += 1
                        return Admission(0.0, probe=False)
                    # Probes go to waiting requests in turn: one request that alone keeps
                    # failing goes to the back, so the others' answers can end the streak.
                    if not self._probing and self._waiting[0] is ticket:
                        self._probing = True  # this request is the next probe
                        wait = round(max(0.0, self._not_before - self._clock()), WAIT_DIGITS)
                        break
                    self._cond.wait(timeout=0.5)
            finally:
                self._waiting.remove(ticket)
                self._cond.notify_all()
        if wait > 0:
            self._sleep(wait)
        with self._cond:
            if self.trip is not None or not alive():
                self._probing = False
                self._cond.notify_all()
                if self.trip is not None:
                    raise CircuitOpen(self.trip)
                return None
            self.upstream_calls += 1
        return Admission(wait, probe=True)

    def release(self, admission: Admission) -> None:
        """An admitted attempt that was not sent after all."""
        with self._cond:
            self.upstream_calls -= 1
            if admission.probe:
                self._probing = False
                self._cond.notify_all()

    def success(self) -> None:
        with self._cond:
            self.successes += 1
            self._streak = None
            self._probing = False
            self._cond.notify_all()

    def failure(self, admission: Admission, label: str, retry_after_s: float | None = None) -> None:
        """One failed attempt (``label``: its status code or error name)."""
        tripped = None
        with self._cond:
            now = self._clock()
            s = self._streak
            first = s is None
            if s is None:
                s = self._streak = _Streak(first_at=now)
            s.count += 1
            s.failures[label] = s.failures.get(label, 0) + 1
            if admission.probe:
                self._probing = False
            # The spacing grows with each probe (and the streak's first failure), not with the
            # calls that were already in flight when the provider went down.
            wait = min(self.max_wait_s, self.max_probe_gap_s, self.base_s * (2**s.probes))
            wait *= 0.75 + random.random() / 4
            if s.count + 1 >= self.trip_failures:
                # The probe that could open the circuit goes as soon as the window is spanned.
                wait = min(wait, max(self.base_s, s.first_at + self.trip_after_s - now))
            if retry_after_s is not None:
                wait = max(wait, min(self.max_wait_s, retry_after_s))
            if first or admission.probe:
                s.probes += 1
            self._not_before = max(self._not_before, now + wait)
            # The probe timed to span the window waited a wait rounded to the millisecond (admit),
            # so it may land that much short of it: it counts, or one more probe would go.
            spanned = now - s.first_at >= self.trip_after_s - WAIT_RESOLUTION_S
            if self.trip is None and s.count >= self.trip_failures and spanned:
                tripped = self._open("outage", dict(s.failures), s.count, now - s.first_at)
            self._cond.notify_all()
        if tripped is not None:
            self._tell(tripped)

    def refused_key(self, status: int, detail: str = "") -> None:
        """The provider answered 401/403: the key is wrong; the circuit opens at once."""
        with self._cond:
            if self.trip is not None:
                return
            tripped = self._open("auth", {str(status): 1}, 1, 0.0, detail)
            self._cond.notify_all()
        self._tell(tripped)

    def _open(self, kind: str, failures: dict[str, int], streak: int, window: float, detail: str = "") -> CircuitTrip:
        self.trip = CircuitTrip(
            provider=self.provider,
            key_env=self.key_env,
            kind=kind,
            failures=failures,
            streak=streak,
            window_s=window,
            opened_at=time.time(),
            detail=detail,
            upstream_calls=self.upstream_calls,
        )
        return self.trip

    def _tell(self, trip: CircuitTrip) -> None:
        if self.on_open is not None:
            self.on_open(trip)
