"""Drive one comparison to its verdict in-process, on a persistent local Dagster instance.

The same decisions the sensors make: ``assess`` → ``next_steps``. First the commits not learnt
yet are learnt at once (discovery in the sandbox, then each task's sample ids listed in the warm
sandbox its windows will use); then the sample windows of all tasks and both commits run packed
on one bounded worker pool (:mod:`evalrunner_assets.pipeline.scheduler`: no per-round barrier,
an outage breaker folded in submission order, cancellation, resume). Each learnt commit is
recorded as an ``eval_manifest`` materialization, each finished (commit, task) as a
``task_samples`` materialization, then ``comparison`` and ``pr_report``. Runs, partitions,
checks and lineage are recorded in the instance at ``$DAGSTER_HOME`` (default
``<EVALRUNNER_HOME>/dagster``), so ``evalrunner serve`` afterwards shows them.

Why the sandbox work does not run inside concurrent ``dg.materialize`` calls: measured with 6
threads materializing partitions of one asset on a SQLite instance, the runs themselves succeed,
but each run's compute-log capture redirects the *process-wide* stdout/stderr file descriptors
and restores them out of order, leaving this process's fd 1 and 2 pointing into some run's
compute log afterwards. So the sandbox work runs on worker threads and the Dagster runs happen
one at a time on a recorder thread, off the scheduling path; a run after its work has landed
reuses it (``task_samples`` metadata counts its windows as reused) and carries the asset checks.
Planning after each window reads only what changed (:class:`~evalrunner_assets.pipeline.assess.AssessCache`).
"""

import concurrent.futures as cf
import functools
import importlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import dagster as dg

from evalrunner_assets import home
from evalrunner_assets.assets.evals import ASSETS, comparison, eval_manifest, pr_report, task_samples
from evalrunner_assets.discovery import DiscoveryError
from evalrunner_assets.errors import debug_enabled
from evalrunner_assets.execution.inspect_runner import InspectRunError
from evalrunner_assets.gateway import GatewayError, ModelGateway, start_gateway, with_gateway
from evalrunner_assets.partitions import add_partitions
from evalrunner_assets.pipeline import assess as assess_mod
from evalrunner_assets.pipeline.facts import learn_commit, load_facts
from evalrunner_assets.pipeline.keys import commit_key, parse_commit_key
from evalrunner_assets.pipeline.loop import Step, next_steps
from evalrunner_assets.pipeline.scheduler import (
    DEFAULT_BREAKER_THRESHOLD,
    JOIN_SECONDS,
    PackedScheduler,
    Unit,
    default_workers,
    failure_kind,
    sweep_orphaned_temp_files,
)
from evalrunner_assets.pipeline.spec import ComparisonRequest, open_comparison
from evalrunner_assets.pipeline.windows import (
    batch_key_for,
    batch_state,
    record_failure,
    retire_failures,
    run_task_windows,
    session_config,
)
from lake import LAYOUT, Window, integrity
from lake.storage import LakeUnavailable, LakeWriteError
from resources import GitHubResource, LakeResource, RepoResource, SandboxResource

# The comparison document is re-materialized for progress at most this often while windows run.
PROGRESS_EVERY_S = 20.0


class ComparisonFailed(RuntimeError):
    """A step of the comparison failed; the message names the step and the cause, ``where`` says
    what the step was doing for a person, and ``__cause__`` is the original exception (not
    Dagster's wrapper around it)."""

    where: str | None = None

    def __init__(self, message: str, where: str | None = None) -> None:
        super().__init__(message)
        self.where = where


class ComparisonStopped(ComparisonFailed):
    """The outage breaker stopped the comparison; ``result`` is the saved document
    (``status: "stopped"``, ``breaker``: the failures that tripped it)."""

    def __init__(self, message: str, result: dict[str, Any]) -> None:
        super().__init__(message)
        self.result = result


