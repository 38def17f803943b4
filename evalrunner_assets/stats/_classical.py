"""Classical (fixed-n) paired interval, shown for reference only: not valid under repeated looks."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps


def paired_t_interval(deltas: np.ndarray, level: float = 0.95) -> tuple[float, float] | None:
    """Student-t interval for the mean paired difference; None with fewer than 2 pairs."""
    d = np.asarray(deltas, dtype=np.float64)
    n = d.size
    if n < 2:
        return None
    mean = float(d.mean())
    sd = float(d.std(ddof=1))
    if sd == 0.0:
        return (mean, mean)
    half = float(sps.t.ppf(0.5 + level / 2.0, n - 1)) * sd / math.sqrt(n)
    return (max(-1.0, mean - half), min(1.0, mean + half))
