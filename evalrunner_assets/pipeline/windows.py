"""Run sample windows of one (commit, task) in the sandbox and land them in the lake.

A window whose batch is already committed is reused, never re-run (the batch key holds
everything that can change a result). A window that fails for infrastructure reasons leaves a
failure record with its first cause, never sample rows.

Retry (``retry_transient=True``, what the CLI driver uses): a window whose *warm* sandbox died
under it (worker crashed or exited without a log) is run once more in a fresh sandbox before it
becomes a task failure — a warm worker carries state across windows, so its death says little
about the window. Timeouts, logs with status ``error``, invalid logs and sample mismatches are
not retried: they recur on a re-run and a retry would only double their cost. Every failed
attempt is reported (``WindowOutcome.failed_attempts``) so an outage breaker counts each one.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from evalrunner_assets.execution.environment import runtime_with_env
from evalrunner_assets.execution.inspect_runner import (
    BUDGET_SPENT,
    TaskRunConfig,
    WarmTaskRunner,
    WindowRun,
    make_batch_key,
    run_window_cold,
    window_ids,
)
from evalrunner_assets.execution.sandbox import RepoExport, SandboxBackend
from evalrunner_assets.execution.warm_pool import WarmPool
from evalrunner_assets.pipeline.facts import TaskFacts, task_environment
from lake import LAYOUT, Lake, Window
from lake.batch import BatchKey, RunSettings
from lake.ingest import BatchConflictError, LogIngestError, LogStatusError, land_batch
from lake.integrity import LakeIntegrityError, load_record, quarantine, verify_record
from lake.storage import LakeUnavailable, LakeWriteError


@dataclass
class WindowOutcome:
    """One window of one (commit, task): reused, landed, or failed (with the first cause)."""

    key: BatchKey
    status: str  # "reused" | "landed" | "failed" | "cancelled" | "budget_stopped"
    samples: int = 0
    errored: int = 0
    failure: str | None = None
    duration_s: float = 0.0
    timings: dict | None = None
    failure_kind: str | None = None
    # Attempts that ran in a sandbox in this call (0: reused, or a failure already on record).
    attempts: int = 0
    # (kind, cause) of each failed attempt in this call, retried ones included, in order.
    failed_attempts: list[tuple[str, str]] = field(default_factory=list)
    # What a failed window still consumed, when its log says (None: unknown).
    usage: dict | None = None

    # True when another process committed this window while this one ran it: this log was
    # discarded as a duplicate (the first committed landing wins), which is not a failure.
    duplicate: bool = False

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
    """The batch key of a window, from what is known before anything runs (the same
    construction the runner uses when it lands the window)."""
    ids = window_ids(list(facts.sample_ids), settings.seed, window)
    return make_batch_key(
        repo,
        commit,
        task=facts.task,
        spec=facts.spec,
        settings=settings,
        task_args={},
        window=window,
        ids=ids,
        config_digest=facts.config_digest,
        backend_name=backend_name,
        runtime_digest=runtime_with_env(runtime_digest, facts.env_digest),
    )


def session_config(
    repo: str,
    task: str,
    spec: str,
    workdir: str,
    settings: RunSettings,
    *,
    env_digest: str = "",
    python_env: str | None = None,
) -> TaskRunConfig:
    """The run configuration of a task's windows (and so the key of its warm sandbox)."""
    return TaskRunConfig(
        repo=repo,
        task=task,
        spec=spec,
        settings=settings,
        workdir=workdir,
        env_digest=env_digest,
        python_env=python_env,
    )


def task_session_config(
    backend: SandboxBackend,
    export: RepoExport,
    facts: TaskFacts,
    settings: RunSettings,
    *,
    cancel: threading.Event | None = None,
) -> TaskRunConfig:
    """The run configuration of one task's windows at one commit, with its environment."""
    return session_config(
        export.repo,
        facts.task,
        facts.spec,
        facts.workdir,
        settings,
        env_digest=facts.env_digest,
        python_env=task_environment(backend, export, facts, cancel=cancel),
    )


def batch_state(lake: Lake, key: BatchKey) -> str:
    """``committed`` (landed, status ok, its files verified), ``failed`` (an infrastructure
    failure is on record) or ``absent``.

    A committed batch is trusted only when every file its record vouches for matches (size
    always; sha256 the first time this process sees the file): a mismatch, or a record that
    cannot be read, quarantines the batch (``lake.integrity``) and it is ``absent`` — the
    window runs again, and its bad rows are never used."""
    rec = LAYOUT.batch_record(key.repo, key.commit, key.task, key.window, key.digest)
    if lake.exists(rec):
        try:
            record = load_record(lake, rec)
            if record.status == "ok":
                verify_record(lake, record)
        except FileNotFoundError:  # quarantined by another process just now
            return "absent"
        except LakeIntegrityError as exc:
            quarantine(lake, rec, str(exc))
            return "absent"
        return "committed" if record.status == "ok" else "failed"
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


