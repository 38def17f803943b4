"""Anytime-valid e-processes and confidence sequences for a mean paired difference in [-1, 1].

Construction: a betting martingale per null (Waudby-Smith & Ramdas 2023), mixed over a fixed
grid of bet sizes instead of a single predictable plug-in bet. For the null "mean <= d0" the
capital after t pairs with bet fraction f is

    W_t(f) = prod_i (1 + f * (D_i - d0) / (1 + d0)),        f in (0, 1),

which is a nonnegative supermartingale whenever every conditional mean of D_i is <= d0
(the factor never reaches 0 because D_i >= -1). Any fixed average of supermartingales is one
too, so the mixture M_t = mean_f W_t(f) is an e-process and Ville's inequality gives
P(sup_t M_t >= 1/a) <= a under the null, however often we look. The null "mean >= d0" is the
mirror image: 1 + f * (d0 - D_i) / (1 - d0).

Why a mixture: the reference plug-in bet is tuned for interval width, and its cap c = 1/2
halves the growth available when every pair ties (the usual case for near-deterministic
tasks). The mixture tracks the best fixed bet in hindsight up to a log factor, for any
alternative, and needs no tuning per task. With binary scores a tie (D = 0) leaves the
capital against "mean <= 0" untouched, so only discordant pairs carry evidence about the sign,
while ties still count as evidence against "|mean| >= margin".
"""

from __future__ import annotations

import numpy as np

# Bet fractions of the mixture, spread evenly over (0, 1) with equal prior weight. Fixed in
# advance (not tuned to data), which is what makes the mixture valid.
BET_FRACTIONS: np.ndarray = np.arange(1, 41, dtype=np.float64) / 41.0

# The four one-sided tests behind every label: (null boundary as a function of the margin,
# side). side=+1 tests "mean <= d0" (evidence the mean is above d0); side=-1 tests "mean >= d0".
TEST_NAMES = ("above_zero", "below_zero", "above_minus_margin", "below_plus_margin")


def test_boundaries(margin: float) -> tuple[tuple[float, int], ...]:
    """(d0, side) for each of :data:`TEST_NAMES`."""
    return ((0.0, +1), (0.0, -1), (-margin, +1), (margin, -1))


def bet_log_factors(values: np.ndarray, d0: float, side: int, fractions: np.ndarray = BET_FRACTIONS) -> np.ndarray:
    """log(1 + f * scaled excess) for each value (any shape) and each bet fraction (last axis).

    Written in terms of D directly so that swapping head and base (D -> -D, d0 -> -d0,
    side -> -side) gives bit-identical factors.
    """
    values = np.asarray(values, dtype=np.float64)
    if side > 0:
        scaled = (values - d0) / (1.0 + d0)
    else:
        scaled = (d0 - values) / (1.0 - d0)
    return np.log1p(scaled[..., None] * fractions)


def mixture_log_wealth(cumulative_log_factors: np.ndarray) -> np.ndarray:
    """log of the equal-weight mixture over the last axis (bet fractions)."""
    top = cumulative_log_factors.max(axis=-1, keepdims=True)
    summed = np.exp(cumulative_log_factors - top).sum(axis=-1)
    return top[..., 0] + np.log(summed) - np.log(cumulative_log_factors.shape[-1])


def log_wealth_path(deltas: np.ndarray, d0: float, side: int) -> np.ndarray:
    """log M_t for t = 1..n over a sequence of paired differences (consumed in order)."""
    deltas = np.asarray(deltas, dtype=np.float64)
    if deltas.size == 0:
        return np.zeros(0)
    return mixture_log_wealth(np.cumsum(bet_log_factors(deltas, d0, side), axis=0))


def log_threshold(alpha: float, n_tasks: int) -> float:
    """log of the e-value each one-sided test must reach: 2T/alpha (two-sided, Bonferroni over T)."""
    return float(np.log(2.0 * n_tasks / alpha))


def first_crossings(log_wealth: np.ndarray, log_thr: float) -> np.ndarray:
    """Prefix length (1-based) at which log wealth first reaches the threshold; 0 when never.

    Works on the last axis, so a batch of paths (..., t) gives one crossing per path.
    """
    hit = log_wealth >= log_thr
    any_hit = hit.any(axis=-1)
    first = hit.argmax(axis=-1) + 1
    return np.where(any_hit, first, 0)


# Label codes shared by the per-task decision and the vectorized benchmark.
CONTINUE, IMPROVED, REGRESSED, UNCHANGED, CONTRADICTED = 0, 1, 2, 3, 4


