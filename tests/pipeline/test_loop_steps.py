"""When the loop re-saves the comparison document: whenever what a reader acts on moved, not
only the verdict and the samples (a window failing after the last save moves neither)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from evalrunner_assets.documents.comparison import ComparisonDocument
from evalrunner_assets.pipeline.loop import result_changed

FIXTURE = Path(__file__).parents[1] / "fixtures" / "documents-v1" / "comparison.json"


def _doc(edit=None) -> ComparisonDocument:
    raw = json.loads(FIXTURE.read_text())
    if edit is not None:
        raw = copy.deepcopy(raw)
        edit(raw)
    return ComparisonDocument.model_validate(raw)


def test_the_same_document_computed_again_is_not_saved_again() -> None:
    later = _doc(lambda d: d.update(computed_at="2099-01-01T00:00:00+00:00"))
    assert not result_changed(later, _doc())


def test_a_window_failing_after_the_last_save_is_saved_though_no_verdict_or_sample_moved() -> None:
    def one_more_failure(d: dict) -> None:
        d["failed_windows"] = {**d["failed_windows"], "windows": 1, "unknown_windows": 1, "cost_usd": None}

    assert result_changed(_doc(one_more_failure), _doc())


def test_a_new_failure_cause_on_a_task_is_saved() -> None:
    task = next(iter(json.loads(FIXTURE.read_text())["tasks"]))
    assert result_changed(_doc(lambda d: d["tasks"][task].update(failures={"base": "sandbox gone"})), _doc())


def test_no_saved_document_is_a_change_and_a_moved_verdict_is_one() -> None:
    assert result_changed(_doc(), None)
    assert result_changed(_doc(lambda d: d.update(samples_run=d["samples_run"] + 2)), _doc())
