"""Thin Dagster assets over the plain-Python domain."""
