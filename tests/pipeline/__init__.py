"""Tests of evalrunner_assets/pipeline (the engine, its loop, leases, queue, gate, series, candidates, fine-tuning)."""
