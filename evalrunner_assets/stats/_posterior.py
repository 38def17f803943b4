"""Posterior over the paired-difference distribution (reported, never used to stop).

D's distribution is modelled as a Dirichlet over its support: the observed values plus the
anchors -1, 0, +1 (base better / tie / head better for binary scores), each anchor with prior
weight 1/2. For binary scores this is exactly a Dirichlet(1/2, 1/2, 1/2) over the outcome
categories, updated with the counts. Delta = sum(pi_s * s).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

N_DRAWS = 20_000
_PRIOR = 0.5


@dataclass(frozen=True)
class PosteriorSummary:
    p_improvement: float
    p_above_margin: float
    p_within_margin: float
    p_below_margin: float
    mean: float
    draws: np.ndarray


def dirichlet_support(deltas: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(support values, observed counts, prior weights) with D rounded to collapse float noise."""
    d = np.round(np.asarray(deltas, dtype=np.float64), 12)
    values, counts = np.unique(np.concatenate([d, [-1.0, 0.0, 1.0]]), return_counts=True)
    anchors = np.isin(values, [-1.0, 0.0, 1.0])
    counts = counts - anchors.astype(np.int64)  # remove the anchors we appended
    prior = np.where(anchors, _PRIOR, 0.0)
    return values, counts.astype(np.float64), prior


def posterior_draws(deltas: np.ndarray, n_draws: int = N_DRAWS, seed: int = 0) -> np.ndarray:
    values, counts, prior = dirichlet_support(deltas)
    conc = counts + prior
    rng = np.random.default_rng(seed)
    gam = rng.standard_gamma(conc, size=(n_draws, conc.size))
    weights = gam / gam.sum(axis=1, keepdims=True)
    return weights @ values


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