def local_instance() -> dg.DagsterInstance:
    # An explicit dagster.yaml: the defaults — SQLite storage under this directory — are what
    # we want, and Dagster otherwise warns on every start that the file is missing.
    path = home.ensure_dagster_home()
    os.environ["DAGSTER_HOME"] = str(path)
    # Opening a fresh instance creates its SQLite tables; two processes doing it at once race
    # ("table run_tags already exists"). One process at a time creates or migrates it.
    with _instance_lock(path):
        instance = dg.DagsterInstance.get()
        instance.get_runs(limit=1)  # every storage opened (and created) under the lock
        instance.get_dynamic_partitions("commits")
    return instance


class _instance_lock:
    """An exclusive lock on ``<dagster home>/.evalrunner-instance.lock`` (held by one process)."""

    def __init__(self, path: Any) -> None:
        self.path = os.path.join(str(path), ".evalrunner-instance.lock")
        self.fd: int | None = None

    def __enter__(self) -> "_instance_lock":
        import fcntl

        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: Any) -> None:
        import fcntl

        assert self.fd is not None
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def default_resources(**overrides: Any) -> dict[str, Any]:
    res = {
        "lake": LakeResource(),
        "sandbox": SandboxResource(),
        "repos": RepoResource(),
        "github": GitHubResource(),
    }
    res.update(overrides)
    return res


def _warm_up() -> None:
    """One-time costs paid while the sandboxes start instead of on the critical path: the
    inspect_ai import that landing the first window needs (~1.5 s), and the chart renderer's
    engine that the final report needs (~0.4 s)."""
    importlib.import_module("inspect_ai.log")
    try:
        from evalrunner_assets.report.chart import warm_up

        warm_up()
    except Exception:  # the report renders (and reports any error) without the warm-up
        pass


def _materialize(step: Step, comparison_key: str, instance: dg.DagsterInstance, resources: dict) -> None:
    if step.kind == "manifest":
        selection, partition, config = [eval_manifest], step.commit, None
    elif step.kind == "samples":
        selection = [task_samples]
        partition = dg.MultiPartitionKey({"commit": step.commit, "task": step.task})
        config = {"ops": {"task_samples": {"config": {"comparison": comparison_key, "windows": list(step.windows)}}}}
    elif step.kind == "report":
        selection, partition, config = [pr_report], comparison_key, None
    else:
        selection, partition, config = [comparison, pr_report], comparison_key, None
    # The CLI prints its own progress and errors; Dagster's console lines (a step failure is
    # logged with its whole stack) stay in the instance unless --debug asks for them.
    log_level = "WARNING" if debug_enabled() else "CRITICAL"
    try:
        result = dg.materialize(
            ASSETS,
            selection=selection,
            partition_key=partition,
            instance=instance,
            resources=resources,
            run_config={**(config or {}), "loggers": {"console": {"config": {"log_level": log_level}}}},
            tags={"evalrunner/comparison": comparison_key, "evalrunner/step": step.run_key[:200]},
            # The run is recorded as failed either way; raising hands back the asset's own
            # exception (a typed discovery error, …) instead of a message in a failure event.
            raise_on_error=True,
        )
    except dg.DagsterExecutionInterruptedError as exc:  # Ctrl-C while the run executed
        raise KeyboardInterrupt("Dagster run interrupted") from exc
    except Exception as exc:
        cause = _original_error(exc)
        raise ComparisonFailed(
            f"{step.kind} step {step.run_key} failed: {type(cause).__name__}: {cause}", where=_step_description(step)
        ) from cause
    if not result.success:  # not expected with raise_on_error, kept as a guard
        raise ComparisonFailed(
            f"{step.kind} step {step.run_key} failed: see the run logs", where=_step_description(step)
        )


