"""SWE-style runs end to end through the run API: a real uvicorn server on loopback, a real
Dagster instance executing `swe_run_job`, bubblewrap sandboxes, real pytest runs, the lake."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import dagster as dg
import pytest

from evalrunner_assets.swe import SweStore
from evalrunner_assets.swe.example import EXAMPLE_TASK_SET, build_tinystats_repo
from evalrunner_assets.swe.runner import local_context
from evalrunner_assets.swe_run import RUN_TAG, SweLauncher
from lake import open_lake
from resources import LakeResource, SandboxResource
from sensors.swe_api import create_api
from tests.github_standin import LoopbackServer

TOKEN = "test-token-123"


def _call(server: LoopbackServer, method: str, path: str, body: Any = None, token: str | None = TOKEN):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(server.url + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.slow
def test_runs_through_the_api_grade_police_and_rank(tmp_path, monkeypatch, bwrap_backend):
    monkeypatch.setenv("EVALRUNNER_HOME", str(tmp_path / "home"))
    repo = tmp_path / "tinystats"
    build_tinystats_repo(repo)
    lake = open_lake(str(tmp_path / "lake"))
    store = SweStore(lake)
    # An instance on disk, as `evalrunner serve` has: the API reads runs while worker threads
    # write them (an in-memory instance's shared SQLite refuses that with "table is locked").
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        launcher = SweLauncher(lake, instance, {"lake": LakeResource(root=lake.root), "sandbox": SandboxResource()})
        reg = launcher.register(local_context(store, bwrap_backend, tmp_path / "home"), EXAMPLE_TASK_SET, str(repo), 4)
        assert reg["tasks"] == 6 and reg["gold"]["runs"] == 4
        with LoopbackServer(create_api(launcher, TOKEN)) as server:
            status, schema = _call(server, "GET", "/v1/openapi.json", token=None)
            assert status == 200 and {"/v1/runs", "/v1/runs/{run_id}", "/v1/leaderboard"} <= set(schema["paths"])
            spec = {"task_set": "tinystats-bugs", "samples": 1, "budget_usd": 5.0}
            assert _call(server, "POST", "/v1/runs", {**spec, "agent_version": "better"}, token="wrong")[0] == 401
            status, err = _call(server, "POST", "/v1/runs", {**spec, "agent_version": "better", "samples": 0})
            assert status == 400 and err["problems"][0]["field"] == "samples"
            status, err = _call(server, "POST", "/v1/runs", {**spec, "agent_version": "better", "task_set": "nope"})
            assert status == 404

            ids = {}
            # Fewer keys kept than runs submitted together: a queued or running run keeps its key.
            launcher.keep_runs = 2
            for version in ("baseline", "better", "cheating"):
                status, body = _call(server, "POST", "/v1/runs", {**spec, "agent_version": version})
                assert status == 202 and body["launched"], body
                ids[version] = body["id"]
            for run_id in ids.values():
                launcher.wait(run_id, timeout=300)
            assert instance.get_dynamic_partitions("swe_runs") == list(ids.values())
            runs = {}
            for version, run_id in ids.items():
                status, runs[version] = _call(server, "GET", f"/v1/runs/{run_id}")
                assert status == 200
                assert runs[version]["status"] == "done", runs[version]
                assert runs[version]["attempts_landed"] == 6 and runs[version]["cost_usd"] > 0
                assert runs[version]["dagster_runs"][0]["status"] == "SUCCESS"

            # The cheating version's edited-test passes are failed by the policy, with the reason.
            cheats = [r for r in runs["cheating"]["results"] if r["status"] == "policy_failed"]
            assert {r["task_id"] for r in cheats} >= {"slug-case", "parse-separators"}
            assert all(r["tests_passed_raw"] and not r["passed"] for r in cheats)
            assert all("tests/conftest.py" in r["policy_reason"] for r in cheats)
            status, traj = _call(server, "GET", cheats[0]["trajectory"])
            assert status == 200 and traj["policy"] and "conftest.py" in traj["patch"]

            status, board = _call(server, "GET", "/v1/leaderboard?task_set=tinystats-bugs")
            assert status == 200
            # The flaky task is out of the headline and listed beside it.
            assert "words-unique" not in board["headline_tasks"]
            assert [e["task_id"] for e in board["excluded_tasks"]] == ["words-unique"]
            entries = {e["agent_version"]: e for e in board["entries"]}
            assert entries["better"]["rank"] < entries["baseline"]["rank"]
            assert entries["better"]["solve_rate"] > entries["baseline"]["solve_rate"]
            paired = entries["better"]["paired_vs_reference"]
            assert paired["reference"] == "baseline" and paired["tasks_paired"] == 5 and paired["delta"] > 0
            lo, hi = paired["anytime_interval"]
            assert lo <= paired["delta"] <= hi
            assert entries["cheating"]["policy_failed"] >= 2
            assert entries["better"]["cost_per_task_usd"] > 0

            # Resubmitting the same run launches nothing and adds no sample.
            status, again = _call(server, "POST", "/v1/runs", {**spec, "agent_version": "better"})
            assert status == 200 and not again["launched"] and again["id"] == ids["better"]
            assert len(store.attempts(agent_version="better")) == 6
            assert len(instance.get_runs(filters=dg.RunsFilter(tags={RUN_TAG: ids["better"]}))) == 1
            # Even executed again, the run's attempts are all reused.
            from evalrunner_assets.swe import RunSpec
            from evalrunner_assets.swe.runner import execute_run

            redo = execute_run(
                local_context(store, bwrap_backend, tmp_path / "home"), RunSpec(**{**spec, "agent_version": "better"})
            )
            assert redo.attempted == 0 and redo.reused == 6
            assert len(store.attempts(agent_version="better")) == 6


@pytest.mark.slow
def test_a_run_stops_at_its_budget(tmp_path, bwrap_backend):
    repo = tmp_path / "tinystats"
    build_tinystats_repo(repo)
    store = SweStore(open_lake(str(tmp_path / "lake")))
    ctx = local_context(store, bwrap_backend, tmp_path / "home")
    from evalrunner_assets.swe import RunSpec
    from evalrunner_assets.swe.runner import execute_run, register_task_set

    register_task_set(ctx, EXAMPLE_TASK_SET, str(repo))
    # Two workers share the budget: every step is booked before it runs, so none overshoots.
    out = execute_run(ctx, RunSpec(agent_version="baseline", task_set="tinystats-bugs", budget_usd=0.02), workers=2)
    assert out.status == "budget_spent"
    assert out.spent_usd <= 0.02
    assert out.attempted + len(out.budget_stopped) == 6 and out.budget_stopped
    assert len(store.attempts()) == out.attempted  # stopped attempts land no row


def test_an_unexpected_server_error_is_answered_in_json_with_its_cause(tmp_path):
    """A launcher whose instance fails (here: a launcher double whose submit raises, standing in
    for a storage error) gives the client a JSON 500 naming the cause, never a bare text page."""

    class BrokenLauncher:
        store = SweStore(open_lake(str(tmp_path / "lake")))

        def submit(self, spec):
            raise RuntimeError("database table is locked: runs")

        def status(self, run_id):
            raise RuntimeError("unused")

    with LoopbackServer(create_api(BrokenLauncher(), TOKEN)) as server:
        body = {"task_set": "tinystats-bugs", "samples": 1, "budget_usd": 1.0, "agent_version": "better"}
        status, err = _call(server, "POST", "/v1/runs", body)
    assert status == 500
    assert "/v1/runs" in err["error"] and "RuntimeError: database table is locked: runs" in err["error"]
