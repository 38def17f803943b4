"""Intervals for one arm's mean score: an anytime-valid confidence sequence and pooled Wilson.

A main-branch point measures a single commit (no pairs), sampling until its interval is narrow
enough. Stopping on the interval's width is only honest when the interval stays valid at a
data-dependent stopping time, so the per-task interval is a confidence sequence: for X_i in
[0, 1] and a candidate mean m, the betting capitals (Waudby-Smith & Ramdas 2023)

    K+_t(m) = prod_i (1 + f (X_i - m) / m)            (evidence that the mean is above m)
    K-_t(m) = prod_i (1 - f (X_i - m) / (1 - m))      (evidence that the mean is below m)

are nonnegative martingales under "mean = m" for any f in (0, 1). As in ``_sequence.py`` the
capital is averaged over a fixed grid of fractions (no tuning to the data), and m is excluded
once either mixture reaches 2/alpha (Ville's inequality, alpha/2 per side). The interval at a
look is the set of grid values not excluded, intersected with every earlier look.

Pooled interval (cohort, all tasks): Wilson's score interval on the summed scores over the
summed inputs of the pooled tasks. It treats every input of every task as one draw of one
Bernoulli, so it is a description of the pool (fixed n), not a sequential guarantee; the
per-task sequences carry the stopping rule.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.stats import norm

from evalrunner_assets.stats._errors import ParamsError

MEAN_FRACTIONS: np.ndarray = np.arange(1, 21, dtype=np.float64) / 21.0
MEAN_GRID: np.ndarray = np.linspace(0.0, 1.0, 401)


def _mixture(cum: np.ndarray) -> np.ndarray:
    top = cum.max(axis=-1, keepdims=True)
    return top[..., 0] + np.log(np.exp(cum - top).sum(axis=-1)) - math.log(cum.shape[-1])


def mean_sequence_interval(
    values: Sequence[float], alpha: float, looks: Sequence[int] | None = None
) -> tuple[float, float]:
    """The confidence sequence for the mean of ``values`` (in [0, 1], in their pre-committed
    order) at level 1 - alpha, intersected over ``looks`` (prefix lengths; default: only the
    full length). ``(0, 1)`` when there are no values."""
    if not 0.0 < alpha < 1.0:
        raise ParamsError(f"alpha must be in (0, 1), got {alpha!r}")
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return (0.0, 1.0)
    if np.any((x < 0) | (x > 1)) or not np.all(np.isfinite(x)):
        raise ParamsError("mean_sequence_interval needs scores in [0, 1]")
    ends = sorted({int(n) for n in (looks or [x.size]) if 0 < int(n) <= x.size}) or [x.size]
    threshold = math.log(2.0 / alpha)
    m = MEAN_GRID[1:-1]  # the capitals are undefined at 0 and 1; those ends are handled below
    up = np.zeros((len(ends), m.size, MEAN_FRACTIONS.size))
    down = np.zeros_like(up)
    # One fraction at a time keeps memory at O(n * grid), whatever the sample count.
    for j, f in enumerate(MEAN_FRACTIONS):
        excess = x[:, None] - m[None, :]
        cum_up = np.cumsum(np.log1p(f * excess / m), axis=0)
        cum_down = np.cumsum(np.log1p(-f * excess / (1.0 - m)), axis=0)
        idx = np.asarray(ends) - 1
        up[:, :, j] = cum_up[idx]
        down[:, :, j] = cum_down[idx]
    excluded = (_mixture(up) >= threshold) | (_mixture(down) >= threshold)
    lo, hi = 0.0, 1.0
    for row in excluded:
        kept = m[~row]
        if kept.size == 0:  # every interior value excluded: the mean sits at an end
            mean = float(x.mean())
            kept = np.array([0.0 if mean <= 0.5 else 1.0])
        step = MEAN_GRID[1] - MEAN_GRID[0]
        # Report on the conservative side of the grid.
        lo = max(lo, float(max(0.0, kept.min() - step)))
        hi = min(hi, float(min(1.0, kept.max() + step)))
    if lo > hi:  # looks disagree beyond the grid's resolution: keep the last look's interval
        lo, hi = hi, lo
    return (lo, hi)


def wilson_interval(successes: float, n: float, level: float = 0.95) -> tuple[float, float] | None:
    """Wilson's score interval for a proportion (``successes`` may be a sum of scores in
    [0, 1]); None without observations."""
    if n <= 0:
        return None
    if not 0.0 < level < 1.0:
        raise ParamsError(f"level must be in (0, 1), got {level!r}")
    z = float(norm.ppf(0.5 + level / 2.0))
    p = min(1.0, max(0.0, successes / n))
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2.0 * n)) / denom
    half = z * math.sqrt(p * (1.0 - p) / n + z * z / (4.0 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))
