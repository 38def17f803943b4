"""Terminating a Dagster run of ``task_samples`` while a window runs: every sandbox is killed and
the run process ends within 15 s, nothing is recorded as an infrastructure failure, the windows
that completed stay landed, and the run is not marked a success.

Dagster terminates a run by interrupting its process's main thread (SIGINT, through the run
worker's termination thread); the test sends that signal to a process executing the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from evalrunner_assets.example_repo import build_example_repo
from evalrunner_assets.pipeline.facts import learn_commit
from evalrunner_assets.pipeline.keys import commit_key
from evalrunner_assets.pipeline.spec import DEFAULT_MODEL, ComparisonRequest, open_comparison
from tests.helpers.compare_runs import bwraps_of
from tests.helpers.signals import default_sigint

pytestmark = pytest.mark.slow

REPO = "local/term"
TASK = "triage/escalation_policy"
WINDOWS = ["w000000-000016", "w000016-000032", "w000032-000064", "w000064-000128"]

_RUN = r"""
import sys
import dagster as dg
from evalrunner_assets.assets.evals import ASSETS, task_samples
from evalrunner_assets.driver.comparison import local_instance
from resources import default_resources
commit, task, comparison, windows = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
dg.materialize(
    ASSETS,
    selection=[task_samples],
    partition_key=dg.MultiPartitionKey({"commit": commit, "task": task}),
    instance=local_instance(),
    resources=default_resources(),
    run_config={"ops": {"task_samples": {"config": {"comparison": comparison, "windows": windows}}}},
    tags={"evalrunner/step": "samples:termination-test"},
)
"""


def test_terminating_a_task_samples_run_kills_its_sandbox_within_15s(tmp_path: Path, monkeypatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("EVALRUNNER_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    from evalrunner_assets.driver.comparison import local_instance
    from resources import default_resources

    example = build_example_repo(tmp_path / "repo", ["improve-runbook"])
    resources = default_resources()
    lake = resources["lake"].open()
    resources["repos"].register(lake, REPO, str(example.path))
    export = resources["repos"].export(lake, REPO, example.base_sha)
    learn_commit(lake, resources["sandbox"].backend(), export, model=DEFAULT_MODEL)
    request = open_comparison(
        lake,
        ComparisonRequest(
            repo=REPO,
            source=str(example.path),
            pr="1",
            base_sha=example.base_sha,
            head_sha=example.base_sha,
            base_ref="main",
            requested_at="2026-01-01T00:00:00+00:00",
        ),
    )
    ck = commit_key(REPO, example.base_sha)
    instance = local_instance()
    instance.add_dynamic_partitions("commits", [ck])
    instance.add_dynamic_partitions("tasks", [TASK])
    instance.add_dynamic_partitions("comparisons", [request.key])

    proc = subprocess.Popen(
        [sys.executable, "-c", _RUN, ck, TASK, request.key, ",".join(WINDOWS)],
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    batches = home / "lake" / "batches"
    deadline = time.monotonic() + 120
    while not (batches.exists() and any(batches.rglob("*.json")) and bwraps_of(home)):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "never reached a running window after one had landed"
        time.sleep(0.05)

    sent = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)  # what Dagster's run termination delivers to the run process
    _, err = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    assert took < 15, f"the run process took {took:.1f}s to end"
    assert proc.returncode != 0, err[-2000:]
    gone_by = time.monotonic() + 3
    while bwraps_of(home) and time.monotonic() < gone_by:
        time.sleep(0.1)
    assert not bwraps_of(home), "a sandbox outlived the terminated run"

    # Cancelled is not an infrastructure failure: nothing under failures/; what landed stays.
    assert not list((home / "lake").glob("failures/**/*.json"))
    landed = [json.loads(p.read_text()) for p in batches.rglob("*.json")]
    assert 1 <= len(landed) < len(WINDOWS)
    for rec in landed:
        assert rec["status"] == "ok" and (home / "lake" / rec["samples_path"]).exists()

    run = next(r for r in instance.get_runs() if r.tags.get("evalrunner/step") == "samples:termination-test")
    assert run.status in (dg.DagsterRunStatus.CANCELED, dg.DagsterRunStatus.FAILURE), run.status
    print(
        f"terminated after {len(landed)} landed window(s); run {run.status.value}; ended {took:.1f}s after the signal"
    )
