"""The window schedule: which positions of a task's seeded order run together, a function of the
window's start only (shared by the planner and the group-sequential looks of the statistics)."""

from __future__ import annotations

from evalrunner_assets.stats._errors import PlanError

# The window schedule (positions of a task's seeded order run together on one arm). A window
# depends only on where it starts, so a base commit's windows are the same for every PR on it
# and are reused. Small windows first, then at most 1/WINDOW_GROWTH of the pairs before it:
# the e-processes are read at every pair and the group-sequential sign tests at every window
# end (their looks, ``_groupseq.design_looks``: changing the schedule changes the statistical
# design), so a window only costs the pairs run past the one where the label settled
# (overshoot <= 1 + 1/WINDOW_GROWTH after the first WINDOW_MIN * WINDOW_GROWTH pairs), while
# the number of windows grows only logarithmically with the cap.
WINDOW_MIN = 8
WINDOW_GROWTH = 8


def window_size(start: int) -> int:
    """Pairs in the window that starts at position ``start``: 8 until 64, then start/8 rounded
    down to a multiple of 8 (8, …, 8, 16, …, 24, 32, …)."""
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise PlanError(f"window start must be a non-negative integer, got {start!r}")
    return max(WINDOW_MIN, (start // (WINDOW_MIN * WINDOW_GROWTH)) * WINDOW_MIN)


def window_span(start: int, limit: int) -> tuple[int, int]:
    """[start, stop) of the window at ``start``, cut at ``limit`` (dataset size or cap)."""
    return start, min(start + window_size(start), limit)


def window_schedule(limit: int) -> list[tuple[int, int]]:
    """Every window up to ``limit``, in order."""
    out, start = [], 0
    while start < limit:
        out.append(window_span(start, limit))
        start = out[-1][1]
    return out