def _original_error(exc: BaseException) -> BaseException:
    """The exception an asset or resource raised, inside Dagster's step/resource error wrappers."""
    current = exc
    for _ in range(10):
        if not type(current).__module__.startswith("dagster"):
            return current
        inner = getattr(current, "user_exception", None) or current.__cause__
        if not isinstance(inner, BaseException):
            return current
        current = inner
    return current


def _step_description(step: Step) -> str:
    if step.kind == "manifest" and step.commit:
        repo, sha = parse_commit_key(step.commit)
        return f"learning the evals of {repo} at {sha[:7]}"
    if step.kind == "samples" and step.commit:
        repo, sha = parse_commit_key(step.commit)
        return f"recording {step.task} of {repo} at {sha[:7]}"
    return "recording the comparison" if step.kind == "compare" else "writing the report"


def _sweep(the_lake: Any, repo: str) -> list[str]:
    """Temporary files that dead writers left anywhere in a local lake (any repo, the inbox,
    quarantine…): a temp file carries its writer's pid, so a live writer's is never touched."""
    if not the_lake.is_local:
        return []  # object stores write with one PUT: nothing half-written to sweep
    return sweep_orphaned_temp_files(os.path.abspath(the_lake.root), [""])


def run_comparison(request: ComparisonRequest, **options: Any) -> dict[str, Any]:
    """Run ``request`` to its final verdict; returns the comparison document.

    Options as for :func:`_run_comparison`. A lake that cannot be reached (or a disk too full to
    land on) stops the comparison like the outage breaker does — :class:`ComparisonStopped`,
    ``status: "stopped"`` — and the same call resumes once the lake is back."""
    try:
        return _run_comparison(request, **options)
    except (LakeUnavailable, LakeWriteError) as exc:
        raise _lake_stopped(request, options.get("resources"), exc) from exc
    except ComparisonFailed as exc:
        if isinstance(exc, ComparisonStopped):
            raise
        # A Dagster run failed: if the lake is down, that is the cause to report.
        down = _lake_down(options.get("resources"))
        if down is not None:
            raise _lake_stopped(request, options.get("resources"), down) from exc
        raise


def _lake_down(resources: dict[str, Any] | None) -> Exception | None:
    """The lake's fault if it cannot be reached now, else None."""
    try:
        the_lake = (resources or default_resources())["lake"].open()
        the_lake.exists(LAYOUT.batches_root())
    except (LakeUnavailable, LakeWriteError) as exc:
        return exc
    return None


def _lake_stopped(request: ComparisonRequest, resources: dict[str, Any] | None, exc: Exception) -> "ComparisonStopped":
    """The stopped outcome of a comparison whose lake failed. The document is saved when the
    lake takes it (e.g. a lake write failed but the lake is up), and returned either way."""
    reason = f"lake unavailable: {exc}" if isinstance(exc, LakeUnavailable) else f"lake write failed: {exc}"
    result: dict[str, Any] = {
        "schema_version": assess_mod.SCHEMA_VERSION,
        "comparison": request.key,
        "repo": request.repo,
        "pr": request.pr,
        "head_sha": request.head_sha,
        "base_sha": request.base_sha,
        "status": "stopped",
        "verdict": "INCONCLUSIVE",
        "stopped_reason": reason,
        "final_verdict": {"verdict": "INCONCLUSIVE", "reasons": [reason], "p_improvement": None},
        "tasks": {},
    }
    try:
        the_lake = (resources or default_resources())["lake"].open()
        saved = assess_mod.load_result(the_lake, request.repo, request.pr, request.head_sha)
        if saved is not None:
            result = {**saved, **{k: result[k] for k in ("status", "verdict", "stopped_reason")}}
            result.setdefault("final_verdict", {})["verdict"] = "INCONCLUSIVE"
        assess_mod.save_result(the_lake, result)
    except (LakeUnavailable, LakeWriteError):
        pass  # the lake is down: the caller prints the outcome
    return ComparisonStopped(reason, result)


