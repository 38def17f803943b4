"""Run an Inspect task over one sample window in a sandbox and classify what came back.

Windows. A task's sample ids are listed *in the sandbox* (task code is untrusted), ordered by
``sample_order.seeded_order`` (sha256 of seed and id) — the same order for head and base, and stable when samples are
added (a new id slots in without moving the others' relative order) — and a window
``[start, stop)`` of that order is run.

Cold and warm. Cold: one ``inspect eval`` process per window. Warm: one long-lived sandboxed
worker per (commit, task) that imports Inspect once and runs successive windows in-process
(:class:`WarmTaskRunner`); never shared across commits or tasks. Measured on this 2-core
machine (bubblewrap, 4-sample windows of a trivial no-model task, sample ids already known;
``tests/execution/test_inspect_runner.py::test_warm_windows_match_cold_and_are_faster`` prints them):

    cold: 4.5–6.5 s per window (sandbox + interpreter + Inspect import + task load + run)
    warm: ~2 s to start the session, 0.9–1.5 s for its first window (ids listed, task loaded),
          then 0.09–0.18 s per window — 25–50x less per window than cold

Listing a task's ids in its own sandbox costs about as much as a cold window (~4 s); a warm
session lists them in-process. Inspect's ``started_at``/``completed_at`` have one-second
resolution, so ``timings["run_s"]`` is coarse for short windows.

Classification. ``inspect eval`` exits 0 even when its log's status is ``error``, so the exit
code is never the verdict: the log header is. No log, an empty file, a file that is not an
Inspect log, a log with status ``error``/``cancelled``/``started`` that no sample's own error
explains, a sandbox timeout, kill or crash, and a log whose samples are not the window are
*infrastructure* failures, each recorded as itself, and the first cause wins. Samples the agent
got wrong are not failures here; they are scores. Neither is a sample that raised in the
repository's own code (solver, tool, scorer): windows run with ``fail_on_error=False`` so every
sample runs and the errored ones land as errored rows, and a log whose status is ``error``
because a sample raised (a task that sets its own ``fail_on_error``) lands the same way
(``lake.ingest.log_error_is_sample_error``). The statistics score those rows (see the stats README).

Positional ids. A sample without an id gets Inspect's own id, its 1-based position in the
dataset; the listing also carries each sample's input digest, and the samples table one per row,
so a positional id pairs only with a sample of the same input.

Config digest. ``config_digest`` is sha256 over the files the task's agent configuration can
come from: ``agent.yaml``/``agent.yml``/``agent.json``, ``skills/**``, ``prompts/**`` and
``.evals/**`` at the repository root, plus every file under the task's ``workdir`` (or, for a
task at the root, the task file's directory). Over-inclusive on purpose: a change that cannot
matter costs a re-run; a change that can matter and is missed costs a wrong verdict.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from evalrunner_assets.errors import EvalrunnerError
from evalrunner_assets.execution._inspect_worker import TASK_ERROR_MARK
from evalrunner_assets.execution._process import parse_reply
from evalrunner_assets.execution.environment import runtime_with_env
from evalrunner_assets.execution.sandbox import (
    SANDBOX_OUT_DIR,
    Limits,
    RepoExport,
    SandboxBackend,
    SandboxRequest,
    SandboxResult,
    SandboxStatus,
    WarmSession,
)
from evalrunner_assets.sample_order import seeded_order
from lake.batch import BatchKey, RunSettings, canonical_json
from lake.layout import Window

WORKER = "evalrunner_assets.execution._inspect_worker"
IDS_FILE = "sample_ids.json"
_DIGEST = re.compile(r"[0-9a-f]{8,64}")
MAX_LOG_BYTES = 256 * 1024**2
CONFIG_FILES = ("agent.yaml", "agent.yml", "agent.json")
CONFIG_DIRS = ("skills", "prompts", ".evals")

# Failure kinds, in words a reader of a batch record understands.
NO_LOG = "no_log"
EMPTY_LOG = "empty_log"
INVALID_LOG = "invalid_log"
LOG_STATUS = "log_status"  # the log says error / cancelled / started
SAMPLE_MISMATCH = "sample_mismatch"
MULTIPLE_LOGS = "multiple_logs"
REJECTED_OUTPUT = "rejected_output"
# The model gateway refused calls of this window because the comparison's budget was spent: not
# a finding about the agent or the infrastructure (the window lands nothing and is not retried).
BUDGET_SPENT = "budget_spent"


class InspectRunError(EvalrunnerError, RuntimeError):
    """A task's samples could not be listed or a window is invalid; the message says which.

    ``task_load``: the repository's own task code failed to load (an import that fails, a
    syntax error, a spec naming a missing file or task) — a fault of the commit, not of the
    sandbox."""

    def __init__(self, message: str, *, task_load: bool = False) -> None:
        super().__init__(message)
        self.task_load = task_load


class SampleListing(NamedTuple):
    """A task's samples as listed in the sandbox: Inspect task name, ids (as text, positional
    ids for samples without one) and each id's input digest (same order; empty when unknown)."""

    task: str
    ids: list[str]
    input_digests: list[str]


