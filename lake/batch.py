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
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

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


class RunSettings(BaseModel):
    """What selects a task's runs besides commit, task and window: the one settings record that a
    comparison request, a task's run configuration and a batch key each hold (nested, never
    repeated field by field)."""

    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=())

    model: str = Field(description="Inspect model name, e.g. 'simagent/support-agent' or 'openai/gpt-4o'.")
    model_args: dict[str, Any] = Field(default_factory=dict, description="Model arguments (Inspect `-M`).")
    seed: int = Field(default=0, description="Seed of the sample order and of the model's generation.")
    epochs: int = Field(default=1, ge=1, description="Runs of each sample per window.")

    @property
    def model_args_json(self) -> str:
        """``model_args`` as canonical JSON text (what a batch key's digest covers)."""
        return canonical_json(self.model_args)

    def __hash__(self) -> int:  # model_args is a dict: hash its canonical text
        return hash((self.model, self.model_args_json, self.seed, self.epochs))


@dataclass(frozen=True)
class BatchKey:
    """Identity of one batch: where it ran (repo, commit, task, spec, window), with which
    settings, and in what runtime."""

    repo: str
    commit: str
    task: str
    spec: str
    settings: RunSettings
    window: Window
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
        """Every field, flat (the settings' fields at the top, ``model_args`` as canonical JSON
        text): the shape batch records and digests have always had."""
        rec: dict[str, Any] = {
            "repo": self.repo,
            "commit": self.commit,
            "task": self.task,
            "spec": self.spec,
            "model": self.settings.model,
            "window": self.window.name,
            "seed": self.settings.seed,
            "epochs": self.settings.epochs,
            "model_args": self.settings.model_args_json,
            "config_digest": self.config_digest,
            "backend": self.backend,
            "runtime_digest": self.runtime_digest,
            "extra": dict(self.extra),
        }
        rec["window_start"] = self.window.start
        rec["window_stop"] = self.window.stop
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
            settings=RunSettings(
                model=rec["model"],
                model_args=json.loads(rec.get("model_args") or "{}"),
                seed=int(rec["seed"]),
                epochs=int(rec.get("epochs", 1)),
            ),
            window=Window(int(rec["window_start"]), int(rec["window_stop"])),
            config_digest=rec.get("config_digest", ""),
            backend=rec.get("backend", ""),
            runtime_digest=rec.get("runtime_digest", ""),
            extra=tuple(sorted((rec.get("extra") or {}).items())),
        )


def canonical_json(value: Any) -> str:
    """Canonical JSON (sorted keys, no spaces) for digests and ``model_args``."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