# Failure kinds of a warm sandbox that died under a window: retried once in a fresh sandbox.
TRANSIENT_KINDS = frozenset({"sandbox_crashed", "no_log", "worker_error"})


def log_usage(log_bytes: bytes | None) -> dict[str, Any] | None:
    """Samples and model usage a (possibly failed) Inspect log records, read through
    ``inspect_ai.log``; None when there is no readable log (then the spend is unknown)."""
    if not log_bytes:
        return None
    import io

    from inspect_ai.log import read_eval_log

    try:
        fmt: Literal["eval", "json"] = "eval" if log_bytes[:4] == b"PK\x03\x04" else "json"
        log = read_eval_log(io.BytesIO(log_bytes), format=fmt)
    except Exception:  # not a readable log: nothing can be said about its spend
        return None
    models: dict[str, dict[str, int]] = {}
    for model, u in ((log.stats.model_usage if log.stats else None) or {}).items():
        models[model] = {
            "input_tokens": int(u.input_tokens or 0),
            "output_tokens": int(u.output_tokens or 0),
            "total_tokens": int(u.total_tokens or 0),
        }
    samples = log.samples or []
    return {
        "samples": len(samples),
        "samples_errored": sum(1 for smp in samples if smp.error is not None),
        "input_tokens": sum(m["input_tokens"] for m in models.values()),
        "output_tokens": sum(m["output_tokens"] for m in models.values()),
        "total_tokens": sum(m["total_tokens"] for m in models.values()),
        "models": models,
        "log_status": log.status,
    }


def failure_usage(lake: Lake, key: BatchKey) -> dict[str, Any] | None:
    """The usage recorded with a failed batch (see :func:`log_usage`), if any."""
    fail = LAYOUT.batch_failure(key.repo, key.commit, key.task, key.window, key.digest)
    if lake.exists(fail):
        return json.loads(lake.read_bytes(fail)).get("usage")
    return None


def retire_failures(lake: Lake, repo: str, commits: Iterable[str]) -> list[str]:
    """Retry, on this new request, the windows of ``commits`` that failed on infrastructure
    before it: their failure records move to ``failures-retired/`` (copied first, then removed,
    so a crash in between loses nothing), and the planner sees those windows as never run. A
    commit whose facts record a task that could not be listed is learnt again the same way (its
    ``tasks.json`` moves there too).

    Within one request a failure stops its task (no retry loop against a broken sandbox); a
    later request — the same command run again after an outage, a new PR on the same base,
    ``/eval more`` — gets one more try. Returns the retired failure records' paths."""
    from evalrunner_assets.pipeline.facts import load_facts

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    retired = []
    for commit in dict.fromkeys(commits):
        rels = lake.glob(LAYOUT.failure_glob(repo, commit))
        facts = load_facts(lake, repo, commit)
        if facts is not None and any(t.failure for t in facts.tasks.values()):
            # Some task's sample ids could not be listed: the commit is learnt again.
            rels.append(LAYOUT.commit_tasks(repo, commit))
        for rel in rels:
            lake.write_bytes(LAYOUT.retired_failure(rel, stamp), lake.read_bytes(rel))
            lake.remove(rel)
            retired.append(rel)
    return retired


def record_failure(lake: Lake, key: BatchKey, kind: str, cause: str, run: WindowRun | None = None) -> None:
    """Record an infrastructure failure of ``key`` (its first cause); the task stops there."""
    _record_failure(lake, key, kind, cause, run)


def _record_failure(lake: Lake, key: BatchKey, kind: str, cause: str, run: WindowRun | None) -> None:
    payload = {
        "batch": key.digest,
        "key": key.as_record(),
        "kind": kind,
        "cause": cause,
        "recorded_at": datetime.now(UTC).isoformat(),
        "exit_code": None if run is None else run.exit_code,
        "stderr_tail": "" if run is None else run.stderr_tail[-4000:],
        "rejected_outputs": {} if run is None else run.rejected_outputs,
        # Money spent is money spent: a log with status error still says what it used.
        "usage": None if run is None else log_usage(run.log_bytes),
    }
    rel = LAYOUT.batch_failure(key.repo, key.commit, key.task, key.window, key.digest)
    lake.write_bytes(rel, json.dumps(payload, indent=2, sort_keys=True, default=str).encode())


