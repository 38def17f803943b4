"""Tests of evalrunner_assets/driver (run workers, their reaper, termination, runless recording)."""