def labels_from_crossings(
    above_zero: np.ndarray,
    below_zero: np.ndarray,
    above_minus_margin: np.ndarray,
    below_plus_margin: np.ndarray,
    min_pairs: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Label code and the look (prefix length) at which it settled, from first-crossing times.

    A claim counts from the first look at or after ``min_pairs`` at which its evidence has
    ever crossed (the running intersection of the confidence sequence). The first settled
    label wins, so adding pairs never changes it. At the same look a directional claim wins
    over "unchanged" (a small but established change is still a change); improved and
    regressed together can only happen when the data contradict a constant mean, reported as
    CONTRADICTED.
    """
    never = np.iinfo(np.int64).max

    def look(t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=np.int64)
        return np.where(t > 0, np.maximum(t, min_pairs), never)

    t_imp = look(above_zero)
    t_reg = look(below_zero)
    t_unch = np.where(
        (np.asarray(above_minus_margin) > 0) & (np.asarray(below_plus_margin) > 0),
        np.maximum(np.maximum(look(above_minus_margin), look(below_plus_margin)), min_pairs),
        never,
    )
    t_dir = np.minimum(t_imp, t_reg)
    t_first = np.minimum(t_dir, t_unch)
    code = np.full(np.shape(t_first), CONTINUE, dtype=np.int64)
    code = np.where(t_unch == t_first, UNCHANGED, code)
    code = np.where(t_imp == t_first, IMPROVED, code)
    code = np.where(t_reg == t_first, REGRESSED, code)
    code = np.where((t_imp == t_first) & (t_reg == t_first), CONTRADICTED, code)
    code = np.where(t_first == never, CONTINUE, code)
    settled_at = np.where(t_first == never, 0, t_first)
    return code, settled_at


_GRID_STEP = 0.005


def _log_wealth_at(deltas: np.ndarray, prefix: np.ndarray, d0: np.ndarray, side: int) -> np.ndarray:
    """log M over the first ``prefix[j]`` pairs at null boundary ``d0[j]``, for each j."""
    if side > 0:
        scaled = (deltas[None, :] - d0[:, None]) / (1.0 + d0[:, None])
    else:
        scaled = (d0[:, None] - deltas[None, :]) / (1.0 - d0[:, None])
    logs = np.log1p(scaled[..., None] * BET_FRACTIONS)
    used = np.arange(deltas.size)[None, :] < prefix[:, None]
    return mixture_log_wealth(np.where(used[..., None], logs, 0.0).sum(axis=1))


def interval_path(
    deltas: np.ndarray, log_thr: float, looks: np.ndarray | None = None, margin: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Confidence sequence bounds (lo, hi) at each look (prefix length), as running intersections.

    lo_t is the infimum of the d0 not rejected by the "mean <= d0" test over the first t pairs
    (hi_t mirrors it). The mixture wealth decreases in d0, so the rejected set is an interval:
    a grid pass over every prefix finds each bound to within one step, and a bisection on the
    prefixes that attain the running maximum pins the reported bound down. Reported bounds are
    always on the rejected side, so rounding never widens a claim.
    """
    deltas = np.asarray(deltas, dtype=np.float64)
    n = deltas.size
    looks = np.arange(1, n + 1) if looks is None else np.asarray(looks, dtype=np.int64)
    if n == 0 or looks.size == 0:
        return np.zeros(looks.size), np.zeros(looks.size)
    edge = 1.0 - 1e-9
    grid = np.arange(-1.0, 1.0 + _GRID_STEP / 2, _GRID_STEP)
    extra = [0.0] if margin is None else [0.0, -margin, margin]
    grid = np.unique(np.clip(np.concatenate([grid, extra]), -edge, edge))

    def bounds(side: int) -> np.ndarray:
        signed_grid = grid if side > 0 else grid[::-1]  # walk from the rejected end inward
        # logs: (grid, n, K) -> cumulative over pairs -> mixture -> rejected?(grid, n)
        if side > 0:
            scaled = (deltas[None, :] - signed_grid[:, None]) / (1.0 + signed_grid[:, None])
        else:
            scaled = (signed_grid[:, None] - deltas[None, :]) / (1.0 - signed_grid[:, None])
        rejected = mixture_log_wealth(np.cumsum(np.log1p(scaled[..., None] * BET_FRACTIONS), axis=1)) >= log_thr
        # Rejected sets are contiguous from the extreme, so count them per prefix.
        n_rejected = np.cumprod(rejected, axis=0).sum(axis=0)  # (n,)
        # Known-rejected bound per prefix (the extreme itself when nothing is rejected).
        known = np.where(n_rejected > 0, signed_grid[np.maximum(n_rejected - 1, 0)], -side * 1.0)
        nxt = np.where(n_rejected < signed_grid.size, signed_grid[np.minimum(n_rejected, signed_grid.size - 1)], known)
        # Running intersection over prefixes, then refine the prefixes attaining it.
        out = np.empty(looks.size)
        running = np.maximum.accumulate(known) if side > 0 else np.minimum.accumulate(known)
        for j, t in enumerate(looks):
            best = running[t - 1]
            if best == -side * 1.0:
                out[j] = best
                continue
            cands = np.flatnonzero(known[:t] == best)
            a = known[cands].copy()  # rejected
            b = nxt[cands].copy()  # not rejected (or equal when the grid ran out)
            prefix = cands + 1
            for _ in range(14):  # step/2**14 < 1e-6
                mid = 0.5 * (a + b)
                rej = _log_wealth_at(deltas, prefix, mid, side) >= log_thr
                a = np.where(rej, mid, a)
                b = np.where(rej, b, mid)
            out[j] = a.max() if side > 0 else a.min()
        return out

    return bounds(+1), bounds(-1)