def record_gateway_usage(lake: Lake, run: WindowRun) -> None:
    """Land the model gateway's meter of a window beside its log (landed or not)."""
    if run.gateway_usage is None:
        return
    key = run.key
    payload = {
        "batch": key.digest,
        "key": key.as_record(),
        "window_status": run.status,
        "failure_kind": run.failure_kind,
        "recorded_at": datetime.now(UTC).isoformat(),
        "usage": run.gateway_usage,
    }
    rel = LAYOUT.gateway_usage(key.repo, key.commit, key.task, key.window, key.digest)
    lake.write_bytes(rel, json.dumps(payload, indent=2, sort_keys=True, default=str).encode())


def _sum_gateway_usage(usages: Sequence[dict[str, Any] | None]) -> dict[str, Any]:
    total: dict[str, Any] = {"models": {}, "attempts": 0}
    for u in usages:
        if not u:
            continue
        total["attempts"] += 1
        for k, v in u.items():
            if k == "models":
                for m, mu in v.items():
                    tm = total["models"].setdefault(m, {})
                    for mk, mv in mu.items():
                        tm[mk] = None if mv is None or tm.get(mk, 0) is None else tm.get(mk, 0) + mv
            elif isinstance(v, (int, float)) or v is None:
                total[k] = None if v is None or total.get(k, 0) is None else total.get(k, 0) + v
    return total


def _metered_usage(logged: dict[str, Any] | None, metered: dict[str, Any] | None) -> dict[str, Any]:
    """A stopped window's spend: the gateway metered every call, including those of samples
    whose log records no usage (an errored sample's model calls are easily lost)."""
    usage = dict(logged or {"samples": 0, "samples_errored": 0, "log_status": None})
    models = {
        m: {k: int(u[k]) for k in ("input_tokens", "output_tokens", "total_tokens")}
        for m, u in ((metered or {}).get("models") or {}).items()
    }
    usage["models"] = models
    for k in ("input_tokens", "output_tokens", "total_tokens"):
        usage[k] = sum(m[k] for m in models.values())
    return usage


def _record_failure_quietly(lake: Lake, key: BatchKey, kind: str, cause: str, run: WindowRun | None) -> None:
    """Record a failure when the lake lets us (a full disk may refuse the record too; the
    outcome still carries the cause and the window stays absent, so it runs again)."""
    try:
        _record_failure(lake, key, kind, cause, run)
    except (LakeWriteError, LakeUnavailable):
        pass


def _failed_landing(key: BatchKey, run: WindowRun, kind: str, exc: Exception) -> WindowOutcome:
    """A window that ran but could not be landed: its usage still counts (read from its log)."""
    return WindowOutcome(
        key,
        "failed",
        failure=str(exc),
        failure_kind=kind,
        duration_s=run.duration_s,
        timings=run.timings,
        usage=log_usage(run.log_bytes),
    )


