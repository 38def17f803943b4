"""What a running comparison is doing right now: the sandboxes running its windows.

The comparison document says what landed and what runs next; it is saved at most every few
seconds, and only when it changed. Beside it the engine keeps ``<head>.live.json``: one entry per
step in flight (a task's windows on one arm, in one sandbox), rewritten when that set changes
(at most once a second) and every ``HEARTBEAT_S`` while it does not, so a reader can tell a quiet
run from a dead one. At the end it is rewritten as ended, with nothing in flight. It is advisory:
a write the lake refuses is retried at the next change, and never stops the comparison.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from evalrunner_assets.errors import Outage
from evalrunner_assets.pipeline.keys import parse_commit_key
from lake import LAYOUT, Lake

LIVE_ARTIFACT = "live.json"
MIN_INTERVAL_S = 1.0
HEARTBEAT_S = 10.0
# A record older than this while the document still says "running": the run is not saying
# anything (its process died, or the lake is unreachable from it).
STALE_AFTER_S = 60.0


@dataclass(frozen=True)
class LiveStep:
    task: str
    arm: str  # head or base
    windows: list[str]
    started_at: str  # ISO 8601, UTC


@dataclass
class LiveRecord:
    updated_at: str
    workers: int
    ended: bool = False
    steps: list[LiveStep] = field(default_factory=list)

    def sandboxes(self, task: str | None = None, arm: str | None = None) -> int:
        return sum(1 for s in self.steps if (task is None or s.task == task) and (arm is None or s.arm == arm))

    def age_s(self, now: datetime | None = None) -> float:
        return ((now or datetime.now(UTC)) - datetime.fromisoformat(self.updated_at)).total_seconds()

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=1, sort_keys=True).encode()


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="seconds")


def read_live(lake: Lake, repo: str, pr: str, head_sha: str) -> LiveRecord | None:
    """The running comparison's live record, or None when there is none (or it cannot be read:
    it is rewritten whole, so a reader only misses one that never landed)."""
    rel = LAYOUT.comparison_artifact(repo, pr, head_sha, LIVE_ARTIFACT)
    try:
        raw = json.loads(lake.read_bytes(rel))
        steps = [LiveStep(**s) for s in raw.pop("steps", [])]
        return LiveRecord(**raw, steps=steps)
    except FileNotFoundError:
        return None
    except (ValueError, TypeError, KeyError):
        return None


class LiveRecorder:
    """Writes the live record of one comparison from the engine's driving thread."""

    def __init__(self, lake: Lake, repo: str, pr: str, head_sha: str, workers: int) -> None:
        self.lake, self.head_sha, self.workers = lake, head_sha, workers
        self.rel = LAYOUT.comparison_artifact(repo, pr, head_sha, LIVE_ARTIFACT)
        self._written: tuple[Any, ...] | None = None
        self._written_at = 0.0

    def update(self, in_flight: Iterable[Any], *, now: float | None = None) -> None:
        """``in_flight``: the scheduler's units in flight (each a step on one sandbox)."""
        now = time.monotonic() if now is None else now
        wall = time.time()
        steps = []
        for unit in in_flight:
            _, sha = parse_commit_key(unit.step.commit)
            started = wall - (now - unit.submitted_at)
            steps.append(
                LiveStep(
                    unit.step.task, "head" if sha == self.head_sha else "base", list(unit.step.windows), _iso(started)
                )
            )
        steps.sort(key=lambda s: (s.task, s.arm, s.windows))
        signature = tuple((s.task, s.arm, tuple(s.windows)) for s in steps)
        since = now - self._written_at
        if signature == self._written and since < HEARTBEAT_S:
            return
        if signature != self._written and since < MIN_INTERVAL_S and self._written is not None:
            return  # written at the next call after the interval (the scheduler calls often)
        self._write(LiveRecord(_iso(wall), self.workers, steps=steps), signature, now)

    def end(self) -> None:
        self._write(LiveRecord(_iso(time.time()), self.workers, ended=True), None, time.monotonic())

    def _write(self, record: LiveRecord, signature: tuple[Any, ...] | None, now: float) -> None:
        try:
            self.lake.write_bytes(self.rel, record.to_json())
        except Outage:
            return  # advisory: the next change tries again
        self._written, self._written_at = signature, now
