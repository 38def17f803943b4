"""What `evalrunner compare` records in Dagster: runless asset events (no run, nothing to
re-execute), marked as recorded by the CLI, with the metadata the asset bodies produce."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from evalrunner_assets.assets.evals import (
    report_metadata,
    sample_scores_metadata,
    samples_metadata,
    trajectories_metadata,
)
from evalrunner_assets.assets.recording import RECORDED_BY, RECORDED_BY_TAG, DagsterRecorder
from evalrunner_assets.pipeline import nouns
from evalrunner_assets.pipeline.publish import WrittenReport
from evalrunner_assets.pipeline.spec import ComparisonRequest
from lake import open_lake

HEAD, BASE = "b" * 40, "a" * 40


def _request() -> ComparisonRequest:
    return ComparisonRequest(
        repo="local/rec",
        source="/nowhere",
        pr="7",
        base_sha=BASE,
        head_sha=HEAD,
        base_ref="main",
        requested_at="2026-01-01T00:00:00+00:00",
    )


def test_recorder_reports_runless_materializations_and_checks_without_runs(tmp_path: Path) -> None:
    lake = open_lake(str(tmp_path / "lake"))
    request = _request()
    report = WrittenReport(body="comment", check={"name": "evalrunner / evals"}, comment_url="file:///c.md")
    with dg.DagsterInstance.ephemeral() as instance:
        recorder = DagsterRecorder(lake, instance)
        recorder.start(request)
        commit = f"local/rec@{HEAD}"
        instance.add_dynamic_partitions("tasks", ["t/one"])
        recorder.samples_landed(commit, "t/one", ["w000000-000016"], [])
        recorder.report_written(report)
        recorder.close(wait=True)

        assert instance.get_runs() == []
        assert set(instance.get_dynamic_partitions("commits")) == {f"local/rec@{BASE}", commit}
        assert instance.get_dynamic_partitions("comparisons") == [request.key]

        (rec,) = instance.fetch_materializations(dg.AssetKey("pr_report"), limit=10).records
        assert rec.run_id == "" and rec.partition_key == request.key
        mat = rec.asset_materialization
        assert mat is not None and mat.tags[RECORDED_BY_TAG] == RECORDED_BY
        assert dict(mat.metadata) == report_metadata(report)

        (samples,) = instance.fetch_materializations(dg.AssetKey("task_samples"), limit=10).records
        assert samples.partition_key == f"{commit}|t/one"
        metadata, checks = samples_metadata(lake, [])
        assert dict(samples.asset_materialization.metadata) == metadata  # type: ignore[union-attr]
        # The nouns task_samples shows, recorded beside it with what the lake holds (nothing yet).
        for noun, shown in (
            ("sample_scores", sample_scores_metadata(nouns.sample_scores(lake, "local/rec", HEAD, "t/one"))),
            ("trajectories", trajectories_metadata(nouns.trajectories(lake, "local/rec", HEAD, "t/one"))),
        ):
            (rec,) = instance.fetch_materializations(dg.AssetKey(noun), limit=10).records
            assert rec.run_id == "" and rec.partition_key == f"{commit}|t/one"
            assert dict(rec.asset_materialization.metadata) == shown  # type: ignore[union-attr]
            assert shown["rows" if noun == "sample_scores" else "events"].value == 0
        # The same partition recorded again (a second PR on the same base, a resume) is accepted.
        recorder = DagsterRecorder(lake, instance)
        recorder.start(request)
        recorder.samples_landed(commit, "t/one", ["w000000-000016"], [])
        recorder.close(wait=True)
        assert len(instance.fetch_materializations(dg.AssetKey("task_samples"), limit=10).records) == 2
        for check in checks:
            key = dg.AssetCheckKey(dg.AssetKey("task_samples"), check["check_name"])
            history = instance.event_log_storage.get_asset_check_execution_history(key, limit=10)
            assert len(history) == 2
            for evaluation in history:
                assert evaluation.status.value == "SUCCEEDED"
                data = evaluation.event.dagster_event.event_specific_data  # type: ignore[union-attr]
                assert data.metadata["partition"].value == f"{commit}|t/one"


def test_recording_after_close_without_wait_is_dropped(tmp_path: Path) -> None:
    lake = open_lake(str(tmp_path / "lake"))
    with dg.DagsterInstance.ephemeral() as instance:
        recorder = DagsterRecorder(lake, instance)
        recorder.start(_request())
        recorder.close(wait=False)
        recorder.report_written(WrittenReport(body="x", check={}, comment_url="file:///x"))
        assert instance.fetch_materializations(dg.AssetKey("pr_report"), limit=10).records == []
