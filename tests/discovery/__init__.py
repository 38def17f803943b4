"""Tests of evalrunner_assets/discovery and the example repository."""
