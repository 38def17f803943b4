"""Driver layer for SWE-style runs: submit them to the Dagster instance, idempotently.

A run's id is derived from its request (:meth:`RunSpec.run_id`) and its record is written once
to the lake; its id is a ``swe_runs`` partition, materialized by ``swe_run_job`` runs tagged
with the id. A run that failed or was cancelled runs again when submitted again; attempts
already landed are kept, never duplicated (they are write-once).

``POST /v1/runs`` (:meth:`SweLauncher.submit`) records the run, leaves a request for it in the
lake and returns: ``swe_run_sensor`` (sensors/swe.py) turns the request into a Dagster run that
the daemon's run coordinator queues and its run launcher starts in a process of its own. So the
process serving the API executes nothing, and several API servers on one instance launch a
run once (the request names the launch, the launch is the run key, Dagster launches a run key
once).

``evalrunner swe run`` and ``evalrunner swe register`` have no daemon to hand work to: they
execute in their own process (``execute_in_process``) and wait (:meth:`SweLauncher.run_here`,
:meth:`SweLauncher.register`). Those in-process runs are serialised per process: Dagster
re-applies the instance's Python logging configuration (``logging.config.dictConfig``) whenever
a run starts, which takes the logging module's lock and then every handler's lock while another
run's event handler holds its own and waits for the module lock, so two runs started together in
one process on an instance with a ``dagster.yaml`` deadlock it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg

from evalrunner_assets.jobs import SWE_GOLD_TAG, SWE_QUIET_CONFIG, SWE_RUN_TAG
from evalrunner_assets.partitions import (
    SWE_RUNS,
    SWE_RUNS_KEPT,
    SWE_TASK_SETS,
    add_partitions,
    trim_swe_runs,
)
from evalrunner_assets.swe import RunSpec, SweStore
from evalrunner_assets.swe.runner import SweContext, load_agent, register_task_set
from lake.storage import Lake
from sensors.swe import RUN_KEY_TAG, swe_runs_in_flight

RUN_TAG = SWE_RUN_TAG
GOLD_TAG = SWE_GOLD_TAG
QUIET = SWE_QUIET_CONFIG
_DONE_BADLY = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)
_UNDER_WAY = (dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING)
# Serialises in-process Dagster runs (see the module docstring).
_IN_PROCESS_RUN = threading.Lock()


class SweLauncher:
    """Submits SWE runs and gold checks to one Dagster instance over one lake."""

    def __init__(
        self,
        lake: Lake,
        instance: dg.DagsterInstance | Callable[[], dg.DagsterInstance],
        resources: dict[str, Any] | None = None,
    ) -> None:
        self.store = SweStore(lake)
        self._instance = instance
        self._resources = resources
        self._lock = threading.Lock()
        self._opening = threading.Lock()
        self.keep_runs = SWE_RUNS_KEPT  # swe_runs keys kept on the instance (the oldest go first)

    @property
    def instance(self) -> dg.DagsterInstance:
        """The instance, opened on first use when given as a factory (a server whose API has no
        token never needs one, and starts without reaching its storage)."""
        with self._opening:
            if not isinstance(self._instance, dg.DagsterInstance):
                self._instance = self._instance()
            return self._instance

    @property
    def resources(self) -> dict[str, Any]:
        """The resources of in-process runs (the daemon's runs get the code location's)."""
        if self._resources is None:
            from resources import LakeResource, SandboxResource

            self._resources = {"lake": LakeResource(root=self.store.lake.root), "sandbox": SandboxResource.from_env()}
        return self._resources

    def _job(self, name: str) -> dg.JobDefinition:
        from evalrunner_assets.definitions import defs

        return defs.resolve_job_def(name)

    def _runs(self, tag: str, value: str) -> list[dg.DagsterRun]:
        return list(self.instance.get_runs(filters=dg.RunsFilter(tags={tag: value})))

    def _record(self, spec: RunSpec) -> tuple[dict[str, Any], list[dg.DagsterRun], bool]:
        """(the run's record, its Dagster runs newest first, whether it needs launching: it has
        no launch waiting, queued, running or done). Raises ``SweError`` for an unknown task set
        or agent version."""
        self.store.task_set(spec.task_set)
        load_agent(spec.agent_version)
        record, _ = self.store.save_run(spec)
        runs = self._runs(RUN_TAG, record["id"])
        busy = any(r.status not in _DONE_BADLY for r in runs) or self.store.queued_run(record["id"]) is not None
        return record, runs, not busy

    # -- runs ----------------------------------------------------------------------------------
    def submit(self, spec: RunSpec) -> tuple[dict[str, Any], bool]:
        """Queue the run for the daemon: (run record, whether a launch was requested now)."""
        with self._lock:
            record, runs, needed = self._record(spec)
            if needed:
                # Launch N follows N runs that failed or were cancelled: racing submitters of
                # the same run count the same runs, so they request the same run key.
                self.store.queue_run(record["id"], launch=len(runs))
            return record, needed

    def run_here(self, spec: RunSpec) -> tuple[dict[str, Any], bool]:
        """Execute the run in this process and wait (``evalrunner swe run``): (run record,
        whether it ran now). A run waiting for the daemon, queued, running or done runs nothing."""
        with self._lock:
            record, _, needed = self._record(spec)
        if not needed:
            return record, False
        run_id = record["id"]
        active = frozenset(swe_runs_in_flight(self.instance) | {r["id"] for r in self.store.queued_runs()})
        trim_swe_runs(self.instance, [run_id], self.keep_runs, active)
        add_partitions(self.instance, SWE_RUNS, [run_id])
        with _IN_PROCESS_RUN:
            self._job("swe_run_job").execute_in_process(
                instance=self.instance,
                partition_key=run_id,
                tags={RUN_TAG: run_id},
                resources=self.resources,
                raise_on_error=False,
                run_config=QUIET,
            )
        return record, True

    def status(self, run_id: str) -> dict[str, Any]:
        """The run record with its status and its Dagster runs (newest first). The status is
        ``queued`` while a launch waits for the sensor or its run is queued, ``running`` while
        that run executes, ``failed`` when it failed or was cancelled, and the run's outcome
        (``done``, ``budget_spent``, …) once it succeeded; ``submitted`` for a record with
        neither (its writer stopped before the request: submitting it again queues it)."""
        record = self.store.run(run_id)
        runs = self._runs(RUN_TAG, run_id)
        record["dagster_runs"] = [
            {"run_id": r.run_id, "status": r.status.value, "run_key": r.tags.get(RUN_KEY_TAG)} for r in runs
        ]
        newest = runs[0] if runs else None
        if self.store.queued_run(run_id) is not None and (newest is None or newest.status in _DONE_BADLY):
            record["status"] = "queued"
        elif newest is None:
            record["status"] = record.get("status") or "submitted"
        elif newest.status in _DONE_BADLY:
            record["status"] = "failed"
        elif newest.status is dg.DagsterRunStatus.SUCCESS:
            record["status"] = record.get("status") or "done"
        elif newest.status in _UNDER_WAY:
            record["status"] = "running"
        else:
            record["status"] = "queued"
        return record

    # -- task sets -----------------------------------------------------------------------------
    def register(self, ctx: SweContext, spec_file: Path, repo_source: str, gold_runs: int = 3) -> dict[str, Any]:
        """Register a task set and run its gold check at once, in this process (a
        ``swe_gold_job`` run); the daily check is the schedule's, through the daemon."""
        ts, created = register_task_set(ctx, spec_file, repo_source)
        add_partitions(self.instance, SWE_TASK_SETS, [ts.name])
        with _IN_PROCESS_RUN:
            result = self._job("swe_gold_job").execute_in_process(
                instance=self.instance,
                partition_key=ts.name,
                tags={GOLD_TAG: ts.name},
                resources=self.resources,
                run_config={**QUIET, "ops": {"swe_gold_check": {"config": {"runs": gold_runs}}}},
                raise_on_error=True,
            )
        return {
            "task_set": ts.name,
            "created": created,
            "tasks": len(ts.tasks),
            "gold_run": result.run_id,
            "gold": self.store.gold(ts.name),
        }


def local_launcher() -> SweLauncher:
    """A launcher on the home's Dagster instance (``DAGSTER_HOME``) and lake (for the CLI)."""
    import os

    from evalrunner_assets import home
    from lake.storage import open_lake

    os.environ.setdefault("DAGSTER_HOME", str(home.ensure_dagster_home()))
    return SweLauncher(open_lake(home.lake_root()), dg.DagsterInstance.get())


def api_routes(lake: Lake) -> list[Any]:
    """The run API's routes for ``evalrunner serve``: a launcher on the home's Dagster instance
    (``DAGSTER_HOME``, opened at the first authorized request) over ``lake``, whose runs the
    daemon of that instance launches; the token comes from the environment."""
    import os

    from evalrunner_assets import home
    from evalrunner_assets.http.swe_api import create_api, load_api_token

    os.environ.setdefault("DAGSTER_HOME", str(home.ensure_dagster_home()))
    launcher = SweLauncher(lake, dg.DagsterInstance.get)
    return list(create_api(launcher, load_api_token()).routes)
