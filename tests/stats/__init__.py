"""Tests of evalrunner_assets/stats."""
