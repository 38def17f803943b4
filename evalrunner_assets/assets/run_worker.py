"""Every evalrunner asset names the process executing it in its run's tags, first thing.

The run-worker reaper (``sensors/run_workers.py``) reads them: on a local instance nothing else
notices a run worker that was killed, and only these tags say on which host it ran (Dagster's
"Started process for run" event gives the run worker's pid, not its host).
"""

import dagster as dg

from evalrunner_assets.pipeline.run_workers import worker_tags


def record_run_worker(context: dg.AssetExecutionContext) -> None:
    """Tag the run with this process's pid, host and start time (once per process)."""
    tags = worker_tags()
    if any(context.run.tags.get(k) != v for k, v in tags.items()):
        context.instance.add_run_tags(context.run_id, tags)
