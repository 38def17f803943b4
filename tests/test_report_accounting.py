"""What the report says about windows that landed no samples (money spent is money spent)."""

from __future__ import annotations

from evalrunner_assets.report.markdown import not_landed_note


def failed(windows: int, samples: int, cost: float | None, unknown: int) -> dict:
    return {
        "failed_windows": {
            "windows": windows,
            "samples": samples,
            "total_tokens": 0,
            "cost_usd": cost,
            "unknown_windows": unknown,
        }
    }


def test_nothing_failed_says_nothing() -> None:
    assert not_landed_note(failed(0, 0, 0.0, 0)) == ""
    assert not_landed_note({}) == ""


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
    doc = {**failed(1, 16, 0.002, 0), "execution": {"cancelled_windows": [{"task": "t", "commit": "c", "window": "w"}]}}
    note = not_landed_note(doc)
    assert note.startswith("1 window(s) failed on infrastructure after using 16 samples")
    assert note.endswith("1 window(s) cancelled mid-run (their use is unknown; they run again on resume)")
