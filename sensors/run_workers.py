"""The run-worker reaper: runs whose run worker died are failed, said so, and picked up again.

A run worker killed by ``kill -9`` or the OOM killer is noticed by Dagster only in one case: the
code server that started it (``DefaultRunLauncher``: ``evalrunner serve``, ``dagster dev``) is
still running; it then fails the run with a generic message ("marked as failed from outside the
execution context", after an engine event "Run execution process for <run> was terminated by
signal 9"). When that code server is gone too (serve restarted or killed, the machine rebooted,
a code-location reload) or the worker was a command's in-process run, nothing does: the run
reads STARTED for ever (the SWE run API reporting ``running``, the comparison never resumed,
the report lock tag held). The ``DefaultRunLauncher`` has no run-worker health check, so
Dagster's run monitoring cannot help.

Every ``REAPER_INTERVAL_S`` this sensor:

- lists the runs of this code location's jobs in STARTED (and STARTING past
  ``STARTING_TIMEOUT_S``), reads the processes each names (``pipeline.run_workers``: its run tags
  and Dagster's "Started process for run" event) and marks FAILURE those whose processes are all
  gone from this host, with a message naming the run, the pid and host, how the worker died
  when that is known, and what happens next. A dead worker whose launcher lives (a zombie's
  parent, or the process its tags name as its launcher: the code server that started the run)
  is left to that launcher for ``LAUNCHER_GRACE_S`` from the tick that first found it dead
  (remembered in the sensor's cursor): Dagster's code server fails the run itself within a
  second, and two writers failing one run would report one death twice. A run it cannot judge
  (no pid or host recorded, another host, a live worker) is left alone and the tick's log says
  why;
- finds the runs Dagster failed because their worker died (its code server saw the process exit,
  or its run monitoring found the worker failed), and adds an engine event saying the same
  (pid, host, what happens next).

Both get the tag ``evalrunner/worker-lost``: ``swe_run_sensor`` relaunches such a SWE run; the
sampling sensor resumes any comparison whose run ended.

On any other run launcher it judges nothing under way and says so: ``K8sRunLauncher`` has a
worker health check, and Dagster's run monitoring (deploy/dagster.yaml) uses it; the runs that
monitoring fails for a dead worker are still tagged and explained here.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import MutableMapping
from datetime import UTC, datetime
from typing import Protocol

import dagster as dg

from evalrunner_assets.jobs import JOBS, SWE_RUN_TAG, comparison_job, swe_run_job
from evalrunner_assets.pipeline.run_workers import (
    WORKER_LOST_TAG,
    Judgement,
    ProcessTable,
    ProcTable,
    RunUnderWay,
    WorkerProcess,
    judge,
    launcher_from_tags,
    this_host,
    workers_from_tags,
)
from sensors.sampling import MAX_ATTEMPTS
from sensors.swe import worker_loss_relaunch

REAPER_INTERVAL_S = 10


class SensorLog(Protocol):
    """Where the reaper says what it did: a sensor's ``context.log`` (or a test's list of lines)."""

    def info(self, msg: str) -> None: ...

    def warning(self, msg: str) -> None: ...


# How long a dead worker's live launcher is left to fail the run before the reaper does, counted
# from the tick that first found the worker dead: Dagster's code server checks its run workers
# every half second (dagster/_grpc/server.py, CLEANUP_TICK); the next tick, 10 s on, is due.
LAUNCHER_GRACE_S = 5.0
# A run stays STARTING while its worker loads the code location: minutes on a loaded machine.
STARTING_TIMEOUT_S = 300.0
# How Dagster's run worker announces itself (dagster/_grpc/impl.py, dagster/_cli/api.py).
STARTED_PROCESS = re.compile(r"^Started process for run \(pid: (\d+)\)")
# Dagster reports this first in a run worker: the event is among a run's first engine events.
ENGINE_EVENTS_READ = 20
DEFAULT_LAUNCHER = "DefaultRunLauncher"
# How Dagster's code server tells of a run worker that died (dagster/_grpc/server.py; the
# engine event's text starts with the reporting class, "[DagsterApiServer] ").
CRASHED_PROCESS = re.compile(
    r"^(?:\[\w+\] )?Run execution process for (\S+) (was terminated by signal \d+ \(\w+\)|unexpectedly exited with code -?\d+)"
)
# How Dagster's run monitoring fails a run whose worker its launcher reports failed or gone
# (dagster/_daemon/monitoring/run_monitoring.py).
MONITORING_FOUND = "Detected run worker status"
# Failed runs the first tick looks at (later ticks: those failed since the previous tick).
LOOK_BACK_S = 3600.0
# A run failed while the previous tick ran may carry an update time just before that tick's
# cursor: each tick looks this far further back (a run already tagged is skipped).
CURSOR_OVERLAP_S = 30.0


def run_launcher_name(instance: dg.DagsterInstance) -> str:
    """The class name of the instance's run launcher, read from its configuration (a launcher
    is not built for this: ``K8sRunLauncher`` would load a cluster configuration)."""
    if instance.is_ephemeral:
        return type(instance.run_launcher).__name__
    data = instance.get_ref().run_launcher_data
    return DEFAULT_LAUNCHER if data is None else data.class_name


def engine_event_worker(instance: dg.DagsterInstance, run_id: str) -> WorkerProcess | None:
    """The run worker's pid from Dagster's "Started process for run" engine event, if any."""
    for entry in _engine_events(instance, run_id, first=True):
        match = STARTED_PROCESS.match(entry.message or entry.user_message or "")
        if match:
            return WorkerProcess(int(match.group(1)), "engine event", seen_at=entry.timestamp)
    return None


def _engine_events(instance: dg.DagsterInstance, run_id: str, *, first: bool) -> list[dg.EventLogEntry]:
    """A run's first (or last) ``ENGINE_EVENTS_READ`` engine events."""
    records = instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ENGINE_EVENT, limit=ENGINE_EVENTS_READ, ascending=first
    ).records
    return [record.event_log_entry for record in records]


