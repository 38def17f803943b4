"""Jobs the sensors and the CLI launch: one per partition grain."""

import dagster as dg

from evalrunner_assets.assets.candidates import candidate_measurements, continuum_frontier
from evalrunner_assets.assets.evals import comparison, eval_manifest, pr_report, task_samples
from evalrunner_assets.assets.series import cohort_series

eval_manifest_job = dg.define_asset_job("eval_manifest_job", selection=[eval_manifest])
# task_samples lands a window's rows and shows them as sample_scores and trajectories (one step);
# comparison saves the document and shows the baselines it used (one step).
task_samples_job = dg.define_asset_job("task_samples_job", selection=[task_samples])
comparison_job = dg.define_asset_job("comparison_job", selection=[comparison, pr_report])

cohort_series_job = dg.define_asset_job("cohort_series_job", selection=[cohort_series])

candidate_measurements_job = dg.define_asset_job("candidate_measurements_job", selection=[candidate_measurements])
continuum_frontier_job = dg.define_asset_job("continuum_frontier_job", selection=[continuum_frontier])

# Runs that write one head's comparison document and check run wait for each other: the run
# coordinator (dagster.yaml, `tag_concurrency_limits`) allows one per value of this tag, so two
# overlapping runs cannot finish out of order and leave an older verdict on the PR.
REPORT_LOCK_TAG = "evalrunner/report-for"


def comparison_run_tags(comparison_key: str) -> dict[str, str]:
    return {"evalrunner/comparison": comparison_key, REPORT_LOCK_TAG: comparison_key}


JOBS = [
    eval_manifest_job,
    task_samples_job,
    comparison_job,
    cohort_series_job,
    candidate_measurements_job,
    continuum_frontier_job,
]
