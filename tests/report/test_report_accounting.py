"""What the report says about windows that landed no samples (money spent is money spent)."""

from __future__ import annotations

from evalrunner_assets.documents.comparison import ComparisonDocument, FailedWindows
from evalrunner_assets.report.markdown import not_landed_note
from tests.helpers.comparison_fixture import document


def failed(windows: int, samples: int, cost: float | None, unknown: int) -> ComparisonDocument:
    doc = document()
    doc.failed_windows = FailedWindows(
        windows=windows,
        samples=samples,
        input_tokens=0,
        output_tokens=0,
        total_tokens=0,
        cost_usd=cost,
        unknown_windows=unknown,
    )
    return doc


def test_nothing_failed_says_nothing() -> None:
    assert not_landed_note(failed(0, 0, 0.0, 0)) == ""
    assert not_landed_note(document()) == ""


def test_failed_windows_with_readable_logs_show_their_samples_and_cost() -> None:
    assert not_landed_note(failed(2, 32, 0.0125, 0)) == (
        "2 window(s) failed on infrastructure after using 32 samples, $0.01"
    )
    assert not_landed_note(failed(1, 16, 0.0021, 0)) == (
        "1 window(s) failed on infrastructure after using 16 samples, $0.0021"
    )


def test_a_window_without_a_log_makes_the_cost_unknown_never_zero() -> None:
    note = not_landed_note(failed(3, 16, None, 1))
    assert "after using 16 samples" in note and "cost unknown" in note and "$0.00" not in note
    assert not_landed_note(failed(2, 0, None, 2)) == (
        "2 window(s) failed on infrastructure (no readable log: their use is unknown)"
    )


def test_cancelled_windows_of_a_stopped_run_are_counted() -> None:
    doc = failed(1, 16, 0.002, 0)
    doc.execution = {"cancelled_windows": [{"task": "t", "commit": "c", "window": "w"}]}
    note = not_landed_note(doc)
    assert note.startswith("1 window(s) failed on infrastructure after using 16 samples")
    assert note.endswith("1 window(s) cancelled mid-run (their use is unknown; they run again on resume)")


def test_a_stopped_comparison_says_why_in_the_comment_the_summary_and_the_check_run_title(tmp_path) -> None:
    from evalrunner_assets.pipeline.publish import write_report
    from evalrunner_assets.report.markdown import render_comment, render_summary
    from lake import open_lake

    doc = document()
    doc.status, doc.verdict = "stopped", "INCONCLUSIVE"
    doc.final_verdict.verdict = "INCONCLUSIVE"
    doc.stopped_reason = (
        "model provider openai is down: 9 consecutive failed calls over 21s with no success in between "
        "(6× 500, 3× 503)" + " and more" * 40
    )
    reason = doc.stopped_reason
    assert f"> **Could not evaluate:** {reason}" in render_comment(doc)
    assert f"could not evaluate: {reason}" in render_summary(doc)
    check = write_report(open_lake(str(tmp_path / "lake")), doc).check
    assert check["conclusion"] == "neutral"
    assert check["title"].startswith("could not evaluate: model provider openai is down: 9 consecutive failed calls")
    assert len(check["title"]) <= 240 and check["title"].endswith("…")
    # A comparison that ran to its end keeps its verdict's title.
    doc.status, doc.stopped_reason = "complete", None
    assert write_report(open_lake(str(tmp_path / "lake")), doc).check["title"].startswith("inconclusive · ")