def _run_comparison(
    request: ComparisonRequest,
    *,
    instance: dg.DagsterInstance | None = None,
    resources: dict[str, Any] | None = None,
    on_step: Callable[[Step, dict[str, Any] | None], None] | None = None,
    workers: int | None = None,
    breaker_threshold: int = DEFAULT_BREAKER_THRESHOLD,
    packed: bool = True,
    stop: threading.Event | None = None,
    progress_every_s: float = PROGRESS_EVERY_S,
    retry_failed: bool = True,
    model_gateway: bool | None = None,
) -> dict[str, Any]:
    """Run ``request`` to its final verdict; returns the comparison document.

    ``workers``: sandboxes running at once (default: the sandbox resource's ``max_workers``,
    else the machine's cores). ``packed=False`` keeps a barrier per round (for measurements).
    ``progress_every_s``: while windows run, the comparison (and so the in-progress check run)
    is re-materialized when a task's samples are recorded, at most this often.
    ``retry_failed``: windows of these commits that failed on infrastructure before this call
    are tried again (their failure records are retired to ``failures-retired/``).
    ``model_gateway``: run the model gateway (real keys stay here; each sandbox reaches it
    through its own channel with a scoped token). Default: when the model is ``openai/…`` or
    ``anthropic/…``. A spent ``budget_usd`` ends the comparison with status ``budget_spent``.
    Raises :class:`ComparisonStopped` when ``breaker_threshold`` consecutive infrastructure
    failures trip the outage breaker, and re-raises ``KeyboardInterrupt`` after every sandbox is
    killed and the cancellation recorded in the document (``status: "cancelled"``)."""
    resources = resources or default_resources()
    the_lake = resources["lake"].open()
    quarantined_before = len(integrity.QUARANTINED)
    _sweep(the_lake, request.repo)
    resources["repos"].register(the_lake, request.repo, request.source)
    request = open_comparison(the_lake, request)
    # A window that failed on infrastructure in an earlier run (an outage since fixed) gets one
    # more try in this one; within this run a failure stops its task.
    retired = retire_failures(the_lake, request.repo, (request.base_sha, request.head_sha)) if retry_failed else []
    sandbox = resources["sandbox"]
    backend = sandbox.backend()
    backend.preflight()
    runtime = backend.runtime_digest()
    gateway = start_gateway(request.model, request.budget_usd, model_gateway)
    if gateway is not None:
        if backend.name == "kubernetes":
            gateway.close()
            raise GatewayError(
                "the model gateway is not supported on the kubernetes backend yet "
                "(sandbox pods have no channel to it); use --backend bubblewrap"
            )
        backend = with_gateway(backend, gateway)
    try:
        return _run(
            request,
            resources,
            the_lake,
            backend,
            runtime,
            retired,
            gateway,
            instance=instance,
            on_step=on_step,
            workers=workers,
            breaker_threshold=breaker_threshold,
            packed=packed,
            stop=stop,
            progress_every_s=progress_every_s,
            quarantined_before=quarantined_before,
        )
    finally:
        if gateway is not None:
            gateway.close()


