"""Thin Dagster assets over the plain-Python domain."""

# This code location ships the example model (``simagent/*``): importing it registers its price
# with the pipeline's default price table, wherever assets load (code server, run workers, the
# CLI's in-process runs). The pipeline itself never imports the example.
import evalrunner_assets.simagent  # noqa: F401
