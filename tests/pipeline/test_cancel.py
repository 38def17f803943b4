"""Ctrl-C on `evalrunner compare`: every sandbox is killed and every worker joined within 15 s,
the cancellation is recorded as such, and the windows that completed stay landed."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from evalrunner_assets.example_repo import build_example_repo
from tests.helpers.compare_runs import batch_records, bwraps_of, lake, start_compare

pytestmark = pytest.mark.slow


def test_sigint_kills_every_sandbox_within_15s_and_records_the_cancellation(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    build_example_repo(repo, ["improve-runbook"])
    home = tmp_path / "home"
    home.mkdir()
    proc = start_compare(home, repo)
    deadline = time.monotonic() + 150
    while True:
        # Read what landed first, then look for a running sandbox, then send at once: between
        # windows a sandbox may briefly not exist, so a second look could race the scheduler.
        landed = {r["batch"] for r in batch_records(home)}
        if len(landed) >= 2 and bwraps_of(home):
            break  # a sandbox is running as Ctrl-C arrives
        assert proc.poll() is None, proc.stderr.read()[-2000:]  # type: ignore[union-attr]
        assert time.monotonic() < deadline, "never reached a point with windows landed and sandboxes running"
        time.sleep(0.05)

    sent = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    _, err = proc.communicate(timeout=30)
    took = time.monotonic() - sent
    assert took < 15, f"exit took {took:.1f}s; the comparison's stderr ends:\n{err[-3000:]}"
    assert proc.returncode == 130, err[-2000:]
    assert "cancelled" in err
    # A killed bwrap can take a moment to leave the process table on a loaded machine; one
    # still there seconds after the comparison exited was never killed.
    gone_by = time.monotonic() + 3
    while bwraps_of(home) and time.monotonic() < gone_by:
        time.sleep(0.05)
    assert bwraps_of(home) == [], "a sandbox outlived the cancelled comparison"

    saved = next((p for p in (lake(home) / "comparisons").rglob("*.json") if p.name.count(".") == 1), None)
    assert saved is not None, f"no comparison document was saved; the comparison's stderr ends:\n{err[-3000:]}"
    doc = json.loads(saved.read_text())
    assert doc["status"] == "cancelled"
    assert doc["execution"]["status"] == "cancelled"
    assert "breaker" not in doc
    execution = json.loads(next((lake(home) / "comparisons").rglob("*.execution.json")).read_text())
    assert execution["status"] == "cancelled"
    # Cancelled is not a failure: nothing was recorded as an infrastructure failure.
    assert not (lake(home) / "failures").exists() or not any((lake(home) / "failures").rglob("*.json"))
    assert landed <= {r["batch"] for r in batch_records(home)}, "a completed window was lost"