def _run(
    request: ComparisonRequest,
    resources: dict[str, Any],
    the_lake: Any,
    backend: Any,
    runtime: str,
    retired: list[str],
    gateway: ModelGateway | None,
    *,
    instance: dg.DagsterInstance | None,
    on_step: Callable[[Step, dict[str, Any] | None], None] | None,
    workers: int | None,
    breaker_threshold: int,
    packed: bool,
    stop: threading.Event | None,
    progress_every_s: float,
    quarantined_before: int,
) -> dict[str, Any]:
    sandbox = resources["sandbox"]
    pool = sandbox.warm_pool()
    if workers is None:
        workers = sandbox.worker_count() if hasattr(sandbox, "worker_count") else None

    # Dagster runs happen one at a time on this recorder thread, off the scheduling path, and
    # one ``task_samples`` run per (commit, task) once this comparison needs nothing more of it
    # (with all its windows): a run per window step costs ~2 s of a 2-core machine's CPU.
    # Opening the instance (~1 s) is its first job, overlapping the commits' learning.
    recorder = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="evalrunner-recorder")
    recorded: list[cf.Future] = []
    given_instance = instance

    def open_instance() -> dg.DagsterInstance:
        inst = given_instance or local_instance()
        # Another process may add the same keys at the same moment (two PRs on one base).
        add_partitions(inst, "commits", [commit_key(request.repo, sha) for sha in (request.base_sha, request.head_sha)])
        add_partitions(inst, "comparisons", [request.key])
        return inst

    instance_ready = recorder.submit(open_instance)

    def dagster_instance() -> dg.DagsterInstance:
        return instance_ready.result()

    # Planning runs after every window (and from the recorder thread for progress): the cache
    # makes each call cost only the tasks whose batches changed.
    assess_cache, assess_lock = assess_mod.AssessCache(), threading.Lock()

    planning = {"calls": 0, "seconds": 0.0}  # measured, for the execution summary

    def assess_now() -> assess_mod.Assessment:
        with assess_lock:
            started = time.monotonic()
            try:
                return assess_mod.assess(
                    the_lake,
                    request,
                    backend_name=backend.name,
                    runtime_digest=runtime,
                    detail=False,
                    cache=assess_cache,
                )
            finally:
                planning["calls"] += 1
                planning["seconds"] += time.monotonic() - started

    def saved() -> dict[str, Any] | None:
        return assess_mod.load_result(the_lake, request.repo, request.pr, request.head_sha)

    def materialize(step: Step) -> None:
        _materialize(step, request.key, dagster_instance(), resources)
        if on_step is not None and step.kind != "samples":  # samples steps report when they finish
            on_step(step, saved())

    settings = assess_mod.run_settings(request)
    exports: dict[str, Any] = {}
    facts_cache: dict[str, Any] = {}
    last_compare = [time.monotonic()]
    stop = stop or threading.Event()
    n_workers = default_workers() if workers is None else workers
    # Worker threads live for the whole comparison: a warm sandbox dies with the thread that
    # opened it, and those opened while learning the commits serve the windows afterwards.
    window_threads = cf.ThreadPoolExecutor(max_workers=max(1, n_workers), thread_name_prefix="evalrunner-window")

    def kill_sandboxes() -> None:
        if pool is not None:
            pool.kill_all()

    scheduler = PackedScheduler(
        plan=lambda: plan(),
        run_step=lambda step, cancel: run_step(step, cancel),
        on_done=lambda unit: on_done(unit),
        kill_sandboxes=kill_sandboxes,
        workers=workers,
        breaker_threshold=breaker_threshold,
        # A sample budget is spent across tasks in a fixed order: keep the round barrier then.
        packed=packed and request.budget_samples is None,
        stop=stop,
        executor=window_threads,
    )

    def export(ck: str) -> Any:  # on the driving thread: exports are not made concurrently
        if ck not in exports:
            repo, sha = parse_commit_key(ck)
            exports[ck] = resources["repos"].export(the_lake, repo, sha)
        return exports[ck]

    def list_in_warm_sessions(export_: Any, cfgs: list, cancel: threading.Event | None) -> dict[str, Any]:
        """Each task's ids, listed in the warm sandbox its windows will run in (opened now, on a
        window thread, several tasks at once)."""

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
            with pool.session(backend, export_, session_cfg) as runner:  # type: ignore[union-attr]
                return runner.list_ids(cancel=cancel)

        futures = {cfg.task: window_threads.submit(one, cfg) for cfg in cfgs}
        out: dict[str, Any] = {}
        for task, future in futures.items():
            try:
                out[task] = future.result()
            except InspectRunError as exc:
                out[task] = exc
        return out

    def record_manifest(step: Step) -> None:
        if not scheduler.stop.is_set():
            materialize(step)

    # 1. What is there to compare. Commits not learnt yet are learnt at once, outside Dagster
    # (ids listed in the warm sandboxes the windows will use); each commit's eval_manifest run
    # then finds its facts in the lake and is recorded on the recorder thread. A commit whose
    # learning failed here is learnt again inside its Dagster run, which fails with the error
    # on record.
    learning: list[cf.Future] = []
    threading.Thread(target=_warm_up, name="evalrunner-warm-up", daemon=True).start()
    try:
        needs = assess_now().needs_facts
        for sha in needs:
            export(commit_key(request.repo, sha))
        lister = list_in_warm_sessions if pool is not None and pool.supports(backend) else None
        learners = cf.ThreadPoolExecutor(max_workers=max(1, len(needs)), thread_name_prefix="evalrunner-learn")
        learning = [
            learners.submit(
                learn_commit,
                the_lake,
                backend,
                exports[commit_key(request.repo, sha)],
                model=request.model,
                cancel=stop,
                lister=functools.partial(lister, exports[commit_key(request.repo, sha)]) if lister else None,
            )
            for sha in needs
        ]
        try:
            cf.wait(learning)
        finally:
            learners.shutdown(wait=False, cancel_futures=True)
        for f in learning:
            # A repository without usable evals fails in its Dagster run below, on record;
            # anything else is not the repository's doing and surfaces here.
            if f.exception() is not None and not isinstance(f.exception(), DiscoveryError):
                raise f.exception()  # type: ignore[misc]
        while True:
            assessment = assess_now()
            if not assessment.needs_facts:
                break
            for step in next_steps(assessment, saved()):
                materialize(step)
    except KeyboardInterrupt:
        stop.set()
        kill_sandboxes()
        cf.wait(learning, timeout=JOIN_SECONDS)
        window_threads.shutdown(wait=False, cancel_futures=True)
        recorder.shutdown(wait=False, cancel_futures=True)
        _finish(
            the_lake,
            request,
            assess_now,
            scheduler,
            "cancelled",
            "cancelled by the user (SIGINT) while learning the commits' evals",
            backend,
        )
        if pool is not None:
            pool.close_all()
        raise
    except BaseException:
        window_threads.shutdown(wait=False, cancel_futures=True)
        recorder.shutdown(wait=True)
        if pool is not None:
            pool.close_all()
        raise
    recorded_partitions = dagster_instance().get_materialized_partitions(eval_manifest.key)
    for sha in dict.fromkeys((request.base_sha, request.head_sha)):
        ck = commit_key(request.repo, sha)
        if sha in needs or ck not in recorded_partitions:  # learnt now, or by a run that never recorded it
            recorded.append(recorder.submit(record_manifest, Step("manifest", f"manifest:{ck}", commit=ck)))

    # 2. Sample windows, packed on one pool; each finished step recorded as a Dagster run.
    def prepare(step: Step) -> None:
        export(step.commit)
        if step.commit not in facts_cache:
            repo, sha = parse_commit_key(step.commit)
            facts_cache[step.commit] = load_facts(the_lake, repo, sha)

    def plan() -> list[Step]:
        if gateway is not None and gateway.budget_spent:
            return []  # windows in flight finish (their refused calls make them budget stops)
        a = assess_now()
        live = {w.task for w in a.next_windows} | {t for _, t in scheduler.in_flight}
        live_tasks.clear()
        live_tasks.update(live)
        if pool is not None:
            # Decided tasks give their warm sandboxes back. An undecided task keeps both arms'
            # sessions even while one arm waits for the other's window (packed: not in the plan).
            pool.retain((sha, t) for sha in (request.base_sha, request.head_sha) for t in live)
        steps = [s for s in next_steps(a, saved()) if s.kind == "samples"]
        for s in steps:
            prepare(s)
        return steps

    def run_step(step: Step, cancel: threading.Event) -> list:
        facts = facts_cache[step.commit].tasks[step.task]
        windows = [Window.parse(w) for w in step.windows]
        try:
            return run_task_windows(
                the_lake,
                backend,
                exports[step.commit],
                facts,
                settings,
                windows,
                pool=pool,
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
                        repo, sha, facts, settings, w, backend_name=backend.name, runtime_digest=runtime
                    )
                    if batch_state(the_lake, key) == "absent":
                        try:
                            record_failure(the_lake, key, failure_kind(exc), f"{type(exc).__name__}: {exc}")
                        except LakeWriteError:
                            pass  # a full disk refuses the record too; the window stays absent
            raise

    def compare_if_due(force: bool = False) -> None:
        if not force and time.monotonic() - last_compare[0] < progress_every_s:
            return
        a = assess_now()
        for step in next_steps(a, saved()):
            if step.kind == "compare":
                materialize(step)
        last_compare[0] = time.monotonic()

    ran: dict[tuple[str, str], list[str]] = {}
    live_tasks: set[str] = set()  # undecided tasks: planned or in flight, on either arm
    finished: set[tuple[str, str]] = set()

    def record(step: Step) -> None:
        if not scheduler.stop.is_set():
            _materialize(step, request.key, dagster_instance(), resources)
            compare_if_due()

    def record_finished(final: bool = False) -> None:
        for ct, windows in ran.items():
            if ct in finished or (ct[1] in live_tasks and not final):
                continue
            finished.add(ct)
            step = Step(
                "samples",
                f"samples:{request.key}:{ct[0]}:{ct[1]}:{','.join(windows)}",
                commit=ct[0],
                task=ct[1],
                windows=tuple(windows),
            )
            recorded.append(recorder.submit(record, step))
        for f in [f for f in recorded if f.done()]:
            recorded.remove(f)
            f.result()  # a failed Dagster run stops the comparison (ComparisonFailed)

    def on_done(unit: Unit) -> None:
        if unit.cancelled or scheduler.stop.is_set() or unit.error is not None:
            return  # nothing landed to record (a cancelled window runs again on resume)
        ct = (unit.step.commit, unit.step.task)
        # A window stopped by the model budget landed nothing: its Dagster run must not re-run it.
        stopped = {o.key.window.name for o in unit.outcomes if o.status == "budget_stopped"}
        ran.setdefault(ct, []).extend(w for w in unit.step.windows if w not in ran.get(ct, []) and w not in stopped)
        if not ran[ct]:
            del ran[ct]
        if on_step is not None:
            on_step(unit.step, saved())
        record_finished()

    try:
        try:
            scheduler.run()
            if not scheduler.stop.is_set():
                record_finished(final=True)
        finally:
            if scheduler.stop.is_set():
                # Stopping: queued recordings are dropped (their windows stay landed and are
                # recorded on resume); a run already executing gets a bounded wait.
                recorder.shutdown(wait=False, cancel_futures=True)
                cf.wait(recorded, timeout=10)
            else:
                for f in recorded:
                    f.result()
                recorder.shutdown(wait=True)
    except KeyboardInterrupt:
        _finish(
            the_lake,
            request,
            assess_now,
            scheduler,
            "cancelled",
            "cancelled by the user (SIGINT); completed windows stay landed and are reused on resume",
            backend,
        )
        raise
    finally:
        if pool is not None:
            pool.close_all()
    trip = scheduler.breaker.trip
    if trip is not None:
        result = _finish(the_lake, request, assess_now, scheduler, "stopped", trip.describe(), backend)
        _materialize(Step("report", f"report:{request.key}:stopped"), request.key, dagster_instance(), resources)
        raise ComparisonStopped(trip.describe(), result)
    if scheduler.stop.is_set():  # stopped from outside (e.g. the Dagster run was terminated)
        _finish(the_lake, request, assess_now, scheduler, "cancelled", "cancelled by the caller", backend)
        raise KeyboardInterrupt("comparison cancelled")
    budget_stops = [o for o in scheduler.outcomes() if o.status == "budget_stopped"]
    if gateway is not None and (budget_stops or (gateway.budget_spent and assess_now().next_windows)):
        result = _finish(
            the_lake,
            request,
            assess_now,
            scheduler,
            "budget_spent",
            f"the model budget of ${request.budget_usd:g} was spent (${gateway.spent_usd:.4f}); "
            f"{len(budget_stops)} window(s) stopped, nothing more was run",
        )
        result["execution"]["gateway"] = gateway_summary(gateway)
        assess_mod.save_result(the_lake, result)
        _write_execution(the_lake, request, result["execution"])
        _materialize(Step("report", f"report:{request.key}:budget"), request.key, dagster_instance(), resources)
        return result
    compare_if_due(force=True)
    result = saved()
    assert result is not None
    result["execution"] = {
        **scheduler.summary(),
        "retried_failures": len(retired),
        "planning": {**planning, "seconds": round(planning["seconds"], 3)},
        # batches whose files did not match their records: run again here
        "quarantined": [
            q
            for q in integrity.QUARANTINED[quarantined_before:]
            if f"/{LAYOUT.batch_records_prefix(request.repo)}/" in q["record"]
        ],
        **_sandbox_counts(backend),
    }
    if gateway is not None:
        result["execution"]["gateway"] = gateway_summary(gateway)
    assess_mod.save_result(the_lake, result)
    _write_execution(the_lake, request, result["execution"])
    return result


