"""The comparison engine: what next, run it, land it, decide, report — for one comparison.

The same decisions the sensors make: ``assess`` → ``next_steps``. First the commits not learnt
yet are learnt at once (discovery in the sandbox, then each task's sample ids listed in the warm
sandbox its windows will use); then the sample windows of all tasks and both commits run packed
on one bounded worker pool (:mod:`evalrunner_assets.pipeline.scheduler`: no per-round barrier,
an outage breaker folded in submission order, cancellation, resume). While windows run, the
comparison document (and so the in-progress check run) is saved again at most every
``progress_every_s``; at the end the final document and its PR report.

What the engine did is told to a :class:`Recorder` (the CLI records it in Dagster; see
``evalrunner_assets.assets.recording``): each learnt commit, each finished (commit, task) with
its windows' outcomes, each saved comparison and each written report. Planning after each
window reads only what changed (:class:`~evalrunner_assets.pipeline.assess.AssessCache`).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import functools
import importlib
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from evalrunner_assets.discovery import DiscoveryError, read_agent_model
from evalrunner_assets.documents.comparison import ComparisonDocument, Status
from evalrunner_assets.errors import Cancelled, EvalrunnerError, Outage
from evalrunner_assets.execution import pid_alive
from evalrunner_assets.execution.inspect_runner import InspectRunError
from evalrunner_assets.execution.sandbox import RepoExport, SandboxBackend
from evalrunner_assets.gateway import GatewayError, ModelGateway, provider_of, start_gateway, with_gateway
from evalrunner_assets.pipeline import assess as assess_mod
from evalrunner_assets.pipeline.capabilities import (
    EngineOptions,
    EngineResources,
    SandboxCounter,
    WorkerCounter,
)
from evalrunner_assets.pipeline.facts import learn_commit, load_facts
from evalrunner_assets.pipeline.interrupts import SigintCount, is_interrupt, sigint_ignored, sigint_sets
from evalrunner_assets.pipeline.keys import commit_key, parse_commit_key
from evalrunner_assets.pipeline.lease import ComparisonLease
from evalrunner_assets.pipeline.live import LiveRecorder
from evalrunner_assets.pipeline.loop import Step, next_steps
from evalrunner_assets.pipeline.publish import SavedComparison, WrittenReport, save_comparison, write_report
from evalrunner_assets.pipeline.scheduler import (
    JOIN_SECONDS,
    PackedScheduler,
    Unit,
    default_workers,
    failure_kind,
    sweep_orphaned_temp_files,
    sweep_temp_file_of,
)
from evalrunner_assets.pipeline.spec import ComparisonRequest, open_comparison
from evalrunner_assets.pipeline.windows import (
    RunSettings,
    WindowOutcome,
    batch_key_for,
    batch_state,
    record_failure,
    retire_failures,
    run_task_windows,
    session_config,
)
from evalrunner_assets.report.markdown import format_usd
from lake import LAYOUT, Lake, Window, integrity
from lake.storage import LakeUnavailable, LakeWriteError


class ComparisonFailed(EvalrunnerError, RuntimeError):
    """A step of the comparison failed; the message names the step and the cause, ``where`` says
    what the step was doing for a person, and ``__cause__`` is the original exception."""

    where: str | None = None

    def __init__(self, message: str, where: str | None = None) -> None:
        super().__init__(message)
        self.where = where


class ComparisonStopped(Outage, ComparisonFailed):
    """The outage breaker (or the lake) stopped the comparison; ``result`` is the saved document
    (``status: "stopped"``, ``breaker``: the failures that tripped it)."""

    def __init__(
        self, message: str, result: ComparisonDocument, *, user_error: bool = False, hint: str | None = None
    ) -> None:
        super().__init__(message)
        self.result = result
        # Every failure was the same mistake in the comparison's configuration (e.g. an unknown
        # model), not an outage: the command reports it as a bad input.
        self.user_error = user_error
        self.hint = hint


class ComparisonCancelled(Cancelled, KeyboardInterrupt):
    """The comparison was cancelled (Ctrl-C, another handler's interrupt, or ``stop`` set by the
    caller) and the cancellation saved: the document says ``status: "cancelled"`` (or, when the
    state could not be assessed, the document saved before, marked so). ``save_errors``: one line
    for each step of stopping and saving that failed, for the command to print."""

    def __init__(self, reason: str, save_errors: Sequence[str] = ()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.save_errors = list(save_errors)


class Recorder(Protocol):
    """Where the engine's work is recorded besides the lake (e.g. a Dagster instance). Calls come
    in the order the work happened; a recorder may do its work later, on its own thread."""

    def start(self, request: ComparisonRequest) -> None:
        """The comparison is about to run (its commits and comparison keys are known)."""

    def commit_learnt(self, commit: str, facts: Any, *, learnt_now: bool) -> None:
        """``commit``'s evals are known: learnt by this run (``learnt_now``) or an earlier one."""

    def samples_landed(self, commit: str, task: str, windows: list[str], outcomes: list[WindowOutcome]) -> None:
        """This comparison needs nothing more of (``commit``, ``task``): its windows' outcomes."""

    def comparison_saved(self, saved: SavedComparison) -> None:
        """The comparison document (and its chart) was saved to the lake."""

    def report_written(self, report: WrittenReport) -> None:
        """The PR report was written to the lake (and posted when GitHub is configured)."""

    def close(self, *, wait: bool) -> None:
        """Finish what was recorded (``wait``) or drop what is queued with a bounded wait for
        what is under way (stopping). Raises :class:`ComparisonFailed` when recording failed."""