def under_way(instance: dg.DagsterInstance, run: dg.DagsterRun) -> RunUnderWay:
    """The run as the pure logic sees it: its status, since when, its worker processes and host."""
    host, tagged = workers_from_tags(run.tags)
    workers = [w for w in (tagged, engine_event_worker(instance, run.run_id)) if w is not None]
    record = instance.get_run_record_by_id(run.run_id)
    since = None
    if record is not None:
        since = record.start_time if run.status == dg.DagsterRunStatus.STARTED else None
        since = since or record.update_timestamp.timestamp()
    return RunUnderWay(
        run.run_id, run.job_name, run.status.value, since, host, tuple(workers), launcher_from_tags(run.tags)
    )


def crash_explanation(instance: dg.DagsterInstance, run_id: str) -> str | None:
    """How the run's worker died, when Dagster failed the run for it: its code server saw the
    process exit (an engine event), or its run monitoring found the worker failed or gone (the
    failure's own message, on a launcher with a health check: Kubernetes)."""
    for entry in _engine_events(instance, run_id, first=False):
        match = CRASHED_PROCESS.match(entry.message or entry.user_message or "")
        if match and match.group(1) == run_id:
            return match.group(2)
    failures = instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.RUN_FAILURE, limit=1, ascending=False
    ).records
    for record in failures:
        text = record.event_log_entry.message or ""
        if text.startswith(MONITORING_FOUND):
            return f"was found dead by Dagster's run monitoring ({text.splitlines()[0][:300]})"
    return None


def what_happens_next(instance: dg.DagsterInstance, run: dg.DagsterRun) -> str:
    if run.job_name == swe_run_job.name and SWE_RUN_TAG in run.tags:
        return worker_loss_relaunch(instance, run.tags[SWE_RUN_TAG], this_run_counts=True)[1]
    if run.job_name == comparison_job.name:
        return (
            "the sampling sensor requests the comparison's next run, which resumes from what the lake holds "
            f"(at most {MAX_ATTEMPTS} runs from one state)"
        )
    return "re-execute it from the Dagster UI to run it again"


