"""The Dagster code location: assets, checks, sensors, resources and jobs."""

import warnings

import dagster as dg

# Dagster labels some APIs this location uses as beta/preview (backfill policies, a partition
# mapping); the notice is for the people who maintain it, not for every log of every Dagster
# process that loads it (code server, daemon, run workers). Set before the assets are imported.
warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)

from evalrunner_assets.assets.candidates import CANDIDATE_ASSETS
from evalrunner_assets.assets.evals import ASSETS
from evalrunner_assets.assets.inbox import GITHUB_INBOX
from evalrunner_assets.assets.mining import MINING_ASSETS
from evalrunner_assets.assets.series import SERIES_ASSETS, SERIES_CHECKS
from evalrunner_assets.assets.swe import SWE_ASSETS
from evalrunner_assets.jobs import JOBS
from resources import SandboxResource, default_resources
from sensors.miner import miner_sensor
from sensors.pr import pr_sensor
from sensors.run_workers import run_worker_reaper
from sensors.sampling import sampling_sensor
from sensors.swe import swe_gold_schedule, swe_run_sensor

defs = dg.Definitions(
    assets=[*ASSETS, *SERIES_ASSETS, *CANDIDATE_ASSETS, *SWE_ASSETS, *MINING_ASSETS, GITHUB_INBOX],
    asset_checks=SERIES_CHECKS,
    jobs=JOBS,
    sensors=[pr_sensor, sampling_sensor, swe_run_sensor, run_worker_reaper, miner_sensor],
    schedules=[swe_gold_schedule],
    # deploy/k8s sets EVALRUNNER_SANDBOX_* in the pods
    resources=default_resources(sandbox=SandboxResource.from_env()),
)
