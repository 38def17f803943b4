"""The normal PR pipeline driven as the Dagster daemons drive it, for end-to-end tests: signed
GitHub deliveries built from GitHub's own payload examples (``shared/fixtures/github-webhooks``)
posted to the webhook receiver, the real ``pr_sensor`` and ``sampling_sensor`` evaluated on a
Dagster instance, and every run they request executed with ``dg.materialize`` (skipping run
keys a sensor already used, as the sensor daemon does)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from evalrunner_assets.assets.evals import ASSETS
from evalrunner_assets.jobs import JOBS
from lake.storage import Lake
from sensors.pr import pr_sensor
from sensors.sampling import sampling_sensor
from tests.helpers.github_standin import LoopbackServer
from tests.helpers.shared_files import shared_path
from tests.helpers.webhook_delivery import post_delivery, retarget

FIXTURES = shared_path("fixtures/github-webhooks")
JOBS_BY_NAME = {job.name: job for job in JOBS}
MAX_SAMPLING_TICKS = 40


# -- deliveries built from GitHub's own payload examples -----------------------------------------
def fixture_text(name: str) -> str:
    return (FIXTURES / f"{name}.json").read_text()


def pull_request_delivery(
    action: str, *, repo: str, number: int, head: str, base: str, head_ref: str
) -> dict[str, Any]:
    """GitHub's ``pull_request.<action>`` example, for PR ``number`` of ``repo`` at these SHAs."""
    raw = fixture_text(f"pull_request.{action}")
    old = json.loads(raw)
    raw = raw.replace(old["pull_request"]["head"]["sha"], head).replace(old["pull_request"]["base"]["sha"], base)
    payload = retarget(json.loads(raw), repo)
    payload["number"] = number
    pr = payload["pull_request"]
    pr["number"] = number
    pr["head"]["ref"], pr["base"]["ref"] = head_ref, "main"
    assert (pr["head"]["sha"], pr["base"]["sha"]) == (head, base)
    return payload


def deliver(
    server: LoopbackServer, secret: bytes, event: str, payload: dict[str, Any] | bytes, delivery: str
) -> tuple[int, dict]:
    """POST a delivery signed as GitHub signs it; returns (status, answer)."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return post_delivery(server.port, secret, event, body, delivery, user_agent="GitHub-Hookshot/e2e", timeout=30)


# -- the sensors, evaluated and their runs executed ------------------------------------------------
@dataclass
class RunOutcome:
    sensor: str
    run_key: str
    job: str
    partition: str
    success: bool
    seconds: float
    errors: list[str]
    windows: tuple[str, ...] = ()
    # (asset, partition, metadata) of every materialization the run reported
    materialized: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)


@dataclass
class Harness:
    """A temporary Dagster instance plus what a sensor daemon keeps between ticks."""

    instance: dg.DagsterInstance
    resources: dict[str, Any]
    lake: Lake
    pr_cursor: str | None = None
    used_run_keys: dict[str, set[str]] = field(default_factory=dict)
    outcomes: list[RunOutcome] = field(default_factory=list)

    def _apply(self, name: str, result: dg.SensorResult) -> list[dg.RunRequest]:
        for req in result.dynamic_partitions_requests or []:
            assert isinstance(req, dg.AddDynamicPartitionsRequest), req
            self.instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
        used = self.used_run_keys.setdefault(name, set())
        fresh = []
        for req in result.run_requests or []:
            if req.run_key is not None and req.run_key in used:
                continue  # the daemon skips a run key this sensor already used
            if req.run_key is not None:
                used.add(req.run_key)
            fresh.append(req)
        return fresh

    def _execute(self, sensor: str, req: dg.RunRequest) -> RunOutcome:
        job = JOBS_BY_NAME[req.job_name]
        run_config = req.run_config if req.run_config else None
        started = time.monotonic()
        result = dg.materialize(
            ASSETS,
            selection=job.selection,
            partition_key=req.partition_key,
            run_config=run_config,
            instance=self.instance,
            resources=self.resources,
            tags={**(req.tags or {}), "dagster/sensor_name": sensor, "dagster/run_key": req.run_key or ""},
            raise_on_error=False,
        )
        errors = [
            str(e.event_specific_data.error.message).strip()  # type: ignore[union-attr]
            for e in result.all_events
            if e.is_step_failure and e.event_specific_data is not None
        ]
        windows = (run_config or {}).get("ops", {}).get("task_samples", {}).get("config", {}).get("windows", ())
        outcome = RunOutcome(
            sensor,
            req.run_key or "",
            req.job_name or "",
            str(req.partition_key),
            result.success,
            time.monotonic() - started,
            errors,
            tuple(windows),
            [
                (
                    m.asset_key.to_user_string(),
                    str(m.partition),
                    {k: v.value for k, v in m.metadata.items()},
                )
                for m in (
                    e.step_materialization_data.materialization for e in result.get_asset_materialization_events()
                )
            ],
        )
        self.outcomes.append(outcome)
        return outcome

    def tick_pr_sensor(self) -> tuple[list[dg.RunRequest], list[RunOutcome]]:
        context = dg.build_sensor_context(instance=self.instance, cursor=self.pr_cursor, resources=self.resources)
        result = pr_sensor(context)
        assert isinstance(result, dg.SensorResult)
        self.pr_cursor = result.cursor
        fresh = self._apply("pr_sensor", result)
        return fresh, [self._execute("pr_sensor", r) for r in fresh]

    def evaluate_sampling_sensor(self) -> dg.SensorResult:
        context = dg.build_sensor_context(instance=self.instance, resources=self.resources)
        result = sampling_sensor(context)
        assert isinstance(result, dg.SensorResult)
        return result

    def drive_sampling_sensor(self) -> list[RunOutcome]:
        """Tick the sampling sensor, running what it asks for, until it asks for nothing new."""
        done: list[RunOutcome] = []
        for _ in range(MAX_SAMPLING_TICKS):
            fresh = self._apply("sampling_sensor", self.evaluate_sampling_sensor())
            if not fresh:
                return done
            done += [self._execute("sampling_sensor", r) for r in fresh]
        raise AssertionError(f"sampling sensor still requesting runs after {MAX_SAMPLING_TICKS} ticks")