def lost_worker(run_id: str, job_name: str, worker: WorkerProcess | None, host: str | None, what: str) -> str:
    """ "Run <id> (<job>) lost its run worker: pid N on <host> <what>" (the start of both messages)."""
    pid = f"pid {worker.pid}" if worker is not None else "its process"
    return f"Run {run_id} ({job_name}) lost its run worker: {pid} on {host or 'its host'} {what}"


def failure_message(judgement: Judgement, next_step: str) -> str:
    run = judgement.run
    lost = lost_worker(run.run_id, run.job_name, judgement.worker, run.host, f"is gone ({judgement.reason})")
    return f"{lost}. Marked failed by evalrunner's run_worker_reaper; {next_step}."


def reap(
    instance: dg.DagsterInstance,
    log: SensorLog,
    table: ProcessTable | None = None,
    host: str | None = None,
    now: float | None = None,
    starting_timeout_s: float = STARTING_TIMEOUT_S,
    awaiting: MutableMapping[str, float] | None = None,
    launcher_grace_s: float = LAUNCHER_GRACE_S,
) -> list[str]:
    """Fail the runs of this code location's jobs whose run worker is gone from this host;
    returns their run ids. Every run left alone is logged with the reason.

    ``awaiting`` is the reaper's memory between ticks: run id -> when a tick first found its
    worker dead while its launcher lived. Updated in place: a run enters it when first found so
    and is failed once ``launcher_grace_s`` has passed since; runs no longer under way leave it."""
    awaiting = {} if awaiting is None else awaiting
    now = now or time.time()
    runs = instance.get_runs(
        filters=dg.RunsFilter(
            job_name=None,
            statuses=[dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING],
        )
    )
    ours = {job.name for job in JOBS}
    by_id = {r.run_id: r for r in runs if r.job_name in ours}
    views = [under_way(instance, r) for r in by_id.values()]
    verdicts = judge(views, table or ProcTable(), host or this_host(), now, starting_timeout_s)
    for run_id in [r for r in awaiting if r not in by_id]:
        del awaiting[run_id]
    failed = []
    for judgement in verdicts:
        run_id = judgement.run.run_id
        if not judgement.dead:
            awaiting.pop(run_id, None)
            log.info(f"run {run_id} ({judgement.run.job_name}, {judgement.run.status}) left alone: {judgement.reason}")
            continue
        if judgement.awaiting_parent:
            # The code server that launched the run fails it itself, saying how the worker died
            # (explain_crashed then tags and explains it): only one of us may fail it. A launcher
            # that does not (a shell, a test, a command's own parent) leaves it to us.
            first_found = awaiting.setdefault(run_id, now)
            if now - first_found < launcher_grace_s:
                log.info(
                    f"run {run_id} ({judgement.run.job_name}, {judgement.run.status}) left to its launcher: its "
                    f"worker is gone ({judgement.reason}) and the process that started it lives; failed here if "
                    f"still under way {launcher_grace_s:g} s after {first_found:.0f}"
                )
                continue
        awaiting.pop(run_id, None)
        # Read again now that the worker is known to be gone: a worker writes its run's end
        # before it exits, so a run still under way now will never be ended by it.
        current = instance.get_run_by_id(run_id)
        if current is None or current.status not in (dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING):
            continue
        message = failure_message(judgement, what_happens_next(instance, current))
        instance.add_run_tags(run_id, {WORKER_LOST_TAG: "true"})
        instance.report_run_failed(current, message)
        log.warning(message)
        failed.append(run_id)
    return failed