# --- sample order ---------------------------------------------------------------------------


def sample_order(sample_ids: list[str], seed: int) -> list[str]:
    """Ids in the seeded, pre-committed order shared by execution and statistics.

    The order of any two ids depends only on those ids and the seed, so it is identical for
    head and base and adding samples never reorders existing ones. Duplicate ids are refused:
    a window of a list with duplicates would not be a set of distinct inputs."""
    ids = [str(i) for i in sample_ids]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise InspectRunError(f"sample ids are not unique: {dup[:5]}")
    return seeded_order(ids, seed)


def window_ids(sample_ids: list[str], seed: int, window: Window) -> list[str]:
    """The ids of ``window`` in the seeded order (shorter at the end of the dataset)."""
    return sample_order(sample_ids, seed)[window.start : window.stop]


# --- config digest --------------------------------------------------------------------------


def config_digest(export_path: str | Path, workdir: str = ".", spec: str = "") -> str:
    """sha256 over the agent configuration a task sees (see the module docstring)."""
    root = Path(export_path)
    norm = posixpath.normpath(workdir or ".")
    if norm == ".":
        spec_file = spec.split("@", 1)[0]
        task_dir = posixpath.dirname(posixpath.normpath(spec_file)) if spec_file else ""
    else:
        task_dir = norm
    selected: set[str] = set()
    for name in CONFIG_FILES:
        if (root / name).is_file():
            selected.add(name)
    dirs = list(CONFIG_DIRS) + ([task_dir] if task_dir not in ("", ".") else [])
    for d in dirs:
        base = root / d
        if not base.is_dir() or base.is_symlink():
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for f in filenames:
                selected.add((Path(dirpath) / f).relative_to(root).as_posix())
    if task_dir in ("", ".") and spec:
        spec_path = posixpath.normpath(posixpath.join(norm, spec.split("@", 1)[0]))
        if (root / spec_path).is_file():
            selected.add(spec_path)
    h = hashlib.sha256()
    for rel in sorted(selected):
        p = root / rel
        if p.is_symlink():
            h.update(f"L {rel}\0{os.readlink(p)}\0".encode())
        elif p.is_file():
            data = p.read_bytes()
            h.update(f"F {rel}\0{len(data)}\0".encode())
            h.update(data)
    return h.hexdigest()[:16]


# --- results --------------------------------------------------------------------------------


@dataclass
class WindowRun:
    """One window of one task run in a sandbox, as judged by the controller."""

    key: BatchKey
    mode: str  # "cold" | "warm"
    status: str  # "ok" | "infra_failure"
    failure_kind: str | None  # one of the *_LOG / sandbox status names; None when ok
    failure_cause: str | None  # the first cause, in words
    log_bytes: bytes | None
    log_name: str | None
    log_status: str | None  # the Inspect log's own status
    sample_ids: list[str]
    sample_count: int  # (sample, epoch) rows in the log
    duration_s: float
    timings: dict[str, float] = field(default_factory=dict)  # sandbox_start_s, inspect_start_s, run_s
    exit_code: int | None = None
    stderr_tail: str = ""
    rejected_outputs: dict[str, str] = field(default_factory=dict)
    gateway_usage: dict[str, Any] | None = None  # the model gateway's meter for this window

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def infrastructure_failure(self) -> bool:
        return self.status == "infra_failure"


