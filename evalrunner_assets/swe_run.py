"""Driver layer for SWE-style runs: launch them as Dagster runs on the instance, idempotently.

``POST /v1/runs`` and ``evalrunner swe run`` come here. A run's id is derived from its request
(:meth:`RunSpec.run_id`), its record is written once to the lake, its id becomes a
``swe_runs`` partition and one run of ``swe_run_job`` materializes it, tagged with the id. A
second submission of the same request finds the record and the tagged Dagster run and launches
nothing (a run that failed or was cancelled is launched again; attempts already landed are
kept, never duplicated). Runs execute in this process (``execute_in_process`` on a worker
thread) and are recorded on the instance, so the UI of ``evalrunner serve`` shows them.

One run executes at a time per process; later submissions wait their turn ("queued"). Dagster
re-applies the instance's Python logging configuration (``logging.config.dictConfig``) whenever
a run starts, which takes the logging module's lock and then every handler's lock while another
run's event handler holds its own and waits for the module lock: two runs started together on
an instance with a ``dagster.yaml`` deadlock the process. Each run still spreads its attempts
over its own workers.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import dagster as dg

from evalrunner_assets.partitions import (
    SWE_RUNS_KEPT,
    add_partitions,
    swe_runs_partitions,
    swe_task_sets_partitions,
    trim_swe_runs,
)
from evalrunner_assets.swe import RunSpec, SweStore
from evalrunner_assets.swe.runner import SweContext, load_agent, register_task_set
from lake.storage import Lake

RUN_TAG = "evalrunner/swe-run"
GOLD_TAG = "evalrunner/swe-gold"
# Dagster's own log lines at WARNING: the run's outcome is in the lake and the run record.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
_DONE_BADLY = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)
# Serialises in-process Dagster runs (see the module docstring).
_IN_PROCESS_RUN = threading.Lock()


class SweLauncher:
    """Submits SWE runs and gold checks to one Dagster instance over one lake."""

    def __init__(self, lake: Lake, instance: dg.DagsterInstance, resources: dict[str, Any] | None = None) -> None:
        from resources import LakeResource, SandboxResource

        self.store = SweStore(lake)
        self.instance = instance
        self.resources = resources or {"lake": LakeResource(root=lake.root), "sandbox": SandboxResource.from_env()}
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}
        self.keep_runs = SWE_RUNS_KEPT  # swe_runs keys kept on the instance (the oldest go first)

    def _job(self, name: str) -> dg.JobDefinition:
        from evalrunner_assets.definitions import defs

        return defs.resolve_job_def(name)

    def _runs(self, tag: str, value: str) -> list[dg.DagsterRun]:
        return list(self.instance.get_runs(filters=dg.RunsFilter(tags={tag: value})))

    # -- runs ----------------------------------------------------------------------------------
    def submit(self, spec: RunSpec) -> tuple[dict[str, Any], bool]:
        """(run record, whether a Dagster run was launched now). Raises ``SweError`` for an
        unknown task set or agent version."""
        self.store.task_set(spec.task_set)
        load_agent(spec.agent_version)
        run_id = spec.run_id()
        with self._lock:
            record, _ = self.store.save_run(spec)
            live = self._threads.get(run_id)
            if live is not None and live.is_alive():
                return record, False
            if any(r.status not in _DONE_BADLY for r in self._runs(RUN_TAG, run_id)):
                return record, False
            active = frozenset(k for k, t in self._threads.items() if t.is_alive())
            trim_swe_runs(self.instance, [run_id], self.keep_runs, active)
            add_partitions(self.instance, swe_runs_partitions.name or "swe_runs", [run_id])
            thread = threading.Thread(target=self._execute, args=(run_id,), name=f"swe-{run_id}", daemon=True)
            self._threads[run_id] = thread
            thread.start()
            return record, True

    def _execute(self, run_id: str) -> None:
        with _IN_PROCESS_RUN:
            self._job("swe_run_job").execute_in_process(
                instance=self.instance,
                partition_key=run_id,
                tags={RUN_TAG: run_id},
                resources=self.resources,
                raise_on_error=False,
                run_config=QUIET,
            )

    def status(self, run_id: str) -> dict[str, Any]:
        """The run record with its Dagster runs' ids and statuses (newest first)."""
        record = self.store.run(run_id)
        runs = self._runs(RUN_TAG, run_id)
        record["dagster_runs"] = [{"run_id": r.run_id, "status": r.status.value} for r in runs]
        if runs and runs[0].status in _DONE_BADLY:
            record["status"] = "failed"
        elif runs and runs[0].status is not dg.DagsterRunStatus.SUCCESS:
            record["status"] = record.get("status") or "queued"
        record.setdefault("status", "queued")
        return record

    def wait(self, run_id: str, timeout: float | None = None) -> None:
        thread = self._threads.get(run_id)
        if thread is not None:
            thread.join(timeout)

    # -- task sets -----------------------------------------------------------------------------
    def register(self, ctx: SweContext, spec_file: Path, repo_source: str, gold_runs: int = 3) -> dict[str, Any]:
        """Register a task set and run its gold check at once (a ``swe_gold_job`` run)."""
        ts, created = register_task_set(ctx, spec_file, repo_source)
        add_partitions(self.instance, swe_task_sets_partitions.name or "swe_task_sets", [ts.name])
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
    (``DAGSTER_HOME``) over ``lake``; the token comes from the environment."""
    import os

    from evalrunner_assets import home
    from sensors.swe_api import create_api, load_api_token

    os.environ.setdefault("DAGSTER_HOME", str(home.ensure_dagster_home()))
    launcher = SweLauncher(lake, dg.DagsterInstance.get())
    return list(create_api(launcher, load_api_token()).routes)
