"""Tests of evalrunner_assets/cli (the `evalrunner` command)."""