@dataclass(frozen=True)
class TaskRunConfig:
    """Everything that selects what runs for one task (besides the window)."""

    repo: str
    task: str  # manifest task id
    spec: str  # Inspect task spec, relative to workdir
    settings: RunSettings  # model, its arguments, seed, epochs
    workdir: str = "."
    task_args: dict[str, Any] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    env: dict[str, str] = field(default_factory=dict)
    # The commit's repository environment (its digest joins the batch key's runtime digest;
    # its directory is mounted read-only). Empty when the repository declares no dependencies.
    env_digest: str = ""
    python_env: str | None = None


def window_ids_digest(ids: list[str]) -> str:
    """Digest of the exact sample ids a window holds, in order: part of the batch key, so a
    change of order scheme or of the dataset never reuses a window under the same bounds."""
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]


def make_batch_key(
    repo: str,
    commit: str,
    *,
    task: str,
    spec: str,
    settings: RunSettings,
    task_args: dict[str, Any],
    window: Window,
    ids: list[str],
    config_digest: str,
    backend_name: str,
    runtime_digest: str,
) -> BatchKey:
    """The one construction of a batch key (the runner and the planner both call it)."""
    extra = [("window_ids", window_ids_digest(ids))]
    if task_args:
        extra.append(("task_args", canonical_json(task_args)))
    return BatchKey(
        repo=repo,
        commit=commit,
        task=task,
        spec=spec,
        settings=settings,
        window=window,
        config_digest=config_digest,
        backend=backend_name,
        runtime_digest=runtime_digest,
        extra=tuple(sorted(extra)),
    )


def batch_key(
    backend: SandboxBackend, export: RepoExport, cfg: TaskRunConfig, window: Window, ids: list[str]
) -> BatchKey:
    return make_batch_key(
        cfg.repo,
        export.commit,
        task=cfg.task,
        spec=cfg.spec,
        settings=cfg.settings,
        task_args=cfg.task_args,
        window=window,
        ids=ids,
        config_digest=config_digest(export.path, cfg.workdir, cfg.spec),
        backend_name=backend.name,
        runtime_digest=runtime_with_env(backend.runtime_digest(), cfg.env_digest),
    )


def _task_error(result: SandboxResult) -> str | None:
    """What the task's own code raised while it was loaded (``Type: message (at file:line)``),
    from the warm worker's reply or the cold listing's last stderr line; None when neither says."""
    if result.stdout:
        reply = parse_reply(result.stdout.strip())
        if isinstance(reply, dict) and reply.get("ok") is False and isinstance(reply.get("error"), str):
            return reply["error"][:600]
    for line in reversed(result.stderr_tail.splitlines()):
        if line.startswith(TASK_ERROR_MARK):
            return line[len(TASK_ERROR_MARK) :].strip()[:600]
    return None


def _load_failure(spec: str | None, error: str) -> str:
    """One line for a task that could not be loaded: the spec, what it raised, how to fix it."""
    hint = "fix the task file (it must import and build its Task inside the sandbox)"
    if error.startswith("TypeError") and "required" in error and "argument" in error:
        hint = "evalrunner passes no task arguments: give every parameter of the @task function a default"
    elif error.startswith("ModuleNotFoundError"):
        hint = (
            "declare the missing package in the repository's dependencies "
            "(uv.lock, pyproject.toml or requirements.txt, or the manifest's environment)"
        )
    return f"loading {'the task' if spec is None else f'task {spec!r}'} raised {error}; {hint}"


