"""Paths the layout builds for callers that used to build them by hand."""

from __future__ import annotations

import fnmatch

import pytest

from lake.layout import LAYOUT, LakePathError, Window

REPO, SHA = "acme/agent", "a" * 40


def test_a_retired_failure_record_and_a_retired_tasks_listing_keep_their_place_under_failures_retired():
    failure = LAYOUT.batch_failure(REPO, SHA, "triage/t", Window(0, 8), "d" * 16)
    assert LAYOUT.retired_failure(failure, "20260101T000000Z") == (
        f"failures-retired/{REPO}/{SHA}/triage/t/w000000-000008.{'d' * 16}.20260101T000000Z.json"
    )
    tasks = LAYOUT.commit_tasks(REPO, SHA)
    assert LAYOUT.retired_failure(tasks, "20260101T000000Z") == (
        f"failures-retired/raw/{REPO}/{SHA}/tasks.20260101T000000Z.json"
    )
    with pytest.raises(LakePathError, match="not a failure record"):
        LAYOUT.retired_failure(LAYOUT.manifest(REPO, SHA), "20260101T000000Z")


def test_the_requests_glob_matches_every_head_of_that_pull_request_only():
    pattern = LAYOUT.comparison_requests_glob(REPO, 7)
    assert fnmatch.fnmatchcase(LAYOUT.comparison_artifact(REPO, 7, SHA, "request.json"), pattern)
    assert not fnmatch.fnmatchcase(LAYOUT.comparison_artifact(REPO, 17, SHA, "request.json"), pattern)
    assert not fnmatch.fnmatchcase(LAYOUT.comparison_artifact(REPO, 7, SHA, "comment.md"), pattern)


def test_a_repositorys_batch_records_lie_under_its_prefix():
    record = LAYOUT.batch_record(REPO, SHA, "triage/t", Window(0, 8), "d" * 16)
    assert record.startswith(LAYOUT.batch_records_prefix(REPO) + "/")
    assert not record.startswith(LAYOUT.batch_records_prefix("acme/agent-two") + "/")


def test_a_comparison_document_is_told_apart_from_the_artifacts_beside_it():
    document = LAYOUT.comparison(REPO, 7, SHA)
    assert fnmatch.fnmatchcase(document, LAYOUT.all_comparisons_glob())
    assert LAYOUT.parse_comparison(document) == (REPO, "7", SHA)
    artifact = LAYOUT.comparison_artifact(REPO, 7, SHA, "request.json")
    assert fnmatch.fnmatchcase(artifact, LAYOUT.all_comparisons_glob())
    for other in (artifact, f"comparisons/{REPO}/7/not-a-sha.json", f"comparisons/acme/7/{SHA}.json"):
        with pytest.raises(LakePathError, match="not a comparison document path"):
            LAYOUT.parse_comparison(other)


def test_the_repository_of_a_series_path_is_read_off_the_layouts_own_paths():
    point = LAYOUT.series_point("acme/agent", "a" * 40)
    assert LAYOUT.series_repo(point) == "acme/agent"
    assert fnmatch.fnmatch(point, LAYOUT.every_series_points_glob())
    with pytest.raises(LakePathError, match="not a path of a repository's series"):
        LAYOUT.series_repo("comparisons/acme/agent/1/x.json")


def test_the_repository_of_a_candidates_path_is_read_off_the_layouts_own_paths():
    frontier = LAYOUT.continuum_frontier("acme/agent", "json")
    assert LAYOUT.candidates_repo(frontier) == "acme/agent"
    assert fnmatch.fnmatch(frontier, LAYOUT.every_frontier_glob())
    with pytest.raises(LakePathError, match="not a path of a repository's candidates"):
        LAYOUT.candidates_repo("series/acme/agent/points/x.json")


def test_a_raw_logs_annotated_copy_keeps_its_path_under_the_copies_and_out_of_the_notes_glob():
    raw = LAYOUT.raw_log(REPO, SHA, "triage/t", Window(0, 8), "d" * 16, content="e" * 16)
    copy = LAYOUT.annotated_log(raw)
    prefix = LAYOUT.annotated_logs_prefix() + "/"
    assert copy == prefix + raw.removeprefix(LAYOUT.raw_prefix() + "/")
    assert copy.startswith(LAYOUT.task_annotated_logs_prefix(REPO, SHA, "triage/t") + "/")
    # The annotations view reads the notes' Parquet files only, never the copies.
    assert not fnmatch.fnmatchcase(copy, LAYOUT.annotations_glob())
    notes = LAYOUT.annotations(REPO, SHA, "triage/t", "trajectory-miner")
    assert fnmatch.fnmatchcase(notes, LAYOUT.task_annotations_glob(REPO, SHA, "triage/t"))
    for bad in (LAYOUT.manifest(REPO, SHA), "raw/../tables/x.eval", "raw/acme/agent/x.parquet"):
        with pytest.raises(LakePathError):
            LAYOUT.annotated_log(bad)
