"""The adaptive loop through the real `sampling_sensor` of the code location, on a temporary
Dagster instance: its RunRequests are launched the way the daemon launches them (a run key that
already has a run is skipped), until the sensor asks for nothing more.

A comparison moves on in one run of ``comparison_job`` (the engine runs every ready window in
it). Part of the work lands first as an earlier run that died would have left it; then the
"daemon" restarts (the instance is reopened from its directory, a new sensor context built) and
the loop must continue from the lake's state, not start over.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from evalrunner_assets.definitions import defs
from evalrunner_assets.example_repo import ExampleRepo, build_example_repo
from evalrunner_assets.jobs import REPORT_LOCK_TAG, comparison_run_tags
from evalrunner_assets.pipeline import assess as assess_mod
from evalrunner_assets.pipeline.assess import load_result
from evalrunner_assets.pipeline.keys import commit_key
from evalrunner_assets.pipeline.spec import open_comparison
from lake import LAYOUT
from resources import RepoResource
from sensors.sampling import FROM_STATE_TAG, MAX_ATTEMPTS
from tests.helpers.pipeline_fixtures import ESCALATION, SUMMARY, PipelineHome, evalrunner_home, labels, request_for

pytestmark = pytest.mark.slow

SENSOR = "sampling_sensor"
RUN_KEY_TAG = "dagster/run_key"
SENSOR_TAG = "dagster/sensor_name"


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
    first: list[dg.RunRequest] = field(default_factory=list)
    first_again: list[str] = field(default_factory=list)  # a second evaluation, no new data
    while_queued: list[str] = field(default_factory=list)
    after_failures: list[list[str]] = field(default_factory=list)  # after 1, 2, … failed runs
    landed_before_restart: list[str] = field(default_factory=list)  # batch digests
    after_restart: list[dg.RunRequest] = field(default_factory=list)
    launched: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    last_run: dg.ExecuteInProcessResult | None = None
    result: dict[str, Any] | None = None
    final_requests: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> ExampleRepo:
    return build_example_repo(tmp_path_factory.mktemp("example") / "support-agent", ["regress-escalation"])


def _run_by_hand(instance: dg.DagsterInstance, job: str, partition: Any, run_config: dict | None = None) -> None:
    result = defs.resolve_job_def(job).execute_in_process(
        run_config=run_config, instance=instance, partition_key=partition, raise_on_error=False
    )
    assert result.success, job


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
        commits = [commit_key(request.repo, request.base_sha), commit_key(request.repo, request.head_sha)]
        try:
            instance.add_dynamic_partitions("commits", commits)
            instance.add_dynamic_partitions("comparisons", [request.key])
            job = defs.resolve_job_def("comparison_job")
            state.first = evaluate(instance)
            state.first_again = [r.run_key for r in evaluate(instance)]
            # A run under way (or queued) for the comparison: nothing more is asked meanwhile.
            queued = instance.create_run_for_job(
                job, status=dg.DagsterRunStatus.STARTED, tags=comparison_run_tags(request.key)
            )
            state.while_queued = [r.run_key for r in evaluate(instance)]
            instance.delete_run(queued.run_id)
            # Runs from one state that end unfinished (an outage): tried again, a bounded number of times.
            failed_ids = []
            for _ in range(MAX_ATTEMPTS):
                (req,) = evaluate(instance)
                failed_ids.append(
                    instance.create_run_for_job(
                        job, status=dg.DagsterRunStatus.FAILURE, tags={**req.tags, RUN_KEY_TAG: req.run_key}
                    ).run_id
                )
                state.after_failures.append([r.run_key for r in evaluate(instance)])
            for run_id in failed_ids:
                instance.delete_run(run_id)
            # What a run that died part-way left in the lake: both commits learnt, one window landed.
            for ck in commits:
                _run_by_hand(instance, "eval_manifest_job", ck)
            backend = home.resources()["sandbox"].backend()
            assessment = assess_mod.assess(
                lake, request, backend_name=backend.name, runtime_digest=backend.runtime_digest(), detail=False
            )
            first_window = assessment.next_windows[0]
            _run_by_hand(
                instance,
                "task_samples_job",
                dg.MultiPartitionKey(
                    {"commit": commit_key(request.repo, first_window.commit), "task": first_window.task}
                ),
                {
                    "ops": {
                        "task_samples": {"config": {"comparison": request.key, "windows": [first_window.window.name]}}
                    }
                },
            )
            state.landed_before_restart = [p.rsplit("/", 1)[1].split(".")[1] for p in lake.glob(LAYOUT.batch_glob())]
            # The daemon restarts.
            instance.dispose()
            instance = dg.DagsterInstance.local_temp(tempdir=str(instance_dir))
            state.after_restart = evaluate(instance)
            for r in state.after_restart:
                if already_launched(instance, r.run_key):
                    continue
                state.last_run = launch(instance, r)
                state.launched.append(r.run_key)
                if not state.last_run.success:
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


def test_sensor_requests_one_comparison_run_for_the_whole_comparison(loop: Loop) -> None:
    (first,) = loop.first
    assert (first.job_name, first.partition_key) == ("comparison_job", loop.comparison)
    assert first.run_key.startswith(f"evaluate:{loop.comparison}:learning:")
    assert first.tags[REPORT_LOCK_TAG] == loop.comparison
    # after the restart the one run the sensor asked for ran every window left, of both arms
    assert len(loop.after_restart) == 1 and loop.launched == [loop.after_restart[0].run_key]


def test_run_keys_are_stable_across_evaluations_without_new_data(loop: Loop) -> None:
    assert loop.first_again == [loop.first[0].run_key]


def test_no_run_is_requested_while_one_is_under_way_for_the_comparison(loop: Loop) -> None:
    assert loop.while_queued == []


def test_a_state_whose_runs_end_unfinished_is_tried_a_bounded_number_of_times(loop: Loop) -> None:
    first = loop.first[0].run_key
    retries = [f"{first}:attempt-{n}" for n in range(2, MAX_ATTEMPTS + 1)]
    assert loop.after_failures == [[k] for k in retries] + [[]]


def test_restarted_sensor_continues_where_the_lake_left_off(loop: Loop, example: ExampleRepo) -> None:
    (again,) = loop.after_restart
    # The state moved (commits learnt, a window landed): a new run, from there.
    assert again.run_key != loop.first[0].run_key and ":learning:" not in again.run_key
    assert again.tags[FROM_STATE_TAG] == again.run_key
    assert loop.last_run is not None
    materialized = [
        e.step_materialization_data.materialization for e in loop.last_run.get_asset_materialization_events()
    ]
    samples = [m for m in materialized if m.asset_key == dg.AssetKey("task_samples")]
    assert samples and all(ESCALATION in str(m.partition) for m in samples)
    assert not any(SUMMARY in str(m.partition) for m in samples)
    for sha in (example.base_sha, example.sha("regress-escalation")):
        assert any(f"@{sha}" in str(m.partition) for m in samples), sha
    # nothing that was learnt or landed before the restart ran again
    assert not [m for m in materialized if m.asset_key == dg.AssetKey("eval_manifest")]
    assert len(loop.landed_before_restart) == 1
    ran = {b for m in samples for b in m.metadata["batches"].value}  # type: ignore[union-attr]
    assert ran and not ran & set(loop.landed_before_restart)


def test_sensor_runs_are_recorded_with_their_partitions(loop: Loop) -> None:
    with dg.DagsterInstance.local_temp(tempdir=str(loop.instance_dir)) as instance:
        runs = instance.get_runs(filters=dg.RunsFilter(tags={SENSOR_TAG: SENSOR}))
        assert {r.tags[RUN_KEY_TAG] for r in runs} == set(loop.launched)
        assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
        event = instance.get_latest_materialization_event(dg.AssetKey("pr_report"))
        assert event is not None and event.dagster_event.partition == loop.comparison  # type: ignore[union-attr]
        metadata = event.asset_materialization.metadata  # type: ignore[union-attr]
        assert metadata["check_run_conclusion"].value == "failure"
        # The check run reads as Markdown in the UI: its summary's lines, not "\n" escapes.
        check_run = metadata["check_run"].value
        assert "`failure`" in check_run and "\\n" not in check_run and check_run.count("\n") > 3
        samples = instance.get_latest_materialization_event(dg.AssetKey("task_samples"))
        assert samples is not None and samples.run_id in {r.run_id for r in runs}
