"""Helpers shared by the pipeline tests: the example repo, an evalrunner home on a temporary
directory, real resources pointed at it, and a sandbox resource that records every sandbox it
starts (so reuse is measured on real invocations, not inferred)."""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evalrunner_assets.documents.comparison import ComparisonDocument
from evalrunner_assets.example_repo import ExampleRepo
from evalrunner_assets.execution.sandbox import SandboxBackend
from evalrunner_assets.pipeline.spec import ComparisonRequest
from lake import LAYOUT, Lake
from resources import GitHubResource, LakeResource, RepoResource, SandboxResource

REPO_ID = "example/support-agent"
RUNBOOK = "triage/runbook_lookup"
ESCALATION = "triage/escalation_policy"
SUMMARY = "triage/summary_quality"
ALL_TASKS = {RUNBOOK, ESCALATION, SUMMARY}


class CountingSandboxResource(SandboxResource):
    """The configured backend, unchanged, except that each sandbox it starts (a one-shot run or a
    warm session) and each sample window a warm session evaluates is appended to ``log_path`` as
    one JSON line with the commit it ran: ``kind`` is ``run``, ``session`` or ``eval``."""

    log_path: str

    def backend(self, context: Any = None) -> SandboxBackend:
        backend = super().backend(context)
        if getattr(backend, "_counted_into", None) == self.log_path:
            return backend  # a cached backend is already counting into this log
        log_path = self.log_path

        def record(kind: str, request: Any, **extra: Any) -> None:
            entry = {"kind": kind, "commit": request.export.commit, "labels": dict(request.labels), **extra}
            with open(log_path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(entry) + "\n")

        run, open_session = backend.run, backend.open_session

        def counted_run(request: Any, cancel: Any = None) -> Any:
            record("run", request)
            return run(request, cancel=cancel)

        def counted_open_session(request: Any, *args: Any, **kwargs: Any) -> Any:
            record("session", request)
            session = open_session(request, *args, **kwargs)
            call = session.call

            def counted_call(payload: dict, *a: Any, **kw: Any) -> Any:
                if payload.get("op") == "eval":
                    ids = sorted(str(i) for i in payload.get("sample_ids") or ())
                    record("eval", request, samples=hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16])
                return call(payload, *a, **kw)

            session.call = counted_call
            return session

        backend.run = counted_run  # type: ignore[method-assign]
        backend.open_session = counted_open_session  # type: ignore[method-assign]
        backend._counted_into = log_path  # type: ignore[attr-defined]
        return backend


def ran_samples(entry: dict[str, Any]) -> bool:
    """Whether a logged sandbox entry evaluated samples (a one-shot window run or a warm eval)."""
    return entry["kind"] == "eval" or (entry["kind"] == "run" and "window" in entry["labels"])


def sandbox_starts(log_path: Path) -> list[dict[str, Any]]:
    if not log_path.exists():
        return []
    return [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]


@dataclass
class PipelineHome:
    """One evalrunner home (lake, repo mirrors, exports) with resources bound to it."""

    root: Path
    sandbox_log: Path

    @property
    def lake_root(self) -> Path:
        return self.root / "lake"

    def resources(self) -> dict[str, Any]:
        return {
            "lake": LakeResource(root=str(self.lake_root)),
            "sandbox": CountingSandboxResource(log_path=str(self.sandbox_log)),
            "repos": RepoResource(cache_dir=str(self.root / "repos"), export_dir=str(self.root / "exports")),
            "github": GitHubResource(),
        }

    def lake(self) -> Lake:
        return LakeResource(root=str(self.lake_root)).open()

    def starts(self) -> list[dict[str, Any]]:
        return sandbox_starts(self.sandbox_log)

    def starts_by_commit(self, since: int = 0) -> Counter[str]:
        return Counter(s["commit"] for s in self.starts()[since:])

    def batch_records(self, commit: str) -> set[str]:
        """Every batch landed for ``commit`` (one file per landed window)."""
        lake = self.lake()
        return {p for p in lake.glob(LAYOUT.batch_glob()) if f"/{commit}/" in p or f"commit={commit}" in p}


@contextmanager
def evalrunner_home(root: Path) -> Iterator[PipelineHome]:
    """``EVALRUNNER_HOME`` (and ``DAGSTER_HOME``) point at ``root`` for the duration."""
    root.mkdir(parents=True, exist_ok=True)
    saved = {k: os.environ.get(k) for k in ("EVALRUNNER_HOME", "DAGSTER_HOME", "EVALRUNNER_LAKE")}
    os.environ["EVALRUNNER_HOME"] = str(root)
    os.environ["DAGSTER_HOME"] = str(root / "dagster")
    os.environ.pop("EVALRUNNER_LAKE", None)
    (root / "dagster").mkdir(exist_ok=True)
    try:
        yield PipelineHome(root=root, sandbox_log=root / "sandbox-starts.jsonl")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def request_for(example: ExampleRepo, head: str, pr: str, **fields: Any) -> ComparisonRequest:
    """A comparison of ``head`` (a variant name or ``"base"``) against the example's base."""
    return ComparisonRequest(
        repo=REPO_ID,
        source=str(example.path),
        pr=pr,
        base_sha=example.base_sha,
        head_sha=example.sha(head),
        base_ref=example.base_branch,
        head_ref=head if head != "base" else example.base_branch,
        **{"requested_at": datetime.now(UTC).isoformat(), **fields},
    )


def labels(result: ComparisonDocument) -> dict[str, str]:
    return {task: doc.decision.label for task, doc in result.tasks.items()}