class NullRecorder:
    """Records nothing: the lake alone holds the comparison."""

    def start(self, request: ComparisonRequest) -> None:
        pass

    def commit_learnt(self, commit: str, facts: Any, *, learnt_now: bool) -> None:
        pass

    def samples_landed(self, commit: str, task: str, windows: list[str], outcomes: list[WindowOutcome]) -> None:
        pass

    def comparison_saved(self, saved: SavedComparison) -> None:
        pass

    def report_written(self, report: WrittenReport) -> None:
        pass

    def close(self, *, wait: bool) -> None:
        pass


def warm_up() -> None:
    """One-time costs paid while the sandboxes start instead of on the critical path: the
    inspect_ai import that landing the first window needs (~1.5 s), and the chart renderer's
    engine that the final report needs (~0.4 s)."""
    importlib.import_module("inspect_ai.log")
    try:
        from evalrunner_assets.report.chart import warm_up as warm_up_chart

        warm_up_chart()
    except Exception:  # the report renders (and reports any error) without the warm-up
        pass


def sweep_lake(the_lake: Lake) -> list[str]:
    """Temporary files that dead writers left anywhere in a local lake (any repo, the inbox,
    quarantine…): a temp file carries its writer's pid, so a live writer's is never touched."""
    if not the_lake.is_local:
        return []  # object stores write with one PUT: nothing half-written to sweep
    root = os.path.abspath(the_lake.root)
    removed: list[str] = []
    if not the_lake.exists(LAYOUT.temp_writes_walked()):
        # Writers before the temp-write records left theirs anywhere: walk the lake once, then
        # list the records only -- a walk before every comparison grows with the whole history.
        removed += sweep_orphaned_temp_files(root, [""])
        the_lake.write_bytes(LAYOUT.temp_writes_walked(), json.dumps({"walked_at": time.time()}).encode())
    for rel in the_lake.listdir(LAYOUT.temp_write_records_root()):
        pid = LAYOUT.parse_temp_write_record(rel)
        if pid is None or pid_alive(pid):
            continue  # a live writer's temporary file is never touched
        try:
            tmp = the_lake.read_bytes(rel).decode("utf-8", "replace")
        except OSError:
            continue  # its writer finished, or a concurrent sweep took it
        removed += sweep_temp_file_of(root, tmp, pid)
        the_lake.remove(rel)
    return removed


def step_description(step: Step) -> str:
    """What a step was doing, for a person reading an error."""
    if step.kind == "manifest" and step.commit:
        repo, sha = parse_commit_key(step.commit)
        return f"learning the evals of {repo} at {sha[:7]}"
    if step.kind == "samples" and step.commit:
        repo, sha = parse_commit_key(step.commit)
        return f"recording {step.task} of {repo} at {sha[:7]}"
    return "recording the comparison" if step.kind == "compare" else "writing the report"


def run_comparison(
    request: ComparisonRequest,
    *,
    resources: EngineResources,
    recorder: Recorder | None = None,
    options: EngineOptions = EngineOptions(),
) -> ComparisonDocument:
    """Run ``request`` to its final verdict; returns the comparison document.

    ``resources``: the lake, sandboxes, repositories and (optionally) where reports are posted;
    ``options``: how it runs (:class:`~evalrunner_assets.pipeline.capabilities.EngineOptions`,
    as for :class:`ComparisonEngine`). A lake that cannot be reached (or a disk too full
    to land on) stops the comparison like the outage breaker does — :class:`ComparisonStopped`,
    ``status: "stopped"`` — and the same call resumes once the lake is back."""
    try:
        return ComparisonEngine.open(request, resources, recorder or NullRecorder(), options).run()
    except (LakeUnavailable, LakeWriteError) as exc:
        raise lake_stopped(request, resources, exc) from exc
    except ComparisonFailed as exc:
        if isinstance(exc, ComparisonStopped):
            raise
        # Recording failed: if the lake is down, that is the cause to report.
        down = _lake_down(resources)
        if down is not None:
            raise lake_stopped(request, resources, down) from exc
        raise
    except Exception as exc:
        # Anything else that failed while the lake was down (e.g. DuckDB reading the lake's files
        # reports the connection error as its own): the lake is the cause to report.
        down = _lake_down(resources)
        if down is not None:
            raise lake_stopped(request, resources, down) from exc
        raise


def _one_line(exc: BaseException, limit: int = 300) -> str:
    """``exc`` as one line of at most ``limit`` characters: its type and first line."""
    first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
    line = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _lake_down(resources: EngineResources) -> Exception | None:
    """The lake's fault if it cannot be reached now, else None."""
    try:
        the_lake = resources.lake.open()
        the_lake.exists(LAYOUT.batches_root())
    except (LakeUnavailable, LakeWriteError) as exc:
        return exc
    return None


def lake_stopped(request: ComparisonRequest, resources: EngineResources, exc: Exception) -> ComparisonStopped:
    """The stopped outcome of a comparison whose lake failed. The document is saved when the
    lake takes it (e.g. a lake write failed but the lake is up), and returned either way."""
    reason = f"lake unavailable: {exc}" if isinstance(exc, LakeUnavailable) else f"lake write failed: {exc}"
    result = bare_document(request, "stopped", reason)
    try:
        the_lake = resources.lake.open()
        saved = assess_mod.load_result(the_lake, request.repo, request.pr, request.head_sha)
        if saved is not None:
            result = saved
            result.status, result.verdict, result.stopped_reason = "stopped", "INCONCLUSIVE", reason
            result.final_verdict.verdict = "INCONCLUSIVE"
        assess_mod.save_result(the_lake, result)
    except (LakeUnavailable, LakeWriteError):
        pass  # the lake is down: the caller prints the outcome
    return ComparisonStopped(reason, result)


