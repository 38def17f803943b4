"""Where evalrunner keeps its state on this machine (``$EVALRUNNER_HOME``, default ./.evalrunner)."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    return Path(os.environ.get("EVALRUNNER_HOME") or ".evalrunner").resolve()


# The lake root's variable (its other settings: evalrunner_assets/lake_settings.py).
LAKE_ENV = "EVALRUNNER_LAKE"


def lake_root_setting() -> str | None:
    """The lake root ``$EVALRUNNER_LAKE`` names, or None when it is unset or empty."""
    return os.environ.get(LAKE_ENV, "").strip() or None


def lake_root() -> str:
    """``$EVALRUNNER_LAKE`` (a directory or gs://bucket/prefix), else ``<home>/lake``."""
    return lake_root_setting() or str(home() / "lake")


def dagster_home() -> Path:
    """The persistent Dagster instance the CLI and ``evalrunner serve`` share."""
    return Path(os.environ.get("DAGSTER_HOME") or home() / "dagster")


def repo_cache() -> Path:
    return home() / "repos"


def export_root() -> Path:
    return home() / "exports"


# Written into a new instance's dagster.yaml. The instance is evalrunner's own, created on the
# first command: Dagster's first-start telemetry notice would otherwise land in the middle of
# that command's output (and nothing leaves this machine anyway). An existing file is kept.
# `evalrunner serve` queues the sensors' runs: at most one per core runs at once (each run starts
# sandboxes of its own), and the runs that write one head's comparison and check run wait for
# each other (tag `evalrunner/report-for`, see jobs.REPORT_LOCK_TAG). A queued run starts within
# a second (Dagster's default looks every 5 s: a PR's time to verdict would pay it).
_NEW_DAGSTER_YAML = """\
# The Dagster instance evalrunner's command line records its runs in (SQLite storage here).
telemetry:
  enabled: false
run_coordinator:
  module: dagster
  class: QueuedRunCoordinator
  config:
    max_concurrent_runs: {max_runs}
    dequeue_interval_seconds: 1
    tag_concurrency_limits:
      - key: evalrunner/report-for
        value:
          applyLimitPerUniqueValue: true
        limit: 1
"""


# What earlier versions wrote: such a file is replaced by the current one (a file a person wrote is kept).
_EARLIER_DAGSTER_YAMLS = (
    "# The Dagster instance evalrunner's command line records its runs in (SQLite storage here).\n"
    "telemetry:\n  enabled: false\n",
    _NEW_DAGSTER_YAML.replace("    dequeue_interval_seconds: 1\n", ""),
)


def new_dagster_yaml() -> str:
    """The ``dagster.yaml`` a new local instance gets (run limits sized to this machine)."""
    return _NEW_DAGSTER_YAML.format(max_runs=max(1, os.cpu_count() or 1))


def ensure_writable(path: Path) -> None:
    """Raise the ``OSError`` (read-only file system, permission denied, no space) that writing
    in the directory ``path`` would meet, naming ``path``; create it if needed."""
    probe = path / f".write-probe.tmp-{os.getpid()}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.touch()
        probe.unlink()
    except OSError as exc:
        if exc.errno is None:
            raise
        raise OSError(exc.errno, os.strerror(exc.errno), str(path)) from exc


def ensure_dagster_home() -> Path:
    """The Dagster instance directory, with a ``dagster.yaml`` (created on first use)."""
    path = dagster_home()
    path.mkdir(parents=True, exist_ok=True)
    config = path / "dagster.yaml"
    earlier = {text.format(max_runs=max(1, os.cpu_count() or 1)) for text in _EARLIER_DAGSTER_YAMLS}
    if not config.exists() or config.read_text() in earlier:
        tmp = path / f".dagster.yaml.tmp-{os.getpid()}"
        tmp.write_text(new_dagster_yaml())
        os.replace(tmp, config)
    return path
