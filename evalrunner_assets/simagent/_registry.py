"""Entry point for Inspect (`[project.entry-points.inspect_ai]`): importing registers providers."""
