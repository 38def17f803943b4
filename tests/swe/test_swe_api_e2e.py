"""The SWE run API's contract: a real uvicorn server on loopback over a real Dagster instance and
lake; runs queued for the daemon's sensor; a run's budget. Runs executed by the daemon of a real
`evalrunner serve`, graded and ranked: tests/swe/test_swe_served_e2e.py."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import dagster as dg
import pytest

from evalrunner_assets.driver.swe import RUN_TAG, SweLauncher
from evalrunner_assets.http.swe_api import create_api
from evalrunner_assets.partitions import add_partitions
from evalrunner_assets.swe import SweStore
from evalrunner_assets.swe.example import EXAMPLE_TASK_SET, build_tinystats_repo
from evalrunner_assets.swe.runner import local_context, register_task_set
from lake import open_lake
from resources import LakeResource
from sensors.swe import RUN_KEY_TAG, queued_run_requests, swe_run_sensor
from tests.helpers.github_standin import LoopbackServer

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


def _as_the_daemon_launches(instance: dg.DagsterInstance, request: dg.RunRequest) -> dg.DagsterRun:
    """The Dagster run the daemon makes of a sensor's run request (with the tags it adds), before
    its coordinator queues it; nothing executes here: tests/swe/test_swe_served_e2e.py runs the
    real daemon."""
    from evalrunner_assets.definitions import defs

    assert request.partition_key is not None and request.run_key is not None
    return instance.create_run_for_job(
        job_def=defs.resolve_job_def(request.job_name or ""),
        run_config=request.run_config,
        status=dg.DagsterRunStatus.NOT_STARTED,
        tags={
            **request.tags,
            "dagster/partition": request.partition_key,
            RUN_KEY_TAG: request.run_key,
            "dagster/sensor_name": swe_run_sensor.name,
        },
    )


def test_the_api_queues_runs_for_the_sensor_idempotently(tmp_path, bwrap_backend):
    """The API contract on a real instance and lake: a POST records the run and queues it (the
    daemon's sensor launches it, never the API); resubmitting launches nothing while a launch
    waits, is queued or ran, and once more after a cancelled run, under a new run key."""
    repo = tmp_path / "tinystats"
    build_tinystats_repo(repo)
    lake = open_lake(str(tmp_path / "lake"))
    store = SweStore(lake)
    register_task_set(local_context(store, bwrap_backend, tmp_path / "home"), EXAMPLE_TASK_SET, str(repo))
    (tmp_path / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        launcher = SweLauncher(lake, instance)
        with LoopbackServer(create_api(launcher, TOKEN)) as server:
            status, schema = _call(server, "GET", "/v1/openapi.json", token=None)
            assert status == 200 and {"/v1/runs", "/v1/runs/{run_id}", "/v1/leaderboard"} <= set(schema["paths"])
            spec = {"task_set": "tinystats-bugs", "samples": 1, "budget_usd": 5.0}
            assert _call(server, "POST", "/v1/runs", {**spec, "agent_version": "better"}, token="wrong")[0] == 401
            status, err = _call(server, "POST", "/v1/runs", {**spec, "agent_version": "better", "samples": 0})
            assert status == 400 and err["problems"][0]["field"] == "samples"
            status, err = _call(server, "POST", "/v1/runs", {**spec, "agent_version": "better", "task_set": "nope"})
            assert status == 404
            status, err = _call(server, "POST", "/v1/runs", {**spec, "agent_version": "no-such-agent"})
            assert status == 400 and "no-such-agent" in err["error"]

            # Two older runs hold swe_runs keys; one of them has its run still waiting to start.
            add_partitions(instance, "swe_runs", ["r-older-done", "r-older-queued"])
            instance.create_run_for_job(
                job_def=launcher._job("swe_run_job"),
                status=dg.DagsterRunStatus.NOT_STARTED,
                tags={RUN_TAG: "r-older-queued"},
            )
            ids = {}
            for version in ("baseline", "better", "cheating"):
                status, body = _call(server, "POST", "/v1/runs", {**spec, "agent_version": version})
                assert status == 202 and body["launched"] and body["status"] == "queued", body
                ids[version] = body["id"]
                assert store.run(body["id"])["spec"]["agent_version"] == version
            # Nothing ran and nothing was launched: the runs wait in the lake for the sensor.
            assert all(not instance.get_runs(filters=dg.RunsFilter(tags={RUN_TAG: i})) for i in ids.values())
            assert sorted(r["id"] for r in store.queued_runs()) == sorted(ids.values())
            status, view = _call(server, "GET", f"/v1/runs/{ids['better']}")
            assert status == 200 and view["status"] == "queued" and view["dagster_runs"] == []
            assert view["attempts_expected"] == 6 and view["attempts_landed"] == 0
            status, again = _call(server, "POST", "/v1/runs", {**spec, "agent_version": "better"})
            assert status == 200 and not again["launched"] and again["status"] == "queued"

            # The sensor asks for one run per waiting request, keyed by run id. Fewer keys are
            # kept than runs wait: the waiting ones and the queued older run keep theirs.
            requests = queued_run_requests(instance, store, keep=2)
            assert sorted((r.run_key, r.partition_key) for r in requests) == sorted((i, i) for i in ids.values())
            assert all(r.job_name == "swe_run_job" and r.tags == {RUN_TAG: r.partition_key} for r in requests)
            kept = instance.get_dynamic_partitions("swe_runs")
            assert kept[0] == "r-older-queued" and sorted(kept[1:]) == sorted(ids.values())
            runs = {r.partition_key: _as_the_daemon_launches(instance, r) for r in requests}
            # The next tick finds the runs and clears the requests (through the sensor itself).
            tick = swe_run_sensor(
                dg.build_sensor_context(instance=instance, resources={"lake": LakeResource(root=lake.root)})
            )
            assert tick.run_requests == [] and store.queued_runs() == []
            status, again = _call(server, "POST", "/v1/runs", {**spec, "agent_version": "better"})
            assert status == 200 and not again["launched"] and again["status"] == "queued"

            # Cancelled (from the UI, say): the run reads failed, and a resubmission launches it
            # once more under a new run key; the same resubmission again launches nothing.
            instance.report_run_canceled(runs[ids["better"]])
            assert _call(server, "GET", f"/v1/runs/{ids['better']}")[1]["status"] == "failed"
            status, again = _call(server, "POST", "/v1/runs", {**spec, "agent_version": "better"})
            assert status == 202 and again["launched"] and again["status"] == "queued"
            assert _call(server, "POST", "/v1/runs", {**spec, "agent_version": "better"})[0] == 200
            (relaunch,) = queued_run_requests(instance, store)
            assert relaunch.run_key == f"{ids['better']}:launch-1" and relaunch.partition_key == ids["better"]
            _as_the_daemon_launches(instance, relaunch)
            assert queued_run_requests(instance, store) == [] and store.queued_runs() == []
            status, view = _call(server, "GET", f"/v1/runs/{ids['better']}")
            assert view["status"] == "queued"
            assert [(r["status"], r["run_key"]) for r in view["dagster_runs"]] == [
                ("NOT_STARTED", f"{ids['better']}:launch-1"),
                ("CANCELED", ids["better"]),
            ]


@pytest.mark.slow
def test_a_run_stops_at_its_budget(tmp_path, bwrap_backend):
    repo = tmp_path / "tinystats"
    build_tinystats_repo(repo)
    store = SweStore(open_lake(str(tmp_path / "lake")))
    ctx = local_context(store, bwrap_backend, tmp_path / "home")
    from evalrunner_assets.swe import RunSpec
    from evalrunner_assets.swe.runner import execute_run

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


def test_a_receiver_whose_api_has_no_token_starts_without_reaching_the_instance(tmp_path, monkeypatch):
    """The cluster's receiver (deploy/k8s/50-webhook.yaml) runs `evalrunner serve --webhook-only`
    with the image's dagster.yaml (Postgres) but not its password and no API token: the API's
    instance is opened at the first authorized request, so the receiver starts and the API
    answers 503 instead of the process failing on the storage's configuration."""
    from pathlib import Path

    from starlette.applications import Starlette

    from evalrunner_assets.driver.swe import api_routes

    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    (dagster_home / "dagster.yaml").write_text((Path(__file__).parents[2] / "deploy/dagster.yaml").read_text())
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    for name in ("DAGSTER_PG_HOST", "DAGSTER_PG_USER", "DAGSTER_PG_DB"):
        monkeypatch.setenv(name, "unused")
    for name in ("DAGSTER_PG_PASSWORD", "EVALRUNNER_API_TOKEN", "EVALRUNNER_API_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(dg.DagsterInvalidConfigError, match="DAGSTER_PG_PASSWORD"):
        dg.DagsterInstance.get()  # what opening it at start would have done
    with LoopbackServer(Starlette(routes=api_routes(open_lake(str(tmp_path / "lake"))))) as server:
        body = {"task_set": "tinystats-bugs", "samples": 1, "budget_usd": 1.0, "agent_version": "better"}
        status, err = _call(server, "POST", "/v1/runs", body)
    assert status == 503 and "EVALRUNNER_API_TOKEN" in err["error"]
