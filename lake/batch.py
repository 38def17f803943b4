"""The batch key: the identity of one sandboxed Inspect run over one sample window.

Everything that can change a result is in the key, so a batch with the same key is reused
and never re-run, and a change to any part (model, its arguments, agent config, runtime,
sandbox backend, seed, epochs, window) is a different batch. A missing field is never a
wildcard: a key with missing reproducibility fields is *unpublishable* and never reused.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from lake.layout import Window, check_commit, check_repo, check_task

REPRODUCIBILITY_FIELDS = (
    "repo",
    "commit",
    "task",
    "spec",
    "model",
    "model_args",
    "config_digest",
    "backend",
    "runtime_digest",
    "seed",
)


@dataclass(frozen=True)
class BatchKey:
    """Identity of one batch. ``model_args`` is canonical JSON text (sorted keys)."""

    repo: str
    commit: str
    task: str
    spec: str
    model: str
    window: Window
    seed: int
    epochs: int = 1
    model_args: str = "{}"
    config_digest: str = ""
    backend: str = ""
    runtime_digest: str = ""
    extra: tuple[tuple[str, str], ...] = field(default_factory=tuple)  # e.g. task args

    def __post_init__(self) -> None:
        check_repo(self.repo)
        check_commit(self.commit)
        check_task(self.task)

    @property
    def missing_fields(self) -> list[str]:
        """Reproducibility fields that are empty: the batch is unpublishable if any."""
        values = self.as_record()
        return [f for f in REPRODUCIBILITY_FIELDS if values.get(f) in (None, "")]

    @property
    def publishable(self) -> bool:
        return not self.missing_fields

    def as_record(self) -> dict[str, Any]:
        rec = asdict(self)
        rec["window"] = self.window.name
        rec["window_start"] = self.window.start
        rec["window_stop"] = self.window.stop
        rec["extra"] = dict(self.extra)
        return rec

    @functools.cached_property
    def digest(self) -> str:
        """16 hex chars of sha256 over the canonical JSON of every field (computed once: the
        key is immutable)."""
        canon = json.dumps(self.as_record(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canon.encode()).hexdigest()[:16]

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> BatchKey:
        return cls(
            repo=rec["repo"],
            commit=rec["commit"],
            task=rec["task"],
            spec=rec["spec"],
            model=rec["model"],
            window=Window(int(rec["window_start"]), int(rec["window_stop"])),
            seed=int(rec["seed"]),
            epochs=int(rec.get("epochs", 1)),
            model_args=rec.get("model_args", "{}"),
            config_digest=rec.get("config_digest", ""),
            backend=rec.get("backend", ""),
            runtime_digest=rec.get("runtime_digest", ""),
            extra=tuple(sorted((rec.get("extra") or {}).items())),
        )


def canonical_json(value: Any) -> str:
    """Canonical JSON (sorted keys, no spaces) for digests and ``model_args``."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
