"""The adaptive loop through the real `sampling_sensor` of the code location, on a temporary
Dagster instance: each tick's RunRequests are launched the way the daemon launches them (a run
key that already has a run is skipped), until the sensor asks for nothing more.

Halfway through, the "daemon" restarts: the instance is reopened from its directory and a new
sensor context is built; the loop must continue from the lake's state, not start over.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from _pipeline_fixtures import ESCALATION, SUMMARY, PipelineHome, evalrunner_home, labels, request_for

from evalrunner_assets.definitions import defs
from evalrunner_assets.example_repo import ExampleRepo, build_example_repo
from evalrunner_assets.pipeline.assess import load_result
from evalrunner_assets.pipeline.keys import commit_key
from evalrunner_assets.pipeline.spec import open_comparison
from resources import RepoResource

pytestmark = pytest.mark.slow

SENSOR = "sampling_sensor"
RUN_KEY_TAG = "dagster/run_key"
SENSOR_TAG = "dagster/sensor_name"
MAX_TICKS = 40


def evaluate(instance: dg.DagsterInstance) -> list[dg.RunRequest]:
    """One tick of the code location's own sensor, with the resources the code location binds."""
    repository = defs.get_repository_def()
    sensor = repository.get_sensor_def(SENSOR)
    context = dg.build_sensor_context(
        instance=instance, repository_def=repository, sensor_name=SENSOR, resources=dict(defs.resources or {})
    )
    result = sensor(context)
    assert isinstance(result, dg.SensorResult)
    assert not result.skip_reason
    return list(result.run_requests or [])


def already_launched(instance: dg.DagsterInstance, run_key: str) -> bool:
    return bool(instance.get_runs(filters=dg.RunsFilter(tags={RUN_KEY_TAG: run_key, SENSOR_TAG: SENSOR})))


def launch(instance: dg.DagsterInstance, request: dg.RunRequest) -> dg.ExecuteInProcessResult:
    """What the daemon does with a RunRequest: a run of the named job for the partition, with
    the request's config and tags plus the run key."""
    job = defs.resolve_job_def(request.job_name)
    return job.execute_in_process(
        run_config=request.run_config or None,
        instance=instance,
        partition_key=request.partition_key,
        tags={**request.tags, RUN_KEY_TAG: request.run_key, SENSOR_TAG: SENSOR},
        raise_on_error=False,
    )


@dataclass
class Loop:
    """What happened while the sensor drove one comparison."""

    instance_dir: Path
    home: PipelineHome
    comparison: str
    ticks: list[list[str]] = field(default_factory=list)  # run keys requested per tick
    repeats: list[tuple[list[str], list[str]]] = field(default_factory=list)  # two evaluations, no new data
    launched: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    rerequested_done_work: list[str] = field(default_factory=list)
    restart_tick: int = -1
    ran_before_restart: list[str] = field(default_factory=list)
    before_restart: list[str] = field(default_factory=list)  # requested but not yet run at restart
    after_restart: list[str] = field(default_factory=list)  # first request after the restart
    result: dict[str, Any] | None = None
    final_requests: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> ExampleRepo:
    return build_example_repo(tmp_path_factory.mktemp("example") / "support-agent", ["regress-escalation"])


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory, example: ExampleRepo) -> Iterator[Loop]:
    root = tmp_path_factory.mktemp("sensor-home")
    with evalrunner_home(root) as home:
        # One task keeps the loop short: escalation_policy is the one the variant regresses.
        request = request_for(example, "regress-escalation", "7", max_tasks=1)
        lake = home.lake()
        RepoResource().register(lake, request.repo, request.source)
        open_comparison(lake, request)
        instance_dir = root / "dagster"
        state = Loop(instance_dir=instance_dir, home=home, comparison=request.key)
        instance = dg.DagsterInstance.local_temp(tempdir=str(instance_dir))
        try:
            instance.add_dynamic_partitions(
                "commits", [commit_key(request.repo, request.base_sha), commit_key(request.repo, request.head_sha)]
            )
            instance.add_dynamic_partitions("comparisons", [request.key])
            restarted = False
            for tick in range(MAX_TICKS):
                requests = evaluate(instance)
                keys = [r.run_key for r in requests]
                if not requests:
                    break
                state.ticks.append(keys)
                state.repeats.append((keys, [r.run_key for r in evaluate(instance)]))
                todo = []
                for r in requests:
                    if already_launched(instance, r.run_key):
                        state.rerequested_done_work.append(r.run_key)
                    else:
                        todo.append(r)
                if not restarted and any(r.job_name == "task_samples_job" for r in todo) and len(todo) > 1:
                    # Run one of this tick's windows, then restart: the other is still owed.
                    result = launch(instance, todo[0])
                    state.launched.append(todo[0].run_key)
                    if not result.success:
                        state.failed.append(todo[0].run_key)
                    state.ran_before_restart = list(state.launched)
                    state.before_restart = [r.run_key for r in todo[1:]]
                    state.restart_tick = tick
                    instance.dispose()
                    instance = dg.DagsterInstance.local_temp(tempdir=str(instance_dir))
                    state.after_restart = [r.run_key for r in evaluate(instance)]
                    restarted = True
                    continue
                for r in todo:
                    result = launch(instance, r)
                    state.launched.append(r.run_key)
                    if not result.success:
                        state.failed.append(r.run_key)
            state.final_requests = [r.run_key for r in evaluate(instance)]
            state.result = load_result(lake, request.repo, request.pr, request.head_sha)
            yield state
        finally:
            instance.dispose()
            from evalrunner_assets.execution.warm_pool import PROCESS_POOL

            PROCESS_POOL.close_all()