def _sandbox_counts(backend: Any) -> dict[str, Any]:
    """The sandboxes this comparison started (e.g. cold pods vs warm session pods), when the
    backend counts them: ``{"sandboxes": {...}}`` or nothing."""
    counts = backend.sandbox_counts() if hasattr(backend, "sandbox_counts") else {}
    return {"sandboxes": counts} if counts else {}


def gateway_summary(gateway: ModelGateway) -> dict[str, Any]:
    """What the comparison sent through the model gateway (closed scopes; all of them by the
    time the warm pool has closed)."""
    return {
        **gateway.total.to_dict(),
        "budget_usd": gateway.settings.budget_usd,
        "spent_usd": round(gateway.spent_usd, 9),
        "max_in_flight": dict(gateway.max_in_flight),
        "max_concurrency": gateway.settings.max_concurrency,
    }


def _write_execution(the_lake: Any, request: ComparisonRequest, execution: dict[str, Any]) -> None:
    import json

    rel = LAYOUT.comparison_artifact(request.repo, request.pr, request.head_sha, "execution.json")
    the_lake.write_bytes(rel, json.dumps(execution, indent=2, sort_keys=True, default=str).encode())


def _finish(
    the_lake: Any,
    request: ComparisonRequest,
    assess_now: Callable[[], Any],
    scheduler: PackedScheduler,
    status: str,
    reason: str,
    backend: Any = None,
) -> dict[str, Any]:
    """Save the document of a comparison that did not run to its end, saying why."""
    result = assess_now().result or {}
    result = dict(result)
    result["status"] = status
    result["stopped_reason"] = reason
    if result.get("verdict") == "RUNNING":
        # Not a decision: the evidence stops here. INCONCLUSIVE, as for a failed task.
        result["verdict"] = "INCONCLUSIVE"
        result.setdefault("final_verdict", {})["verdict"] = "INCONCLUSIVE"
    if scheduler.breaker.trip is not None:
        result["breaker"] = scheduler.breaker.trip.to_dict()
    result["execution"] = {**scheduler.summary(), "status": status, "reason": reason, **_sandbox_counts(backend)}
    if result.get("repo"):
        assess_mod.save_result(the_lake, result)
        _write_execution(the_lake, request, result["execution"])
    return result
