"""Tests of resources/."""
