"""Tests of evalrunner_assets/github (the PR pipeline from GitHub's deliveries)."""
