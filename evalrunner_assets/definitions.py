"""The Dagster code location: assets, checks, sensors, resources and jobs."""

import dagster as dg

defs = dg.Definitions(assets=[])