def _parse_ids(result: SandboxResult, spec: str | None = None) -> SampleListing:
    if not result.ran:
        raise InspectRunError(f"listing sample ids failed in the sandbox ({result.status.value}): {result.detail}")
    raw = result.outputs.get(IDS_FILE)
    if raw is None:
        error = _task_error(result)
        if error is not None:
            raise InspectRunError(_load_failure(spec, error), task_load=True)
        why = result.rejected_outputs.get(IDS_FILE, "never written")
        raise InspectRunError(
            f"listing sample ids wrote no {IDS_FILE} ({why}); stderr ends: {result.stderr_tail.strip()[-600:]}"
        )
    try:
        data = json.loads(raw)
        name, ids = str(data["task"]), [str(i) for i in data["ids"]]
        digests = [str(d) for d in data.get("input_digests") or []]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InspectRunError(f"{IDS_FILE} from the sandbox is malformed: {exc}") from None
    if any(i in ("", "None") for i in ids):
        raise InspectRunError(f"{IDS_FILE} from the sandbox lists an empty or None sample id")
    # A worker that predates input digests lists none (unknown: pairing then relies on the
    # digests the landed rows carry); a listing that has them has one per id.
    if digests and (len(digests) != len(ids) or not all(_DIGEST.fullmatch(d) for d in digests)):
        raise InspectRunError(
            f"{IDS_FILE} from the sandbox is malformed: expected one hex input digest per id "
            f"({len(ids)} ids, {len(digests)} digests)"
        )
    sample_order(ids, 0)  # raises on duplicates
    return SampleListing(name, ids, digests)


def _classify(
    result: SandboxResult, expected: list[str], epochs: int
) -> tuple[str | None, str | None, bytes | None, str | None, str | None, int, float | None]:
    """(failure_kind, cause, log bytes, log name, log status, sample rows, in-Inspect seconds)."""
    from inspect_ai.log import read_eval_log, read_eval_log_sample_summaries

    from lake.ingest import log_error_is_sample_error

    # The sandbox's own end comes first: a timeout also means "no log", but the timeout is the cause.
    if result.status in (SandboxStatus.TIMEOUT, SandboxStatus.CANCELLED, SandboxStatus.KILLED, SandboxStatus.CRASHED):
        return f"sandbox_{result.status.value}", result.detail or result.status.value, None, None, None, 0, None
    logs = {k: v for k, v in result.outputs.items() if k.endswith(".eval")}
    rejected_logs = {k: v for k, v in result.rejected_outputs.items() if k.endswith(".eval")}
    if not logs and rejected_logs:
        name, why = next(iter(sorted(rejected_logs.items())))
        return REJECTED_OUTPUT, f"log {name!r} was not collected: {why}", None, name, None, 0, None
    if not logs:
        tail = result.stderr_tail.strip()[-600:]
        how = f"exit code {result.exit_code}" if result.exit_code is not None else "no exit code"
        return (
            NO_LOG,
            f"no Inspect log was written ({how}); stderr ends: {tail or '(empty)'}",
            None,
            None,
            None,
            0,
            None,
        )
    if len(logs) > 1:
        return MULTIPLE_LOGS, f"expected one log, found {len(logs)}: {sorted(logs)[:5]}", None, None, None, 0, None
    name, data = next(iter(logs.items()))
    if not data:
        return EMPTY_LOG, f"log {name!r} is empty (0 bytes)", data, name, None, 0, None
    with tempfile.TemporaryDirectory(prefix="evalrunner-log-") as tmp:
        path = os.path.join(tmp, "window.eval")
        with open(path, "wb") as f:
            f.write(data)
        try:
            header = read_eval_log(path, header_only=True)
            summaries = read_eval_log_sample_summaries(path)
        except Exception as exc:  # the format is Inspect's; any failure to read is "not a log"
            return (
                INVALID_LOG,
                f"log {name!r} is not a valid Inspect log: {type(exc).__name__}: {str(exc)[:300]}",
                data,
                name,
                None,
                0,
                None,
            )
    run_s: float | None = None
    try:
        from datetime import datetime

        s, c = header.stats.started_at, header.stats.completed_at
        if s and c:
            run_s = (datetime.fromisoformat(c) - datetime.fromisoformat(s)).total_seconds()
    except (ValueError, TypeError, AttributeError):
        pass
    status = header.status
    if status == "error" and log_error_is_sample_error(header.error, [s.error for s in summaries]):
        # A sample raised in the task's own code and the task stopped on it: the agent's
        # failure, landed as errored rows (the window's samples are still checked below).
        pass
    elif status != "success":
        msg = header.error.message if header.error is not None else ""
        return (
            LOG_STATUS,
            f"log {name!r} has status {status!r}{': ' + msg[:400] if msg else ''}",
            data,
            name,
            status,
            len(summaries),
            run_s,
        )
    got = sorted({str(s.id) for s in summaries})
    if got != sorted(expected) or len(summaries) != len(expected) * epochs:
        return (
            SAMPLE_MISMATCH,
            f"log {name!r} holds samples {got[:5]}… ({len(summaries)} rows), "
            f"expected the window's {len(expected)} ids × {epochs} epochs",
            data,
            name,
            status,
            len(summaries),
            run_s,
        )
    return None, None, data, name, status, len(summaries), run_s


