"""Tests of sensors/."""