def bare_document(request: ComparisonRequest, status: Status, reason: str) -> ComparisonDocument:
    """A document that ended (``status``, ``reason``) with nothing assessed: no tasks,
    INCONCLUSIVE."""
    return ComparisonDocument.model_validate(
        {
            "schema_version": assess_mod.SCHEMA_VERSION,
            "comparison": request.key,
            "repo": request.repo,
            "pr": request.pr,
            "head_sha": request.head_sha,
            "base_sha": request.base_sha,
            "status": status,
            "verdict": "INCONCLUSIVE",
            "stopped_reason": reason,
            "final_verdict": {"verdict": "INCONCLUSIVE", "reasons": [reason], "p_improvement": None},
            "tasks": {},
        }
    )


def _gateway_model(request: ComparisonRequest, resources: EngineResources, the_lake: Lake) -> str:
    """The model the comparison's gateway serves: the request's when it sets one, else a gateway
    provider's model the agent config of the head or base names (else the request's default)."""
    from evalrunner_assets.execution.repo import RepoError

    if request.model_override:
        return request.settings.model
    for sha in (request.head_sha, request.base_sha):
        try:
            agent = read_agent_model(resources.repos.export(the_lake, request.repo, sha).path)
        except (RepoError, DiscoveryError):
            continue  # reported where the commit is learnt, as itself
        if agent is not None and provider_of(agent.model) is not None:
            return agent.model
    return request.settings.model


def gateway_summary(gateway: ModelGateway) -> dict[str, Any]:
    """What the comparison sent through the model gateway (closed scopes; all of them by the
    time the warm pool has closed)."""
    trip = gateway.provider_trip
    return {
        **gateway.total.to_dict(),
        "budget_usd": gateway.settings.budget_usd,
        "spent_usd": round(gateway.spent_usd, 9),
        "spend_known": gateway.spend_known,
        "upstream_calls": gateway.upstream_calls(),
        "max_in_flight": dict(gateway.max_in_flight),
        "max_concurrency": gateway.settings.max_concurrency,
        **({"provider_down": trip.to_dict()} if trip is not None else {}),
    }


def with_metered_spend(result: ComparisonDocument, gateway: ModelGateway | None) -> ComparisonDocument:
    """A comparison served by the model gateway shows the spend the gateway metered (every call,
    of landed windows or not, the grader's included: the number the budget is held to), so the
    terminal, the document, the comment and the check run all show the same number."""
    if gateway is not None:
        result.spend_usd = round(gateway.spent_usd, 6)
        result.spend_known = gateway.spend_known
    return result


def _sandbox_counts(backend: SandboxBackend) -> dict[str, Any]:
    """The sandboxes this comparison started (e.g. cold pods vs warm session pods), when the
    backend counts them: ``{"sandboxes": {...}}`` or nothing."""
    counts = backend.sandbox_counts() if isinstance(backend, SandboxCounter) else {}
    return {"sandboxes": counts} if counts else {}


