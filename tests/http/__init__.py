"""Tests of evalrunner_assets/http (the webhook receiver and the web pages)."""
