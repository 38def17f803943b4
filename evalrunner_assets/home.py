"""Where evalrunner keeps its state on this machine (``$EVALRUNNER_HOME``, default ./.evalrunner)."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    return Path(os.environ.get("EVALRUNNER_HOME") or ".evalrunner").resolve()


def lake_root() -> str:
    """``$EVALRUNNER_LAKE`` (a directory or gs://bucket/prefix), else ``<home>/lake``."""
    return os.environ.get("EVALRUNNER_LAKE") or str(home() / "lake")


def dagster_home() -> Path:
    """The persistent Dagster instance the CLI and ``evalrunner serve`` share."""
    return Path(os.environ.get("DAGSTER_HOME") or home() / "dagster")


def repo_cache() -> Path:
    return home() / "repos"


def export_root() -> Path:
    return home() / "exports"