def _land(lake: Lake, run: WindowRun, cancel: threading.Event | None) -> WindowOutcome:
    key = run.key
    record_gateway_usage(lake, run)
    if run.failure_kind == BUDGET_SPENT:
        # Neither the agent's failure nor the infrastructure's: nothing is recorded as a failure,
        # so the breaker never counts it and a later request (a larger budget) runs it again.
        return WindowOutcome(
            key,
            "budget_stopped",
            failure=run.failure_cause,
            failure_kind=BUDGET_SPENT,
            duration_s=run.duration_s,
            timings=run.timings,
            usage=_metered_usage(log_usage(run.log_bytes), run.gateway_usage),
        )
    if (not run.ok or run.log_bytes is None) and cancel is not None and cancel.is_set():
        # Cancelled is not a finding about the infrastructure: nothing is recorded, so the
        # window runs again when the comparison resumes.
        return WindowOutcome(key, "cancelled", failure="cancelled", duration_s=run.duration_s)
    if not run.ok or run.log_bytes is None:
        cause = run.failure_cause or "the sandbox produced no usable log"
        kind = run.failure_kind or "infra_failure"
        _record_failure(lake, key, kind, cause, run)
        return WindowOutcome(
            key,
            "failed",
            failure=f"{run.failure_kind}: {cause}",
            failure_kind=kind,
            duration_s=run.duration_s,
            timings=run.timings,
            usage=log_usage(run.log_bytes),
        )
    meta = {"mode": run.mode, "duration_s": round(run.duration_s, 3), "timings": run.timings}
    try:
        record = land_batch(lake, key, run.log_bytes, run_meta=meta)
    except BatchConflictError:
        # Another process landed this window first (the same request run twice, or two PRs on
        # one base): its batch is reused and this log discarded. Not a failure.
        return WindowOutcome(key, "reused", duration_s=run.duration_s, timings=run.timings, duplicate=True)
    except LakeUnavailable as exc:
        # The store is down: nothing can be recorded there either; the breaker counts it.
        return _failed_landing(key, run, "lake_unavailable", exc)
    except LakeWriteError as exc:
        # Landing failed (e.g. the disk is full): the lake's fault, not the sandbox's.
        _record_failure_quietly(lake, key, "lake_write", str(exc), run)
        return _failed_landing(key, run, "lake_write", exc)
    except LogStatusError as exc:
        return _failed_landing(key, run, "log_status", exc)
    except LogIngestError as exc:
        _record_failure(lake, key, "invalid_log", str(exc), run)
        return WindowOutcome(
            key, "failed", failure=str(exc), failure_kind="invalid_log", duration_s=run.duration_s, timings=run.timings
        )
    return WindowOutcome(
        key,
        "landed",
        samples=record.sample_rows,
        errored=record.errored_samples,
        duration_s=run.duration_s,
        timings=run.timings,
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
    retry_transient: bool = False,
) -> list[WindowOutcome]:
    """Run every window not yet committed; reuse the rest. Outcomes in window order.

    With a ``pool``, windows run in a warm sandbox that outlives this call (later windows of
    the same commit and task skip sandbox and Inspect start-up); without one, several windows
    share a warm sandbox for this call only, and a single window runs cold. A cancelled window
    (``cancel`` set) records nothing, so it runs again when the comparison resumes."""
    runtime = backend.runtime_digest()
    cfg = task_session_config(backend, export, facts, settings, cancel=cancel)
    windows = list(dict.fromkeys(windows))  # a window asked for twice runs once
    outcomes: list[WindowOutcome | None] = []  # None: still to run (filled by finish)
    todo: list[tuple[int, Window]] = []
    for i, window in enumerate(windows):
        key = batch_key_for(
            export.repo, export.commit, facts, settings, window, backend_name=backend.name, runtime_digest=runtime
        )
        state = batch_state(lake, key)
        if state == "committed":
            outcomes.append(WindowOutcome(key, "reused"))
        elif state == "failed":
            outcomes.append(WindowOutcome(key, "failed", failure=read_failure(lake, key)))
        else:
            outcomes.append(None)
            todo.append((i, window))
    if not todo:
        return [o for o in outcomes if o is not None]

    def cancelled() -> bool:
        return cancel is not None and cancel.is_set()

    def finish(i: int, runs: list[WindowRun]) -> WindowOutcome:
        if len(runs) > 1 and any(r.gateway_usage for r in runs):
            # A retried window's record counts every attempt's model calls: all were paid for.
            runs[-1].gateway_usage = _sum_gateway_usage([r.gateway_usage for r in runs])
        outcome = _land(lake, runs[-1], cancel)
        outcome.attempts = len(runs)
        outcome.failed_attempts = [(r.failure_kind or "infra_failure", r.failure_cause or "") for r in runs[:-1]]
        if outcome.status == "failed":
            outcome.failed_attempts.append((outcome.failure_kind or "infra_failure", outcome.failure or ""))
        outcomes[i] = outcome
        if on_window is not None:
            on_window(outcome)
        return outcome

    def retry_worthy(run: WindowRun) -> bool:
        return (
            retry_transient
            and not run.ok
            and run.mode == "warm"
            and not cancelled()
            and run.failure_kind in TRANSIENT_KINDS
        )

    def cold(window: Window) -> WindowRun:
        return run_window_cold(
            backend, export, cfg, window, sample_ids=list(facts.sample_ids), task_name=facts.inspect_task, cancel=cancel
        )

    if pool is not None and warm and WarmPool.supports(backend):
        for i, window in todo:
            if cancelled():
                break
            runs: list[WindowRun] = []
            with pool.session(backend, export, cfg, cancel) as runner:
                runs.append(runner.run_window(window, cancel=cancel))
            if not runs[-1].ok:
                pool.discard(backend, export, cfg)  # its state is in doubt after a failure
                if retry_worthy(runs[-1]):
                    with pool.session(backend, export, cfg, cancel) as runner:  # a fresh sandbox
                        runs.append(runner.run_window(window, cancel=cancel))
                    if not runs[-1].ok:
                        pool.discard(backend, export, cfg)
            done = finish(i, runs)
            if done.status != "landed" and not done.duplicate:
                break
    elif warm and len(todo) > 1:
        with WarmTaskRunner(backend, export, cfg, cancel=cancel) as runner:
            for i, window in todo:
                if cancelled():
                    break
                runs = [runner.run_window(window, cancel=cancel)]
                if retry_worthy(runs[-1]):
                    runs.append(cold(window))
                finish(i, runs)
    else:
        for i, window in todo:
            if cancelled():
                break
            finish(i, [cold(window)])
    return [o for o in outcomes if o is not None]
