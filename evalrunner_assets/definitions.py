"""The Dagster code location: assets, checks, sensors, resources and jobs."""

import dagster as dg

from evalrunner_assets.assets.evals import ASSETS
from evalrunner_assets.assets.series import SERIES_ASSETS
from evalrunner_assets.jobs import JOBS
from resources import GitHubResource, LakeResource, RepoResource, SandboxResource
from sensors.pr import pr_sensor
from sensors.sampling import sampling_sensor

defs = dg.Definitions(
    assets=[*ASSETS, *SERIES_ASSETS],
    jobs=JOBS,
    sensors=[pr_sensor, sampling_sensor],
    resources={
        "lake": LakeResource(),
        "sandbox": SandboxResource.from_env(),  # deploy/k8s sets EVALRUNNER_SANDBOX_* in the pods
        "repos": RepoResource(),
        "github": GitHubResource(),
    },
)
