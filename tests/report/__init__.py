"""Tests of evalrunner_assets/report."""