def _window_run(
    key: BatchKey,
    mode: str,
    result: SandboxResult,
    expected: list[str],
    epochs: int,
    timings: dict[str, float],
    extra_cause: str | None = None,
) -> WindowRun:
    kind, cause, data, name, status, rows, run_s = _classify(result, expected, epochs)
    if kind is None and extra_cause:
        kind, cause = "worker_error", extra_cause
    refused = int((result.gateway_usage or {}).get("budget_refusals") or 0)
    if refused:
        # Whatever the log says, samples that lost model calls to the budget are not evidence.
        kind, cause = (
            BUDGET_SPENT,
            (f"the model budget was spent: the gateway refused {refused} model call(s) of this window"),
        )
    t = dict(timings)
    t["total_s"] = result.duration_s
    if run_s is not None:
        t["run_s"] = run_s
        t["inspect_start_s"] = max(0.0, result.duration_s - run_s)
    return WindowRun(
        key=key,
        mode=mode,
        status="ok" if kind is None else "infra_failure",
        failure_kind=kind,
        failure_cause=cause,
        log_bytes=data,
        log_name=name,
        log_status=status,
        sample_ids=list(expected),
        sample_count=rows,
        duration_s=result.duration_s,
        timings=t,
        exit_code=result.exit_code,
        stderr_tail=result.stderr_tail[-2000:],
        rejected_outputs=dict(result.rejected_outputs),
        gateway_usage=result.gateway_usage,
    )


def _request(
    export: RepoExport,
    cfg: TaskRunConfig,
    argv: tuple[str, ...],
    wall: float | None = None,
    labels: dict[str, str] | None = None,
) -> SandboxRequest:
    limits = cfg.limits if wall is None else replace(cfg.limits, wall_seconds=wall)
    limits = replace(limits, output_bytes=min(limits.output_bytes, MAX_LOG_BYTES))
    return SandboxRequest(
        argv=argv,
        export=export,
        workdir=cfg.workdir,
        env=dict(cfg.env),
        limits=limits,
        python_env=cfg.python_env,
        labels={"repo": cfg.repo, "commit": export.commit, "task": cfg.task, **(labels or {})},
    )


# --- cold -----------------------------------------------------------------------------------


def list_sample_ids(
    backend: SandboxBackend, export: RepoExport, cfg: TaskRunConfig, cancel: threading.Event | None = None
) -> SampleListing:
    """The task's samples (:class:`SampleListing`), listed in a fresh sandbox."""
    argv = ("python", "-m", WORKER, "ids", cfg.spec, json.dumps(cfg.task_args))
    result = backend.run(_request(export, cfg, argv, labels={"step": "ids"}), cancel=cancel)
    return _parse_ids(result, cfg.spec)


