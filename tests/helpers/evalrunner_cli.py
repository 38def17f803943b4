"""The `evalrunner` console script as a user runs it: its path beside this interpreter, a timeout
for a loaded machine, and an environment with a home of its own and none of the caller's
``EVALRUNNER_*`` / ``DAGSTER_*`` settings."""

from __future__ import annotations

import os
import sys
from pathlib import Path

EVALRUNNER = str(Path(sys.executable).with_name("evalrunner"))
TIMEOUT = 240  # seconds; generous for a loaded 2-core machine, never reached when things work


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALRUNNER_", "DAGSTER_"))}
    env.update(EVALRUNNER_HOME=str(home), PYTHONUNBUFFERED="1", **extra)
    return env