class ComparisonEngine:
    """One comparison, run to its verdict. Build it with :meth:`open`, then :meth:`run` it once.

    How it runs is its :class:`~evalrunner_assets.pipeline.capabilities.EngineOptions`. With the
    model gateway, real keys stay here; each sandbox reaches it through its own channel with a
    scoped token. A spent ``budget_usd`` ends the comparison with status ``budget_spent``.
    :meth:`run` raises :class:`ComparisonStopped` when ``breaker_threshold`` consecutive
    infrastructure failures trip the outage breaker, and
    :class:`ComparisonCancelled` (a ``KeyboardInterrupt``) after every sandbox is killed and the
    cancellation saved in the document (``status: "cancelled"``) — for a Ctrl-C at any moment of
    :meth:`run` (:mod:`~evalrunner_assets.pipeline.interrupts`), an interrupt, or ``stop`` set
    by the caller. ``on_step(step, saved document)`` is told of each learnt commit, each finished
    window step and each saved comparison."""

    @classmethod
    def open(
        cls,
        request: ComparisonRequest,
        resources: EngineResources,
        recorder: Recorder,
        options: EngineOptions = EngineOptions(),
    ) -> ComparisonEngine:
        """Prepare the lake (sweep, register the repository, open the comparison, retire old
        failures) and the sandbox backend (preflight, the model gateway when one is needed).
        A request without a ``source`` (one the PR sensor opened) keeps the repository's
        registered source. ``sandbox_context`` is handed to the sandbox resource's ``backend``
        (the Dagster run context, for backends that report into the run)."""
        the_lake = resources.lake.open()
        quarantined_before = len(integrity.QUARANTINED)
        sweep_lake(the_lake)
        if request.source:
            resources.repos.register(the_lake, request.repo, request.source)
        request = open_comparison(the_lake, request)
        # One engine at a time per comparison (the CLI and the daemon share the lake); held
        # until run() ends. A live holder is waited out, or (lease_wait=False) raises
        # ComparisonBusy naming it.
        lease = ComparisonLease(the_lake, request, options.lease_owner)
        lease.acquire(wait=options.lease_wait, on_wait=options.on_lease_wait)
        try:
            # A window that failed on infrastructure in an earlier run (an outage since fixed)
            # gets one more try in this one; within this run a failure stops its task.
            retired = (
                retire_failures(the_lake, request.repo, (request.base_sha, request.head_sha))
                if options.retry_failed
                else []
            )
            backend = resources.sandbox.backend(options.sandbox_context)
            backend.preflight()
            runtime = backend.runtime_digest()
            gateway = start_gateway(
                _gateway_model(request, resources, the_lake), request.budget_usd, options.model_gateway
            )
            if gateway is not None:
                if backend.name == "kubernetes":
                    gateway.close()
                    raise GatewayError(
                        "the model gateway is not supported on the kubernetes backend yet "
                        "(sandbox pods have no channel to it); use --backend bubblewrap"
                    )
                backend = with_gateway(backend, gateway)
            engine = cls(
                request,
                resources,
                recorder,
                the_lake=the_lake,
                backend=backend,
                runtime=runtime,
                retired=retired,
                gateway=gateway,
                quarantined_before=quarantined_before,
                options=options,
            )
        except BaseException:
            lease.release()
            raise
        engine.lease = lease
        return engine

    def __init__(
        self,
        request: ComparisonRequest,
        resources: EngineResources,
        recorder: Recorder,
        *,
        the_lake: Lake,
        backend: SandboxBackend,
        runtime: str,
        retired: list[str],
        gateway: ModelGateway | None,
        quarantined_before: int,
        options: EngineOptions = EngineOptions(),
    ) -> None:
        self.request, self.resources, self.recorder = request, resources, recorder
        self.lake, self.backend, self.runtime = the_lake, backend, runtime
        self.retired, self.gateway, self.quarantined_before = retired, gateway, quarantined_before
        self.lease: ComparisonLease | None = None  # set by open(); released when run() ends
        self.on_step, self.progress_every_s = options.on_step, options.progress_every_s
        self.report_at_start = options.report_at_start
        sandbox = resources.sandbox
        self.pool = sandbox.warm_pool()
        workers = options.workers
        if workers is None:
            workers = sandbox.worker_count() if isinstance(sandbox, WorkerCounter) else None
        self.exports: dict[str, RepoExport] = {}
        self.facts: dict[str, Any] = {}
        # Planning runs after every window (and from the progress thread): the cache makes each
        # call cost only the tasks whose batches changed.
        self._assess_cache, self._assess_lock = assess_mod.AssessCache(), threading.Lock()
        self.planning = {"calls": 0, "seconds": 0.0}  # measured, for the execution summary
        self.stop = options.stop or threading.Event()
        self.sigint = SigintCount()  # while run() runs on the main thread, Ctrl-C sets `stop`
        # One document write at a time; once an end is saved (finish), a progress document still
        # being assessed is not saved over it.
        self._save_lock, self._ended = threading.Lock(), False
        # Worker threads live for the whole comparison: a warm sandbox dies with the thread that
        # opened it, and those opened while learning the commits serve the windows afterwards.
        n_workers = default_workers() if workers is None else workers
        self.window_threads = cf.ThreadPoolExecutor(
            max_workers=max(1, n_workers), thread_name_prefix="evalrunner-window"
        )
        # Progress comparisons (assess, chart, report) run here, off the scheduling path.
        self.progress_thread = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="evalrunner-progress")
        self._progress: list[cf.Future] = []
        self._last_compare = time.monotonic()
        self.live = LiveRecorder(the_lake, request.repo, request.pr, request.head_sha, max(1, n_workers))
        self.scheduler = PackedScheduler(
            plan=self.plan,
            run_step=self.run_step,
            on_done=self.on_done,
            on_idle=self.record_live,
            kill_sandboxes=self.kill_sandboxes,
            workers=workers,
            breaker_threshold=options.breaker_threshold,
            # A sample budget is spent across tasks in a fixed order: keep the round barrier then.
            packed=options.packed and request.budget_samples is None,
            stop=self.stop,
            executor=self.window_threads,
        )
        self.ran: dict[tuple[str, str], list[str]] = {}  # (commit, task) → windows landed by this run
        self.outcomes: dict[tuple[str, str], list[WindowOutcome]] = {}
        self.live_tasks: set[str] = set()  # undecided tasks: planned or in flight, on either arm
        self.finished: set[tuple[str, str]] = set()
        if gateway is not None:
            # A provider whose circuit opens (down, or refusing the key) stops the comparison at
            # once: the scheduler sees ``stop``, kills every sandbox, and ``conclude`` says why.
            gateway.on_provider_down(lambda trip: self.stop.set())

    # --- reading the state ----------------------------------------------------------------------

    def assess(self) -> assess_mod.Assessment:
        with self._assess_lock:
            started = time.monotonic()
            try:
                return assess_mod.assess(
                    self.lake,
                    self.request,
                    backend_name=self.backend.name,
                    runtime_digest=self.runtime,
                    detail=False,
                    cache=self._assess_cache,
                )
            finally:
                self.planning["calls"] += 1
                self.planning["seconds"] += time.monotonic() - started

    def saved(self) -> ComparisonDocument | None:
        return assess_mod.load_result(self.lake, self.request.repo, self.request.pr, self.request.head_sha)

    def export(self, ck: str) -> RepoExport:  # on the driving thread: exports are not made concurrently
        if ck not in self.exports:
            repo, sha = parse_commit_key(ck)
            self.exports[ck] = self.resources.repos.export(self.lake, repo, sha)
        return self.exports[ck]

    def kill_sandboxes(self) -> None:
        if self.pool is not None:
            self.pool.kill_all()

    # --- the run --------------------------------------------------------------------------------

    def run(self) -> ComparisonDocument:
        """Run the comparison to its end. A Ctrl-C (on the main thread) only sets ``stop``: the
        engine stops at its next check and saves the cancellation whole; one that arrives once
        the end is being concluded lets the end be saved, then marks it cancelled. Only one that
        arrives after that (while the gateway closes and the lease is released) changes nothing."""
        with sigint_sets(self.stop) as self.sigint:
            try:
                self.recorder.start(self.request)
                threading.Thread(target=warm_up, name="evalrunner-warm-up", daemon=True).start()
                if self.report_at_start:
                    self.report_work_started()
                self.learn_commits()
                result = self.run_windows()
                if self.sigint.received:
                    raise self.cancelled("concluding the comparison")
                return result
            finally:
                self._release()

    def _release(self) -> None:
        if self.gateway is not None:
            self.gateway.close()
        if self.lease is not None:
            self.lease.release()

    def report_work_started(self) -> None:
        """When anything is left to run, save and report the comparison at once (the check run
        shows the head in progress while the commits are learnt), off the driving thread. A
        comparison with nothing left to run keeps its report until its final one."""
        a = self.assess()
        if a.needs_facts or a.next_windows:
            step = Step("compare", f"compare:{self.request.key}:started")
            self._progress.append(self.progress_thread.submit(self.compare, step))

    # 1. What is there to compare.

    def learn_commits(self) -> None:
        """Commits not learnt yet are learnt at once (ids listed in the warm sandboxes the windows
        will use), then each commit is recorded."""
        request = self.request
        learning: list[cf.Future] = []
        needs: list[str] = []
        try:
            needs = list(self.assess().needs_facts)
            for sha in needs:
                self.export(commit_key(request.repo, sha))
            lister = self._list_in_warm_sessions if self.pool is not None and self.pool.supports(self.backend) else None
            learners = cf.ThreadPoolExecutor(max_workers=max(1, len(needs)), thread_name_prefix="evalrunner-learn")
            learning = [
                learners.submit(
                    learn_commit,
                    self.lake,
                    self.backend,
                    self.exports[commit_key(request.repo, sha)],
                    model=request.settings.model,
                    cancel=self.stop,
                    lister=functools.partial(lister, self.exports[commit_key(request.repo, sha)]) if lister else None,
                )
                for sha in needs
            ]
            try:
                while not self.stop.is_set() and not all(f.done() for f in learning):
                    cf.wait(learning, timeout=0.25)  # a deferred Ctrl-C is noticed between waits
            finally:
                learners.shutdown(wait=False, cancel_futures=True)
            if self.stop.is_set():
                raise self.cancelled("learning the commits' evals", learning=learning)
            for sha, f in zip(needs, learning, strict=True):
                exc = f.exception()
                if isinstance(exc, DiscoveryError):  # the repository has no usable evals
                    step = self._manifest_step(sha)
                    raise ComparisonFailed(
                        f"manifest step {step.run_key} failed: {type(exc).__name__}: {exc}",
                        where=step_description(step),
                    ) from exc
                if exc is not None:
                    raise exc
            still = self.assess().needs_facts
            if still:  # not expected once every learning succeeded, kept as a guard
                raise ComparisonFailed(f"the evals of {', '.join(still)} are still unknown after learning them")
        except ComparisonCancelled:
            raise
        except BaseException as exc:
            if (is_interrupt(exc) or self.sigint.received) and not isinstance(exc, (LakeUnavailable, LakeWriteError)):
                raise self.cancelled("learning the commits' evals", exc, learning=learning) from exc
            self.window_threads.shutdown(wait=False, cancel_futures=True)
            self.recorder.close(wait=False)
            self._close_pool()
            raise
        for sha in dict.fromkeys((request.base_sha, request.head_sha)):
            ck = commit_key(request.repo, sha)
            self.facts[ck] = load_facts(self.lake, request.repo, sha)
            self.recorder.commit_learnt(ck, self.facts[ck], learnt_now=sha in needs)
            if sha in needs and self.on_step is not None:
                self.on_step(self._manifest_step(sha), self.saved())

    def _manifest_step(self, sha: str) -> Step:
        ck = commit_key(self.request.repo, sha)
        return Step("manifest", f"manifest:{ck}", commit=ck)

    def settings_for(self, commit: str, export_: RepoExport | None = None) -> RunSettings:
        """What ``commit``'s windows run with: the model its agent config names, unless the
        request sets one (``assess.model_choice``). Read from the learnt facts, or from the export
        while the commit is being learnt."""
        facts = self.facts.get(commit)
        if facts is not None:
            return assess_mod.run_settings(self.request, facts.agent_model)
        return assess_mod.run_settings(self.request, read_agent_model(export_.path) if export_ is not None else None)

    def _list_in_warm_sessions(self, export_: RepoExport, cfgs: list, cancel: threading.Event | None) -> dict[str, Any]:
        """Each task's ids, listed in the warm sandbox its windows will run in (opened now, on a
        window thread, several tasks at once)."""
        pool = self.pool
        if pool is None:  # learn_commits lists in warm sessions only when there is a pool
            raise RuntimeError("listing in warm sessions needs the warm pool")
        settings = self.settings_for(commit_key(export_.repo, export_.commit), export_)

        def one(cfg: Any) -> Any:
            session_cfg = session_config(
                export_.repo,
                cfg.task,
                cfg.spec,
                cfg.workdir,
                settings,
                env_digest=cfg.env_digest,
                python_env=cfg.python_env,
            )
            with pool.session(self.backend, export_, session_cfg, cancel) as runner:
                return runner.list_ids(cancel=cancel)

        futures = {cfg.task: self.window_threads.submit(one, cfg) for cfg in cfgs}
        out: dict[str, Any] = {}
        for task, future in futures.items():
            try:
                out[task] = future.result()
            except InspectRunError as exc:
                out[task] = exc
        return out

    # 2. Sample windows, packed on one pool; each finished (commit, task) recorded.

    def plan(self) -> list[Step]:
        if self.gateway is not None and self.gateway.budget_spent:
            return []  # windows in flight finish (their refused calls make them budget stops)
        a = self.assess()
        live = {w.task for w in a.next_windows} | {t for _, t in self.scheduler.in_flight}
        self.live_tasks.clear()
        self.live_tasks.update(live)
        if self.pool is not None:
            # Decided tasks give their warm sandboxes back. An undecided task keeps both arms'
            # sessions even while one arm waits for the other's window (packed: not in the plan).
            self.pool.retain((sha, t) for sha in (self.request.base_sha, self.request.head_sha) for t in live)
        steps = [s for s in next_steps(a, self.saved()) if s.kind == "samples"]
        for s in steps:
            self.export(s.commit)
            if s.commit not in self.facts:
                repo, sha = parse_commit_key(s.commit)
                self.facts[s.commit] = load_facts(self.lake, repo, sha)
        return steps

    def run_step(self, step: Step, cancel: threading.Event) -> list[WindowOutcome]:
        facts = self.facts[step.commit].tasks[step.task]
        windows = [Window.parse(w) for w in step.windows]
        try:
            return run_task_windows(
                self.lake,
                self.backend,
                self.exports[step.commit],
                facts,
                self.settings_for(step.commit),
                windows,
                pool=self.pool,
                cancel=cancel,
                retry_transient=True,
            )
        except (LakeUnavailable, LakeWriteError):
            raise  # the lake's fault, not the sandbox's: the scheduler counts it as such
        except Exception as exc:
            if not cancel.is_set():
                # The sandbox could not even start: the task stops here, as for any other
                # infrastructure failure, instead of being planned again and again.
                repo, sha = parse_commit_key(step.commit)
                for w in windows:
                    key = batch_key_for(
                        repo,
                        sha,
                        facts,
                        self.settings_for(step.commit),
                        w,
                        backend_name=self.backend.name,
                        runtime_digest=self.runtime,
                    )
                    if batch_state(self.lake, key) == "absent":
                        try:
                            record_failure(self.lake, key, failure_kind(exc), f"{type(exc).__name__}: {exc}")
                        except LakeWriteError:
                            pass  # a full disk refuses the record too; the window stays absent
            raise

    def record_live(self) -> None:
        """The sandboxes running windows now, for the run page (on the driving thread)."""
        self.live.update(self.scheduler.in_flight.values())

    def on_done(self, unit: Unit) -> None:
        self.record_live()
        if unit.cancelled or self.stop.is_set() or unit.error is not None:
            return  # nothing landed to record (a cancelled window runs again on resume)
        ct = (unit.step.commit, unit.step.task)
        # A window stopped by the model budget landed nothing: it is not recorded as landed.
        stopped = {o.key.window.name for o in unit.outcomes if o.status == "budget_stopped"}
        ran = self.ran.setdefault(ct, [])
        ran.extend(w for w in unit.step.windows if w not in ran and w not in stopped)
        self.outcomes.setdefault(ct, []).extend(o for o in unit.outcomes if o.status != "budget_stopped")
        if not ran:
            del self.ran[ct]
        if self.on_step is not None:
            self.on_step(unit.step, self.saved())
        self.record_progress()

    def record_progress(self, final: bool = False) -> None:
        """Record each (commit, task) this comparison needs nothing more of; then, at most every
        ``progress_every_s``, save the comparison for progress (off the scheduling path)."""
        for ct, windows in self.ran.items():
            if ct in self.finished or (ct[1] in self.live_tasks and not final):
                continue
            self.finished.add(ct)
            self.recorder.samples_landed(ct[0], ct[1], list(windows), self.outcomes.get(ct, []))
        for f in [f for f in self._progress if f.done()]:
            self._progress.remove(f)
            f.result()  # a failed progress report stops the comparison
        if not final and time.monotonic() - self._last_compare >= self.progress_every_s and not self._progress:
            self._last_compare = time.monotonic()
            self._progress.append(self.progress_thread.submit(self.compare_if_changed))

    def compare_if_changed(self) -> None:
        """Save the comparison and write its report when the document moved since last saved."""
        if self.stop.is_set():
            return
        for step in next_steps(self.assess(), self.saved()):
            if step.kind == "compare":
                self.compare(step)

    def compare(self, step: Step) -> SavedComparison | None:
        """Save the comparison as assessed now and write its report; None when an end that is
        not a verdict was saved first (this document would overwrite it)."""
        try:
            with self._assess_lock:  # the planning cache serves the detailed assessment too
                result = assess_mod.assess(
                    self.lake,
                    self.request,
                    backend_name=self.backend.name,
                    runtime_digest=self.runtime,
                    cache=self._assess_cache,
                ).result
            with self._save_lock:
                if self._ended:
                    return None
                saved = save_comparison(self.lake, with_metered_spend(result, self.gateway))
                self.recorder.comparison_saved(saved)
                self.report(step)
        except (LakeUnavailable, LakeWriteError, ComparisonFailed, KeyboardInterrupt):
            raise
        except Exception as exc:
            raise ComparisonFailed(
                f"{step.kind} step {step.run_key} failed: {type(exc).__name__}: {exc}", where=step_description(step)
            ) from exc
        if self.on_step is not None:
            self.on_step(step, saved.result)
        return saved

    def report(self, step: Step | None = None) -> WrittenReport:
        """Write (and post) the PR report of the document saved now."""
        step = step or Step("report", f"report:{self.request.key}")
        result = self.saved()
        if result is None:
            raise ComparisonFailed(f"no comparison for {self.request.key} yet", where=step_description(step))
        written = write_report(self.lake, result, self.resources.github)
        self.recorder.report_written(written)
        return written

    def run_windows(self) -> ComparisonDocument:
        try:
            try:
                self.scheduler.run()
                # Cancelled: the progress reports are waited for (and their errors reported) by
                # cancelled(), which saves the cancellation after them.
                if not self.stop.is_set() or self.scheduler.breaker.trip is not None:
                    if not self.stop.is_set():
                        self.record_progress(final=True)
                    self.progress_thread.shutdown(wait=not self.stop.is_set(), cancel_futures=self.stop.is_set())
                    for f in self._progress:
                        if not f.cancelled():
                            f.result()  # a failed progress report stops the comparison
            finally:
                self._close_pool()
                self.live.end()
            return self.conclude()
        except ComparisonCancelled:
            raise
        except BaseException as exc:
            # An interrupt where Ctrl-C is not deferred (another handler's, or KeyboardInterrupt
            # off the main thread's default handler), or an error after a deferred Ctrl-C: the
            # cancellation is saved, and the error reported with it. The lake failing, or the
            # breaker, is the outcome to report as itself.
            if (is_interrupt(exc) or self.sigint.received) and not isinstance(
                exc, (LakeUnavailable, LakeWriteError, ComparisonStopped)
            ):
                raise self.cancelled(cause=exc) from exc
            self.stop_recording()
            raise

    def stop_recording(self) -> None:
        """Stopping: queued progress reports and recordings are dropped (what they record stays
        in the lake and is recorded on resume); one under way gets a bounded wait."""
        self.progress_thread.shutdown(wait=False, cancel_futures=True)
        self.recorder.close(wait=False)

    def conclude(self) -> ComparisonDocument:
        """The verdict once no window is left to run, or the reason the comparison stopped."""
        request, scheduler, gateway = self.request, self.scheduler, self.gateway
        provider_trip = gateway.provider_trip if gateway is not None else None
        if provider_trip is not None:
            # The model provider is down or refused the key: no verdict, whatever landed before.
            result = self.finish("stopped", provider_trip.describe())
            self.report(Step("report", f"report:{request.key}:stopped"))
            self.recorder.close(wait=True)
            raise ComparisonStopped(
                provider_trip.describe(),
                result,
                user_error=provider_trip.kind == "auth",
                hint=provider_trip.hint(),
            )
        trip = scheduler.breaker.trip
        if trip is not None:
            result = self.finish("stopped", trip.describe())
            self.report(Step("report", f"report:{request.key}:stopped"))
            self.recorder.close(wait=True)
            misconfigured = trip.configuration_error()
            raise ComparisonStopped(
                trip.describe(),
                result,
                user_error=misconfigured is not None,
                hint=misconfigured[1] if misconfigured else None,
            )
        if self.stop.is_set():  # Ctrl-C, or stopped from outside (e.g. the Dagster run was terminated)
            raise self.cancelled()
        budget_stops = [o for o in scheduler.outcomes() if o.status == "budget_stopped"]
        if gateway is not None and (budget_stops or (gateway.budget_spent and self.assess().next_windows)):
            result = self.finish(
                "budget_spent",
                f"the model budget of ${request.budget_usd:g} was spent ({format_usd(gateway.spent_usd)}); "
                f"{len(budget_stops)} window(s) stopped, nothing more was run",
                sandbox_counts=False,
            )
            result.execution = {**(result.execution or {}), "gateway": gateway_summary(gateway)}
            assess_mod.save_result(self.lake, result)
            self.write_execution(result.execution)
            self.report(Step("report", f"report:{request.key}:budget"))
            self.recorder.close(wait=True)
            return result
        for step in next_steps(self.assess(), self.saved()):
            if step.kind == "compare":
                self.compare(step)
        final = self.saved()
        assert final is not None
        result = final
        execution = {
            **scheduler.summary(),
            "retried_failures": len(self.retired),
            "planning": {**self.planning, "seconds": round(self.planning["seconds"], 3)},
            # batches whose files did not match their records: run again here
            "quarantined": [
                q
                for q in integrity.QUARANTINED[self.quarantined_before :]
                if f"/{LAYOUT.batch_records_prefix(request.repo)}/" in q["record"]
            ],
            **_sandbox_counts(self.backend),
        }
        if gateway is not None:
            execution["gateway"] = gateway_summary(gateway)
        result.execution = execution
        assess_mod.save_result(self.lake, result)
        self.write_execution(execution)
        self.recorder.close(wait=True)
        return result

    # 3. Saving an end that is not a verdict.

    def cancelled(
        self, during: str = "", cause: BaseException | None = None, *, learning: Sequence[cf.Future] = ()
    ) -> ComparisonCancelled:
        """Stop whatever still runs and save the cancellation; returns the exception to raise.

        Each step runs whatever the steps before it did (a recording that failed must not skip
        the save), with Ctrl-C deferred or ignored (a second one must not cut the save short).
        A step's error becomes one line of :class:`ComparisonCancelled` for the command to print,
        except the lake's: saving itself is then the outage, and that error is raised. When the
        state cannot be assessed, the document saved before is marked cancelled (or, with none,
        an empty one saved)."""
        self.stop.set()
        reason = self._cancel_reason(during, cause)
        errors = [] if cause is None or is_interrupt(cause) else [_one_line(cause)]

        def step(what: str, do: Callable[[], object]) -> bool:
            try:
                do()
            except (LakeUnavailable, LakeWriteError) as exc:
                exc.__suppress_context__ = True  # the outage, not a cancellation, is the outcome
                raise
            except Exception as exc:
                errors.append(f"{what} failed: {_one_line(exc)}")
                return False
            return True

        with contextlib.nullcontext() if self.sigint.deferring else sigint_ignored():
            step("stopping the sandboxes", self.kill_sandboxes)
            if learning:
                cf.wait(learning, timeout=JOIN_SECONDS)
            self.window_threads.shutdown(wait=False, cancel_futures=True)
            # A progress report under way is not waited for: once the cancellation is saved it
            # saves nothing (compare), and one writing now holds the save lock finish() takes.
            self.progress_thread.shutdown(wait=False, cancel_futures=True)
            step("stopping the recording", functools.partial(self.recorder.close, wait=False))
            step("closing the warm sandboxes", self._close_pool)
            if not step("saving the cancelled comparison", lambda: self.finish("cancelled", reason)):
                # An interrupt that landed inside an assessment leaves its cache in doubt.
                self._assess_cache = assess_mod.AssessCache()
                if not step("assessing it afresh", lambda: self.finish("cancelled", reason)):
                    step("marking the saved comparison cancelled", lambda: self.mark_cancelled(reason))
            for f in self._progress:
                if f.done() and not f.cancelled():
                    step("saving the comparison for progress", f.result)
        return ComparisonCancelled(reason, errors)

    def _cancel_reason(self, during: str, cause: BaseException | None) -> str:
        if self.sigint.received or isinstance(cause, KeyboardInterrupt):
            who = "by the user (SIGINT)"
        elif cause is not None and is_interrupt(cause):
            who = f"by an interrupt ({type(cause).__name__})"
        else:
            who = "by the caller"
        where = f" while {during}" if during else ""
        return f"cancelled {who}{where}; completed windows stay landed and are reused on resume"

    def mark_cancelled(self, reason: str) -> ComparisonDocument:
        """The document saved before, marked cancelled (an empty one when none was saved): for
        when the comparison's state cannot be assessed now."""
        result = self.saved() or bare_document(self.request, "cancelled", reason)
        result.status, result.stopped_reason = "cancelled", reason
        if result.verdict == "RUNNING":
            result.verdict = "INCONCLUSIVE"
            result.final_verdict.verdict = "INCONCLUSIVE"
        result.execution = {**(result.execution or {}), "status": "cancelled", "reason": reason}
        with self._save_lock:
            self._ended = True
            assess_mod.save_result(self.lake, result)
            self.write_execution(result.execution)
        return result

    def finish(self, status: Status, reason: str, *, sandbox_counts: bool = True) -> ComparisonDocument:
        """Save the document of a comparison that did not run to its end, saying why."""
        result = self.assess().result
        result.status = status
        result.stopped_reason = reason
        if result.verdict == "RUNNING" or status == "stopped":
            # Not a decision: the evidence stops here. INCONCLUSIVE, as for a failed task (a
            # stopped comparison never has a verdict, whatever its decided tasks say).
            result.verdict = "INCONCLUSIVE"
            result.final_verdict.verdict = "INCONCLUSIVE"
        provider_trip = self.gateway.provider_trip if self.gateway is not None else None
        if provider_trip is not None:
            result.breaker = provider_trip.to_dict()
        elif self.scheduler.breaker.trip is not None:
            result.breaker = self.scheduler.breaker.trip.to_dict()
        with_metered_spend(result, self.gateway)
        counts = _sandbox_counts(self.backend) if sandbox_counts else {}
        result.execution = {**self.scheduler.summary(), "status": status, "reason": reason, **counts}
        if self.gateway is not None:
            result.execution["gateway"] = gateway_summary(self.gateway)
        with self._save_lock:
            self._ended = True
            assess_mod.save_result(self.lake, result)
            self.write_execution(result.execution)
        return result

    def write_execution(self, execution: dict[str, Any]) -> None:
        request = self.request
        rel = LAYOUT.comparison_artifact(request.repo, request.pr, request.head_sha, "execution.json")
        self.lake.write_bytes(rel, json.dumps(execution, indent=2, sort_keys=True, default=str).encode())

    def _close_pool(self) -> None:
        if self.pool is not None:
            self.pool.close_all()
