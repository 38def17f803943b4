"""Benchmarks. Each prints a baseline and a candidate measured in the same run, and the ratio."""
