"""Tests of evalrunner_assets/simagent."""