def test_sensor_drives_the_comparison_to_its_verdict(loop: Loop) -> None:
    assert loop.failed == []
    assert loop.final_requests == [], "the sensor still asks for runs after the verdict"
    r = loop.result
    assert r is not None and r.status == "complete"
    assert r.verdict == "REGRESSED"
    assert labels(r) == {ESCALATION: "regressed"}
    assert r.tasks[ESCALATION].head.samples == r.tasks[ESCALATION].base.samples > 0


def test_sensor_requests_manifests_then_windows_of_both_arms_then_the_comparison(
    loop: Loop, example: ExampleRepo
) -> None:
    first = loop.ticks[0]
    assert sorted(first) == sorted(
        f"manifest:example/support-agent@{sha}" for sha in (example.base_sha, example.sha("regress-escalation"))
    )
    samples = [k for k in loop.launched if k.startswith("samples:")]
    assert samples and all(ESCALATION in k for k in samples)
    assert not any(SUMMARY in k for k in loop.launched)
    for sha in (example.base_sha, example.sha("regress-escalation")):
        assert any(f"@{sha}:" in k for k in samples), sha
    # Last, the comparison and the report (materialized from the lake's state when they run).
    assert loop.launched[-1].startswith(f"compare:{loop.comparison}:")


def test_run_keys_are_stable_across_evaluations_without_new_data(loop: Loop) -> None:
    assert loop.repeats
    for first, second in loop.repeats:
        assert first == second


def test_sensor_never_requests_work_that_already_ran(loop: Loop) -> None:
    assert loop.rerequested_done_work == []
    assert len(loop.launched) == len(set(loop.launched))


def test_restarted_sensor_continues_where_it_left_off(loop: Loop) -> None:
    assert loop.restart_tick >= 0, "the loop never had two windows in flight to restart between"
    assert loop.before_restart, "something was still owed at the restart"
    # The restarted sensor asks again for what was owed (same run keys), for nothing that ran.
    assert set(loop.before_restart) <= set(loop.after_restart)
    assert not set(loop.ran_before_restart) & set(loop.after_restart)
    assert loop.ticks[0][0].startswith("manifest:")
    assert not any(k.startswith("manifest:") for k in loop.after_restart)


def test_sensor_runs_are_recorded_with_their_partitions(loop: Loop) -> None:
    with dg.DagsterInstance.local_temp(tempdir=str(loop.instance_dir)) as instance:
        runs = instance.get_runs(filters=dg.RunsFilter(tags={SENSOR_TAG: SENSOR}))
        assert {r.tags[RUN_KEY_TAG] for r in runs} == set(loop.launched)
        assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
        event = instance.get_latest_materialization_event(dg.AssetKey("pr_report"))
        assert event is not None and event.dagster_event.partition == loop.comparison  # type: ignore[union-attr]
        check_run = event.asset_materialization.metadata["check_run"].value  # type: ignore[union-attr]
        assert (check_run["status"], check_run["conclusion"]) == ("completed", "failure")
