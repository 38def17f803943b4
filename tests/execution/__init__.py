"""Tests of evalrunner_assets/execution (sandboxes, Inspect runs, repository environments, the Kubernetes backend)."""