def list_sample_ids_many(
    backend: SandboxBackend, export: RepoExport, cfgs: list[TaskRunConfig], cancel: threading.Event | None = None
) -> dict[str, SampleListing | InspectRunError]:
    """Sample ids of several tasks of one commit, listed in one warm sandbox per workdir (one
    interpreter and one Inspect import instead of one per task). Per task: its
    :class:`SampleListing`, or the error that listing it raised. Backends without warm sessions list cold."""
    from evalrunner_assets.execution.sandbox import SandboxBackend as _Base

    out: dict[str, SampleListing | InspectRunError] = {}
    if type(backend).open_session is _Base.open_session:
        for cfg in cfgs:
            try:
                out[cfg.task] = list_sample_ids(backend, export, cfg, cancel)
            except InspectRunError as exc:
                out[cfg.task] = exc
        return out
    by_workdir: dict[str, list[TaskRunConfig]] = {}
    for cfg in cfgs:
        by_workdir.setdefault(cfg.workdir, []).append(cfg)
    for group in by_workdir.values():
        try:
            runner = WarmTaskRunner(backend, export, group[0])
        except InspectRunError as exc:
            for cfg in group:
                out[cfg.task] = exc
            continue
        with runner:
            for cfg in group:
                result = runner.session.call(
                    {"op": "ids", "spec": cfg.spec, "task_args": cfg.task_args}, timeout=120.0, cancel=cancel
                )
                try:
                    out[cfg.task] = _parse_ids(result, cfg.spec)
                except InspectRunError as exc:
                    out[cfg.task] = exc
    return out


def cold_argv(cfg: TaskRunConfig, task_name: str, ids: list[str]) -> tuple[str, ...]:
    """``inspect eval`` for one window (exact ids: glob characters escaped, task-scoped)."""
    from evalrunner_assets.execution._inspect_worker import exact_selector

    bad = [i for i in ids if "," in i]
    if bad:
        raise InspectRunError(
            f"sample ids with ',' cannot be selected on the inspect command line: {bad[:3]}; use warm mode"
        )
    selectors = ",".join(str(exact_selector(task_name, int(i) if i.isdigit() else i)) for i in ids)
    # ``python -m inspect_ai``: the interpreter on PATH, which is the repository environment's
    # when there is one (the ``inspect`` script would run evalrunner's own interpreter).
    argv = [
        "python",
        "-m",
        "inspect_ai",
        "eval",
        cfg.spec,
        "--model",
        cfg.settings.model,
        "--sample-id",
        selectors,
        "--log-dir",
        SANDBOX_OUT_DIR,
        "--log-format",
        "eval",
        "--seed",
        str(cfg.settings.seed),
        "--epochs",
        str(cfg.settings.epochs),
        "--display",
        "none",
        "--log-level",
        "warning",
        "--no-log-realtime",
        "--no-fail-on-error",
    ]
    for k, v in sorted(cfg.settings.model_args.items()):
        argv += ["-M", f"{k}={json.dumps(v)}"]
    for k, v in sorted(cfg.task_args.items()):
        argv += ["-T", f"{k}={json.dumps(v)}"]
    return tuple(argv)


def run_window_cold(
    backend: SandboxBackend,
    export: RepoExport,
    cfg: TaskRunConfig,
    window: Window,
    *,
    sample_ids: list[str] | None = None,
    task_name: str | None = None,
    cancel: threading.Event | None = None,
) -> WindowRun:
    """One ``inspect eval`` process in a fresh sandbox for ``window``."""
    if sample_ids is None or task_name is None:
        task_name, sample_ids, _ = list_sample_ids(backend, export, cfg, cancel)
    ids = window_ids(sample_ids, cfg.settings.seed, window)
    if not ids:
        raise InspectRunError(f"window {window.name} is past the end of {len(sample_ids)} samples")
    key = batch_key(backend, export, cfg, window, ids)
    result = backend.run(
        _request(export, cfg, cold_argv(cfg, task_name, ids), labels={"window": window.name}), cancel=cancel
    )
    return _window_run(key, "cold", result, ids, cfg.settings.epochs, {})


# --- warm -----------------------------------------------------------------------------------


