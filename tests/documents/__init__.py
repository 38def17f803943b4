"""Tests of evalrunner_assets/documents."""
