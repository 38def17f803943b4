"""Posterior over the paired-difference distribution (reported, never used to stop).

D's distribution is modelled as a Dirichlet over its support: the observed values plus the
anchors -1, 0, +1 (base better / tie / head better for binary scores), each anchor with prior
weight 1/2. For binary scores this is exactly a Dirichlet(1/2, 1/2, 1/2) over the outcome
categories, updated with the counts. Delta = sum(pi_s * s).

Cost: draws are exact Dirichlet draws while the support is small (binary scores, a few
epochs); beyond :data:`EXACT_SUPPORT` distinct values the mean of the Dirichlet is drawn from
the normal with its exact mean and variance (a sum of many small weights), so the cost does
not grow with the number of pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

N_DRAWS = 2_000
EXACT_SUPPORT = 16
_PRIOR = 0.5


@dataclass(frozen=True)
class PosteriorSummary:
    p_improvement: float
    p_above_margin: float
    p_within_margin: float
    p_below_margin: float
    mean: float
    draws: np.ndarray


def dirichlet_support(deltas: np.ndarray, max_support: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(support values, observed counts, prior weights) with D rounded to collapse float noise.

    ``max_support``: with more distinct values than this, each value's count is split between
    the two nearest points of an even grid over [-1, 1] (keeps every count and the mean)."""
    d = np.round(np.asarray(deltas, dtype=np.float64), 12)
    values, occurrences = np.unique(np.concatenate([d, [-1.0, 0.0, 1.0]]), return_counts=True)
    anchors = np.isin(values, [-1.0, 0.0, 1.0])
    counts = (occurrences - anchors.astype(np.int64)).astype(np.float64)  # remove the anchors we appended
    if max_support is not None and values.size > max_support:
        grid = np.linspace(-1.0, 1.0, max_support if max_support % 2 else max_support + 1)
        pos = (values + 1.0) / (grid[1] - grid[0])
        low = np.clip(np.floor(pos).astype(np.int64), 0, grid.size - 2)
        frac = pos - low
        binned = np.zeros(grid.size)
        np.add.at(binned, low, counts * (1.0 - frac))
        np.add.at(binned, low + 1, counts * frac)
        values, counts = grid, binned
        anchors = np.isin(values, [-1.0, 0.0, 1.0])
    prior = np.where(anchors, _PRIOR, 0.0)
    return values, counts, prior


def posterior_draws(deltas: np.ndarray, n_draws: int = N_DRAWS, seed: int = 0) -> np.ndarray:
    values, counts, prior = dirichlet_support(deltas)
    conc = counts + prior
    rng = np.random.default_rng(seed)
    keep = conc > 0
    values, conc = values[keep], conc[keep]
    if values.size <= EXACT_SUPPORT:
        gam = rng.standard_gamma(conc, size=(n_draws, conc.size))
        weights = gam / gam.sum(axis=1, keepdims=True)
        return weights @ values
    total = conc.sum()
    mean = float(conc @ values / total)
    var = float((conc @ values**2 / total - mean**2) / (total + 1.0))
    return np.clip(rng.normal(mean, np.sqrt(max(var, 0.0)), size=n_draws), -1.0, 1.0)


def summarize(deltas: np.ndarray, margin: float) -> PosteriorSummary:
    draws = posterior_draws(deltas)
    return PosteriorSummary(
        p_improvement=float(np.mean(draws > 0)),
        p_above_margin=float(np.mean(draws > margin)),
        p_within_margin=float(np.mean(np.abs(draws) <= margin)),
        p_below_margin=float(np.mean(draws < -margin)),
        mean=float(draws.mean()),
        draws=draws,
    )
