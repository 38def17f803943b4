"""Tests of evalrunner_assets/wild."""
