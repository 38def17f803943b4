"""Tests of evalrunner_assets/swe."""
