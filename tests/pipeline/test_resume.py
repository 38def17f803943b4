"""`kill -9` of the whole `evalrunner compare` process group at several points, then the same
command again: no sample lost or duplicated, finished windows not re-run, no half-written file
in the lake, and the same verdict as an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from evalrunner_assets.example_repo import build_example_repo
from tests.helpers.compare_runs import batch_records, comparison_doc, lake, run_compare, start_compare

pytestmark = pytest.mark.slow


def comparison_being_written(home: Path) -> bool:
    """The comparison document (``<head>.json``) or its temporary file exists."""
    return any(
        p.name.count(".") == 1 or (p.name.startswith(".") and ".json.tmp-" in p.name and p.name.count(".") == 3)
        for p in (lake(home) / "comparisons").rglob("*")
    )


def kill_group_when(proc: subprocess.Popen, ready: Callable[[], bool], timeout: float = 150) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, f"compare ended before the kill point: {proc.stderr.read()[-2000:]}"  # type: ignore[union-attr]
        assert time.monotonic() < deadline, "kill point never reached"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def check_lake(home: Path) -> None:
    import pyarrow.parquet as pq

    records = [r for r in batch_records(home) if r.get("status") == "ok"]
    digests = Counter(r["batch"] for r in records)
    assert all(n == 1 for n in digests.values()), digests
    keys = Counter((r["commit"], r["task"], r["window"]) for r in records)
    assert all(n == 1 for n in keys.values()), f"a window landed twice: {keys}"
    rows = sum(pq.read_metadata(lake(home) / r["samples_path"]).num_rows for r in records)
    assert rows == sum(r["sample_rows"] for r in records)
    files = list((lake(home) / "tables" / "samples").rglob("*.parquet"))
    assert len(files) == len(records), "a samples file without its batch record"
    leftovers = [p for p in lake(home).rglob("*") if ".tmp-" in p.name]
    assert not leftovers, leftovers


def test_kill_minus_nine_at_several_points_then_resume_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    build_example_repo(repo, ["improve-runbook"])

    clean = tmp_path / "clean" / "home"
    clean.mkdir(parents=True)
    done = run_compare(clean, repo)
    assert done.returncode == 0, done.stderr[-3000:]
    expected = comparison_doc(clean)

    home = tmp_path / "killed" / "home"
    home.mkdir(parents=True)
    # 1. during the manifests: the first commit learnt, the second not yet.
    proc = start_compare(home, repo)
    kill_group_when(proc, lambda: len(list((lake(home) / "raw").rglob("manifest.json"))) >= 1)
    # 2. after three windows landed (others mid-run in their sandboxes).
    proc = start_compare(home, repo)
    kill_group_when(proc, lambda: len(batch_records(home)) >= 3)
    landed_before = {r["batch"]: (r["eval_id"], r["log_sha256"]) for r in batch_records(home)}
    # 3. as soon as a comparison document is being written.
    proc = start_compare(home, repo)
    kill_group_when(proc, lambda: comparison_being_written(home))

    final = run_compare(home, repo)
    assert final.returncode == 0, final.stderr[-3000:]
    check_lake(home)
    after = {r["batch"]: (r["eval_id"], r["log_sha256"]) for r in batch_records(home)}
    assert all(after[b] == v for b, v in landed_before.items()), "a landed window was re-run"

    got = comparison_doc(home)
    assert got["verdict"] == expected["verdict"]
    assert got["samples_run"] == expected["samples_run"]
    assert {t: d["decision"]["label"] for t, d in got["tasks"].items()} == {
        t: d["decision"]["label"] for t, d in expected["tasks"].items()
    }
    assert {t: d["batches"] for t, d in got["tasks"].items()} == {t: d["batches"] for t, d in expected["tasks"].items()}
