"""Tests of lake/."""
