"""Tests of evalrunner_assets/gateway (the model gateway and its outage breaker)."""
