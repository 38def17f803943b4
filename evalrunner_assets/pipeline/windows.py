"""Run sample windows of one (commit, task) in the sandbox and land them in the lake.

A window whose batch is already committed is reused, never re-run (the batch key holds
everything that can change a result). A window that fails for infrastructure reasons leaves a
failure record with its first cause, never sample rows.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from evalrunner_assets.execution.inspect_runner import (
    TaskRunConfig,
    WarmTaskRunner,
    WindowRun,
    run_window_cold,
)
from evalrunner_assets.execution.sandbox import RepoExport, SandboxBackend
from evalrunner_assets.execution.warm_pool import WarmPool
from evalrunner_assets.pipeline.facts import TaskFacts
from lake import LAYOUT, Lake, Window
from lake.batch import BatchKey, canonical_json
from lake.ingest import LogIngestError, LogStatusError, land_batch


@dataclass(frozen=True)
class RunSettings:
    """What selects the runs of a comparison besides commit, task and window."""

    model: str
    model_args: dict
    seed: int
    epochs: int


@dataclass
class WindowOutcome:
    """One window of one (commit, task): reused, landed, or failed (with the first cause)."""

    key: BatchKey
    status: str  # "reused" | "landed" | "failed" | "cancelled"
    samples: int = 0
    errored: int = 0
    failure: str | None = None
    duration_s: float = 0.0
    timings: dict | None = None

    @property
    def ran(self) -> bool:
        return self.status != "reused"


def batch_key_for(
    repo: str,
    commit: str,
    facts: TaskFacts,
    settings: RunSettings,
    window: Window,
    *,
    backend_name: str,
    runtime_digest: str,
) -> BatchKey:
    """The batch key of a window, from what is known before anything runs.

    Equal to ``inspect_runner.batch_key`` for the same inputs (a test holds them together)."""
    return BatchKey(
        repo=repo,
        commit=commit,
        task=facts.task,
        spec=facts.spec,
        model=settings.model,
        window=window,
        seed=settings.seed,
        epochs=settings.epochs,
        model_args=canonical_json(settings.model_args),
        config_digest=facts.config_digest,
        backend=backend_name,
        runtime_digest=runtime_digest,
    )


def batch_state(lake: Lake, key: BatchKey) -> str:
    """``committed`` (landed, status ok), ``failed`` (an infrastructure failure is on record)
    or ``absent``."""
    rec = LAYOUT.batch_record(key.repo, key.commit, key.task, key.window, key.digest)
    if lake.exists(rec):
        status = json.loads(lake.read_bytes(rec)).get("status")
        return "committed" if status == "ok" else "failed"
    if lake.exists(LAYOUT.batch_failure(key.repo, key.commit, key.task, key.window, key.digest)):
        return "failed"
    return "absent"


def read_failure(lake: Lake, key: BatchKey) -> str | None:
    """The first cause recorded for a failed batch, if any."""
    rec = LAYOUT.batch_record(key.repo, key.commit, key.task, key.window, key.digest)
    if lake.exists(rec):
        data = json.loads(lake.read_bytes(rec))
        if data.get("status") != "ok":
            return f"log status {data.get('status')}: {data.get('error')}"
    fail = LAYOUT.batch_failure(key.repo, key.commit, key.task, key.window, key.digest)
    if lake.exists(fail):
        data = json.loads(lake.read_bytes(fail))
        return f"{data.get('kind')}: {data.get('cause')}"
    return None


def _record_failure(lake: Lake, key: BatchKey, kind: str, cause: str, run: WindowRun | None) -> None:
    payload = {
        "batch": key.digest,
        "key": key.as_record(),
        "kind": kind,
        "cause": cause,
        "recorded_at": datetime.now(timezone.utc).isoformat(),
        "exit_code": None if run is None else run.exit_code,
        "stderr_tail": "" if run is None else run.stderr_tail[-4000:],
        "rejected_outputs": {} if run is None else run.rejected_outputs,
    }
    rel = LAYOUT.batch_failure(key.repo, key.commit, key.task, key.window, key.digest)
    lake.write_bytes(rel, json.dumps(payload, indent=2, sort_keys=True, default=str).encode())


def _land(lake: Lake, run: WindowRun, cancel: threading.Event | None) -> WindowOutcome:
    key = run.key
    if (not run.ok or run.log_bytes is None) and cancel is not None and cancel.is_set():
        # Cancelled is not a finding about the infrastructure: nothing is recorded, so the
        # window runs again when the comparison resumes.
        return WindowOutcome(key, "cancelled", failure="cancelled", duration_s=run.duration_s)
    if not run.ok or run.log_bytes is None:
        cause = run.failure_cause or "the sandbox produced no usable log"
        _record_failure(lake, key, run.failure_kind or "infra_failure", cause, run)
        return WindowOutcome(key, "failed", failure=f"{run.failure_kind}: {cause}",
                             duration_s=run.duration_s, timings=run.timings)
    meta = {"mode": run.mode, "duration_s": round(run.duration_s, 3), "timings": run.timings}
    try:
        record = land_batch(lake, key, run.log_bytes, run_meta=meta)
    except LogStatusError as exc:
        return WindowOutcome(key, "failed", failure=str(exc), duration_s=run.duration_s, timings=run.timings)
    except LogIngestError as exc:
        _record_failure(lake, key, "invalid_log", str(exc), run)
        return WindowOutcome(key, "failed", failure=str(exc), duration_s=run.duration_s, timings=run.timings)
    return WindowOutcome(
        key, "landed", samples=record.sample_rows, errored=record.errored_samples,
        duration_s=run.duration_s, timings=run.timings,
    )


def run_task_windows(
    lake: Lake,
    backend: SandboxBackend,
    export: RepoExport,
    facts: TaskFacts,
    settings: RunSettings,
    windows: Sequence[Window],
    *,
    warm: bool = True,
    pool: WarmPool | None = None,
    cancel: threading.Event | None = None,
    on_window: Callable[[WindowOutcome], None] | None = None,
) -> list[WindowOutcome]:
    """Run every window not yet committed; reuse the rest. Outcomes in window order.

    With a ``pool``, windows run in a warm sandbox that outlives this call (later windows of
    the same commit and task skip sandbox and Inspect start-up); without one, several windows
    share a warm sandbox for this call only, and a single window runs cold."""
    runtime = backend.runtime_digest()
    cfg = TaskRunConfig(
        repo=export.repo, task=facts.task, spec=facts.spec, model=settings.model,
        workdir=facts.workdir, model_args=dict(settings.model_args), seed=settings.seed,
        epochs=settings.epochs,
    )
    outcomes: list[WindowOutcome] = []
    todo: list[tuple[int, Window]] = []
    for i, window in enumerate(windows):
        key = batch_key_for(export.repo, export.commit, facts, settings, window,
                            backend_name=backend.name, runtime_digest=runtime)
        state = batch_state(lake, key)
        if state == "committed":
            outcomes.append(WindowOutcome(key, "reused"))
        elif state == "failed":
            outcomes.append(WindowOutcome(key, "failed", failure=read_failure(lake, key)))
        else:
            outcomes.append(None)  # type: ignore[arg-type]
            todo.append((i, window))
    if not todo:
        return outcomes

    def finish(i: int, outcome: WindowOutcome) -> None:
        outcomes[i] = outcome
        if on_window is not None:
            on_window(outcome)

    if pool is not None and warm and WarmPool.supports(backend):
        with pool.session(backend, export, cfg) as runner:
            for i, window in todo:
                if cancel is not None and cancel.is_set():
                    break
                run = runner.run_window(window, cancel=cancel)
                finish(i, _land(lake, run, cancel))
                if not run.ok:
                    break
        if any(o is not None and o.status in ("failed", "cancelled") for o in outcomes):
            pool.discard(backend, export, cfg)  # its state is in doubt after a failure
    elif warm and len(todo) > 1:
        with WarmTaskRunner(backend, export, cfg) as runner:
            for i, window in todo:
                if cancel is not None and cancel.is_set():
                    break
                finish(i, _land(lake, runner.run_window(window, cancel=cancel), cancel))
    else:
        for i, window in todo:
            if cancel is not None and cancel.is_set():
                break
            run = run_window_cold(
                backend, export, cfg, window,
                sample_ids=list(facts.sample_ids), task_name=facts.inspect_task, cancel=cancel,
            )
            finish(i, _land(lake, run, cancel))
    return [o for o in outcomes if o is not None]
