"""Sandboxed execution: repositories at exact commits, sandbox backends, Inspect runs."""
