"""Tests of deploy/ (the Kubernetes manifests, Helm values and Dagster instance settings)."""