class WarmTaskRunner:
    """A warm sandbox for one (commit, task): lists ids once, then runs windows in-process.

    Use as a context manager; the session is closed (its process group killed) on exit. A set
    ``cancel`` stops the start too (the worker takes seconds to import Inspect)."""

    def __init__(
        self,
        backend: SandboxBackend,
        export: RepoExport,
        cfg: TaskRunConfig,
        *,
        session_timeout: float = 120.0,
        cancel: threading.Event | None = None,
    ) -> None:
        self.backend, self.export, self.cfg = backend, export, cfg
        started = time.monotonic()
        self.session: WarmSession = backend.open_session(
            _request(export, cfg, ("python", "-m", WORKER, "serve"), labels={"step": "warm"})
        )
        self.timings: dict[str, float] = {}
        self.listing: SampleListing | None = None
        self._ready(session_timeout, cancel)
        self.timings["sandbox_start_s"] = time.monotonic() - started

    def _ready(self, timeout: float, cancel: threading.Event | None) -> None:
        result = self.session.call({"op": "ping"}, timeout=timeout, cancel=cancel)
        if result.status is not SandboxStatus.OK:
            self.close()
            raise InspectRunError(
                f"warm worker did not start: {result.status.value}: {result.detail}; "
                f"stderr ends: {result.stderr_tail.strip()[-600:]}"
            )

    def list_ids(self, timeout: float = 120.0, cancel: threading.Event | None = None) -> SampleListing:
        if self.listing is None:
            result = self._call({"op": "ids", "spec": self.cfg.spec, "task_args": self.cfg.task_args}, timeout, cancel)
            self.listing = _parse_ids(result, self.cfg.spec)
        return self.listing

    def _call(self, payload: dict[str, Any], timeout: float, cancel: threading.Event | None) -> SandboxResult:
        return self.session.call(payload, timeout=timeout, cancel=cancel)

    def run_window(
        self, window: Window, *, timeout: float | None = None, cancel: threading.Event | None = None
    ) -> WindowRun:
        sample_ids = self.list_ids(cancel=cancel).ids
        ids = window_ids(sample_ids, self.cfg.settings.seed, window)
        if not ids:
            raise InspectRunError(f"window {window.name} is past the end of {len(sample_ids)} samples")
        key = batch_key(self.backend, self.export, self.cfg, window, ids)
        payload = {
            "op": "eval",
            "spec": self.cfg.spec,
            "model": self.cfg.settings.model,
            "model_args": self.cfg.settings.model_args,
            "task_args": self.cfg.task_args,
            "sample_ids": ids,
            "seed": self.cfg.settings.seed,
            "epochs": self.cfg.settings.epochs,
        }
        result = self._call(payload, timeout or self.cfg.limits.wall_seconds, cancel)
        reply_error = None
        eval_s = None
        try:
            reply = json.loads(result.stdout) if result.stdout else {}
            if isinstance(reply, dict) and reply.get("ok") is False:
                reply_error = f"warm worker reported: {str(reply.get('error'))[:500]}"
            if isinstance(reply, dict) and isinstance(reply.get("eval_s"), (int, float)):
                eval_s = min(max(0.0, float(reply["eval_s"])), result.duration_s)  # untrusted: clamped
        except ValueError:
            pass  # the reply is untrusted and optional; the log decides
        # The session's start-up is charged to its first window; later windows ride on it.
        timings = {"sandbox_start_s": self.timings.pop("sandbox_start_s", 0.0)}
        if eval_s is not None:
            # Time inside Inspect's eval() as the sandbox reports it (sub-second, unlike the
            # log's own timestamps): for measurements only, never for decisions.
            timings["eval_s"] = eval_s
        run = _window_run(key, "warm", result, ids, self.cfg.settings.epochs, timings)
        if run.failure_kind == NO_LOG and reply_error:
            # The worker named what was raised: that is the cause, not the traceback's tail.
            run.failure_cause = f"{reply_error}; no Inspect log was written"
        return run

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> WarmTaskRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