def explain_crashed(instance: dg.DagsterInstance, log: SensorLog, since: float) -> list[str]:
    """Tag and explain the runs of this location's jobs that Dagster's code server failed (since
    ``since``, epoch seconds) because their worker process died; returns their run ids."""
    runs = instance.get_runs(
        filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE], updated_after=datetime.fromtimestamp(since, UTC))
    )
    ours = {job.name for job in JOBS}
    explained = []
    for run in runs:
        if run.job_name not in ours or run.tags.get(WORKER_LOST_TAG) == "true":
            continue
        how = crash_explanation(instance, run.run_id)
        if how is None:
            continue  # it failed in its own code, or was failed by someone else
        host, tagged = workers_from_tags(run.tags)
        worker = engine_event_worker(instance, run.run_id) or tagged
        message = f"{lost_worker(run.run_id, run.job_name, worker, host, how)}; {what_happens_next(instance, run)}."
        # The explanation first, then the tag that marks the run explained: whoever sees the
        # tag (swe_run_sensor's relaunch, the Runs page) also finds the message in its log.
        instance.report_engine_event(message, run)
        instance.add_run_tags(run.run_id, {WORKER_LOST_TAG: "true"})
        log.warning(message)
        explained.append(run.run_id)
    return explained


def read_cursor(cursor: str | None) -> tuple[float | None, dict[str, float]]:
    """(the previous tick's time, the runs awaiting their launcher) from the sensor's cursor: a
    JSON object, or the bare timestamp earlier versions wrote. An unreadable cursor starts over."""
    if not cursor:
        return None, {}
    try:
        value = json.loads(cursor)
    except ValueError:
        return None, {}
    if isinstance(value, int | float):
        return float(value), {}
    if not isinstance(value, dict):
        return None, {}
    at = value.get("at")
    awaiting = value.get("awaiting")
    runs = (
        {str(k): float(v) for k, v in awaiting.items() if isinstance(v, int | float)}
        if isinstance(awaiting, dict)
        else {}
    )
    return (float(at) if isinstance(at, int | float) else None), runs


def write_cursor(at: float, awaiting: dict[str, float]) -> str:
    return json.dumps({"at": round(at, 3), "awaiting": awaiting}, sort_keys=True)


@dg.sensor(
    minimum_interval_seconds=REAPER_INTERVAL_S,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Fails runs still STARTED whose run worker process is gone from this host (the default run "
    "launcher has no health check), so their comparison or SWE run is resumed.",
)
def run_worker_reaper(context: dg.SensorEvaluationContext) -> dg.SkipReason:
    """Marks failed the runs under way whose run worker process is gone from this host (only on
    an instance whose run launcher is the ``DefaultRunLauncher``, which has no health check), and
    tags and explains the runs Dagster failed because their worker died (any launcher)."""
    now = time.time()
    previous, awaiting = read_cursor(context.cursor)
    since = previous - CURSOR_OVERLAP_S if previous is not None else now - LOOK_BACK_S
    launcher = run_launcher_name(context.instance)
    failed = reap(context.instance, context.log, now=now, awaiting=awaiting) if launcher == DEFAULT_LAUNCHER else []
    explained = explain_crashed(context.instance, context.log, since)
    context.update_cursor(write_cursor(now, awaiting))
    said = [
        f"the run launcher is {launcher}, not the {DEFAULT_LAUNCHER}: runs under way are left to Dagster's "
        "run monitoring, which checks its run workers (deploy/dagster.yaml enables it)"
        if launcher != DEFAULT_LAUNCHER
        else "",
        f"marked {len(failed)} run(s) failed whose run worker was gone: {', '.join(failed)}" if failed else "",
        f"left {len(awaiting)} run(s) whose run worker is gone to the live process that started it: "
        f"{', '.join(sorted(awaiting))}"
        if awaiting
        else "",
        f"explained {len(explained)} run(s) failed when their worker died: {', '.join(explained)}" if explained else "",
    ]
    return dg.SkipReason("; ".join(s for s in said if s) or "no run under way has lost its run worker")
