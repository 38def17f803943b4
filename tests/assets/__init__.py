"""Tests of evalrunner_assets/assets and the code location (definitions, partitions)."""
