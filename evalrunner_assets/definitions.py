"""The Dagster code location: assets, checks, sensors, resources and jobs."""

import dagster as dg

from evalrunner_assets.assets.evals import ASSETS
from evalrunner_assets.assets.inbox import GITHUB_INBOX
from evalrunner_assets.jobs import JOBS
from resources import GitHubResource, LakeResource, RepoResource, SandboxResource
from sensors.pr import pr_sensor
from sensors.sampling import sampling_sensor

defs = dg.Definitions(
    assets=[*ASSETS, GITHUB_INBOX],
    jobs=JOBS,
    sensors=[pr_sensor, sampling_sensor],
    resources={
        "lake": LakeResource(),
        "sandbox": SandboxResource(),
        "repos": RepoResource(),
        "github": GitHubResource(),
    },
)
