"""Tests of evalrunner_assets/mining."""
