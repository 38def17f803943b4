"""Jobs the sensors and the CLI launch: one per partition grain.

``comparison_job`` is the PR path: its ``comparison`` asset runs what a head's comparison still
needs through the comparison engine (commits learnt, every ready window of both arms on one pool
of warm sandboxes, decided) and its ``pr_report`` posts the verdict. ``eval_manifest_job`` and
``task_samples_job`` materialize one commit's evals / one (commit, task)'s windows on their own
(from the UI, say); the PR path reports those partitions as materializations of its run."""

import dagster as dg

from evalrunner_assets.assets.candidates import candidate_measurements, continuum_frontier
from evalrunner_assets.assets.evals import comparison, eval_manifest, pr_report, task_samples
from evalrunner_assets.assets.series import cohort_series
from evalrunner_assets.assets.swe import swe_attempts, swe_gold_check

# In the run worker's own process: Dagster's default executor starts a process per step, each
# loading the code location again (seconds per step on a 2-core machine, on every PR's path).
eval_manifest_job = dg.define_asset_job(
    "eval_manifest_job", selection=[eval_manifest], executor_def=dg.in_process_executor
)
# task_samples lands a window's rows and shows them as sample_scores and trajectories (one step);
# comparison runs the engine and shows the baselines it used (one step).
task_samples_job = dg.define_asset_job(
    "task_samples_job", selection=[task_samples], executor_def=dg.in_process_executor
)
comparison_job = dg.define_asset_job(
    "comparison_job", selection=[comparison, pr_report], executor_def=dg.in_process_executor
)

# Without its check's own step: the asset evaluates ``no_cohort_regression`` per partition as
# each point lands (the separate step is for running the check on one partition by hand).
cohort_series_job = dg.define_asset_job(
    "cohort_series_job", selection=dg.AssetSelection.assets(cohort_series).without_checks()
)

candidate_measurements_job = dg.define_asset_job("candidate_measurements_job", selection=[candidate_measurements])
continuum_frontier_job = dg.define_asset_job("continuum_frontier_job", selection=[continuum_frontier])

# One step each, spreading its attempts over the sandbox's workers itself: in the run worker's
# own process (a step process would load the code location once more).
swe_run_job = dg.define_asset_job("swe_run_job", selection=[swe_attempts], executor_def=dg.in_process_executor)
swe_gold_job = dg.define_asset_job("swe_gold_job", selection=[swe_gold_check], executor_def=dg.in_process_executor)

# Tags of SWE runs and gold checks: the run id (``swe_runs`` key) / the task set.
SWE_RUN_TAG = "evalrunner/swe-run"
SWE_GOLD_TAG = "evalrunner/swe-gold"
# Dagster's own log lines at WARNING: the run's outcome is in the lake and the run record.
SWE_QUIET_CONFIG = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def swe_run_key(run_id: str, launch: int) -> str:
    """The run key of one launch of a submitted SWE run: the run id, then one suffix per
    relaunch after a failed or cancelled run (``launch`` counts those)."""
    return run_id if launch == 0 else f"{run_id}:launch-{launch}"


def swe_run_request(run_id: str, launch: int) -> dg.RunRequest:
    """The Dagster run of a submitted SWE run (requested by ``swe_run_sensor``)."""
    return dg.RunRequest(
        run_key=swe_run_key(run_id, launch),
        job_name=swe_run_job.name,
        partition_key=run_id,
        tags={SWE_RUN_TAG: run_id},
        run_config=SWE_QUIET_CONFIG,
    )


# Runs that write one head's comparison document and check run wait for each other: the run
# coordinator (dagster.yaml, `tag_concurrency_limits`) allows one per value of this tag, so two
# overlapping runs cannot finish out of order and leave an older verdict on the PR.
REPORT_LOCK_TAG = "evalrunner/report-for"


def comparison_run_tags(comparison_key: str) -> dict[str, str]:
    return {"evalrunner/comparison": comparison_key, REPORT_LOCK_TAG: comparison_key}


def comparison_run_request(comparison_key: str, run_key: str, tags: dict[str, str] | None = None) -> dg.RunRequest:
    """The run that moves one comparison on (requested by the PR sensor and the sampling sensor)."""
    return dg.RunRequest(
        run_key=run_key,
        job_name=comparison_job.name,
        partition_key=comparison_key,
        tags={**comparison_run_tags(comparison_key), **(tags or {})},
    )


# After a REGRESSED comparison (miner_sensor) or on demand: one step, in the run worker's process.
miner_findings_job = dg.define_asset_job(
    "miner_findings_job", selection=["miner_findings"], executor_def=dg.in_process_executor
)

JOBS = [
    eval_manifest_job,
    task_samples_job,
    comparison_job,
    cohort_series_job,
    candidate_measurements_job,
    continuum_frontier_job,
    swe_run_job,
    swe_gold_job,
    miner_findings_job,
]
