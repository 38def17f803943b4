"""Check-run mapping: a comparison verdict as a GitHub check run state."""

from __future__ import annotations

from typing import Any

_VERDICTS = {
    "IMPROVED": ("success", "improved"),
    "UNCHANGED": ("success", "no change"),
    "INCONCLUSIVE": ("neutral", "inconclusive"),
    "REGRESSED": ("failure", "regressed"),
}


def check_run_state(verdict: Any, samples_done: int, samples_planned: int) -> tuple[str, str | None, str]:
    """``(status, conclusion, title)`` of the check run for a comparison's verdict.

    RUNNING → in_progress "running · N of M samples"; IMPROVED/UNCHANGED → success;
    INCONCLUSIVE → neutral; REGRESSED → failure. ``verdict`` may be a string or an enum.
    """
    name = str(getattr(verdict, "value", verdict)).upper()
    if name == "RUNNING":
        return "in_progress", None, f"running · {samples_done} of {samples_planned} samples"
    if name not in _VERDICTS:
        raise ValueError(
            f"verdict {verdict!r} has no check-run mapping; expected RUNNING or one of {', '.join(_VERDICTS)}"
        )
    conclusion, word = _VERDICTS[name]
    return "completed", conclusion, f"{word} · {samples_done} samples"
