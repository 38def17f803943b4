"""Anytime-valid e-processes and confidence sequences for a mean paired difference in [-1, 1].

Construction: a betting martingale per null (Waudby-Smith & Ramdas 2023), mixed over a fixed
grid of bet sizes instead of a single predictable plug-in bet. For the null "mean <= d0" the
capital after t pairs with bet fraction f is

    W_t(f) = prod_i (1 + f * (D_i - d0) / (1 + d0)),        f in (0, 1),

which is a nonnegative supermartingale whenever every conditional mean of D_i is <= d0
(the factor never reaches 0 because D_i >= -1). Any fixed average of supermartingales is one
too, so the mixture M_t = sum_f w_f W_t(f) (prior weights w_f fixed in advance, summing to 1)
is an e-process and Ville's inequality gives P(sup_t M_t >= 1/a) <= a under the null, however
often we look. The null "mean >= d0" is the mirror image: 1 + f * (d0 - D_i) / (1 - d0).

Why a mixture: the reference plug-in bet is tuned for interval width, and its cap c = 1/2
halves the growth available when every pair ties (the usual case for near-deterministic
tasks). The mixture tracks the best fixed bet in hindsight up to a log factor, for any
alternative, and needs no tuning per task. With binary scores a tie (D = 0) leaves the
capital against "mean <= 0" untouched, so only discordant pairs carry evidence about the sign,
while ties still count as evidence against "|mean| >= margin". The prior over bet sizes is
chosen by measurement (``bench/stats.py``; see the README).

Cost: a decision needs each test's first crossing and a few current values, not the mixture
at every prefix: :func:`scan` works on block sums and expands only the blocks an upper bound
cannot rule out, so one decision is O(n * grid) additions and small memory.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize

# Bet fractions of the mixture and their prior weights. Fixed in advance (not tuned to data),
# which is what makes the mixture valid. Equal weights on 32 evenly spaced fractions: measured
# against Beta-shaped, log-spaced and top-heavy priors (README), none was better on every
# generator, and 32 points cost less than the earlier 40 with the same results.
BET_FRACTIONS: np.ndarray = (np.arange(32, dtype=np.float64) + 0.5) / 32.0
BET_LOG_WEIGHTS: np.ndarray = np.full(BET_FRACTIONS.size, -math.log(BET_FRACTIONS.size))

# The four one-sided tests behind every label: (null boundary as a function of the margin,
# side). side=+1 tests "mean <= d0" (evidence the mean is above d0); side=-1 tests "mean >= d0".
TEST_NAMES = ("above_zero", "below_zero", "above_minus_margin", "below_plus_margin")

_BLOCK = 64


def test_boundaries(margin: float) -> tuple[tuple[float, int], ...]:
    """(d0, side) for each of :data:`TEST_NAMES`."""
    return ((0.0, +1), (0.0, -1), (-margin, +1), (margin, -1))


def bet_log_factors(values: np.ndarray, d0: float, side: int, fractions: np.ndarray | None = None) -> np.ndarray:
    """log(1 + f * scaled excess) for each value (any shape) and each bet fraction (last axis).

    Written in terms of D directly so that swapping head and base (D -> -D, d0 -> -d0,
    side -> -side) gives bit-identical factors.
    """
    fractions = BET_FRACTIONS if fractions is None else fractions
    values = np.asarray(values, dtype=np.float64)
    if side > 0:
        scaled = (values - d0) / (1.0 + d0)
    else:
        scaled = (d0 - values) / (1.0 - d0)
    return np.log1p(scaled[..., None] * fractions)


def mixture_log_wealth(cumulative_log_factors: np.ndarray, log_weights: np.ndarray | None = None) -> np.ndarray:
    """log of the prior-weighted mixture over the last axis (bet fractions)."""
    if log_weights is None:
        k = cumulative_log_factors.shape[-1]
        log_weights = BET_LOG_WEIGHTS if k == BET_LOG_WEIGHTS.size else np.full(k, -math.log(k))
    shifted = cumulative_log_factors + log_weights
    top = shifted.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    return top[..., 0] + np.log(np.exp(shifted - top).sum(axis=-1))


def log_wealth_path(deltas: np.ndarray, d0: float, side: int) -> np.ndarray:
    """log M_t for t = 1..n over a sequence of paired differences (consumed in order).

    The full path (n x grid); decisions use :func:`scan` instead, which does not build it."""
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


# Differences are rounded toward each test's null to this grid (values already on it, such as
# binary scores, halves, quarters or eighths, stay exact; 1/3 of averaged epochs loses < 1/512).
# A difference rounded toward the null can only lower the capital of a test against that
# null, so every test stays valid; the gain is that each log factor is computed once per
# distinct rounded value (at most 1,025) instead of once per pair.
GRID = 512


# The interval is found by root finding (a dozen evaluations per side), on a coarser grid: it
# is wider by at most 1/128, never narrower than the tests' own evidence (a coarser rounding
# toward the null only lowers the capital).
INTERVAL_GRID = 128


def _rounded(deltas: np.ndarray, side: int, grid: int = GRID) -> np.ndarray:
    """D rounded toward the null of a side's test: down for side +1, up for side -1 (the
    tolerance absorbs float noise, so 0.1 - 0.6 stays -0.5)."""
    scaled = np.asarray(deltas, dtype=np.float64) * grid
    q = np.floor(scaled + 1e-7) if side > 0 else -np.floor(-scaled + 1e-7)
    return np.clip(q / grid, -1.0, 1.0)


class Compressed:
    """Paired differences as (distinct values, index per pair) for one side's tests: binary or
    few-epoch scores have a handful of distinct differences, continuous scores at most 1,025
    after rounding toward the null (:data:`GRID`)."""

    def __init__(self, deltas: np.ndarray, side: int, grid: int = GRID) -> None:
        self.deltas = np.asarray(deltas, dtype=np.float64)
        self.side = side
        self.values, inverse = np.unique(_rounded(self.deltas, side, grid), return_inverse=True)
        self.inverse = inverse.reshape(-1)
        self.counts = np.bincount(self.inverse, minlength=self.values.size).astype(np.float64)

    @property
    def n(self) -> int:
        return int(self.deltas.size)


class ScanResult:
    """One test's evidence over every prefix: first crossing, current and supremum e-value."""

    __slots__ = ("crossing", "final", "sup")

    def __init__(self, crossing: int, final: float, sup: float) -> None:
        self.crossing = crossing  # 1-based prefix of the first crossing, 0 when never
        self.final = final  # log mixture after all pairs
        self.sup = sup  # log of the largest mixture over prefixes (0 with no pairs)


def _excess(values: np.ndarray, d0: float, side: int) -> np.ndarray:
    return (values - d0) / (1.0 + d0) if side > 0 else (d0 - values) / (1.0 - d0)


def scan(data: Compressed, d0: float, side: int, log_thr: float, *, want_sup: bool = False) -> ScanResult:
    """First crossing of ``log_thr`` (and optionally the supremum) of one test's mixture.

    Exact, without the n x bets array of running capitals: pairs are taken in fixed blocks of
    :data:`_BLOCK`. Each bet's capital at block starts comes from block sums; inside a block it
    is bounded above by start + f * (largest running sum of the scaled excess), because
    log(1 + f x) <= f x; and the mixture never exceeds its best bet. Only blocks whose bound
    reaches the value sought are expanded pair by pair. Blocks sit at fixed positions, so the
    value at a prefix does not depend on the pairs after it (a settled label stays settled).
    """
    n = data.n
    if n == 0:
        return ScanResult(0, 0.0, 0.0)
    if data.side != side:
        raise ValueError("data was rounded for the other side's tests")
    table = np.ascontiguousarray(bet_log_factors(data.values, d0, side).T)  # (K, S)
    nb = -(-n // _BLOCK)
    pad = nb * _BLOCK - n
    index = np.concatenate([data.inverse, np.full(pad, -1)]) if pad else data.inverse
    factors = np.concatenate([table, np.zeros((table.shape[0], 1))], axis=1)[:, index]  # (K, nb*B); pad -> 0
    blocks = factors.reshape(table.shape[0], nb, _BLOCK)
    starts = np.zeros((table.shape[0], nb))
    np.cumsum(blocks[:, :-1, :].sum(axis=2), axis=1, out=starts[:, 1:])
    excess = np.concatenate([_excess(data.values, d0, side), [0.0]])[index].reshape(nb, _BLOCK)
    best_run = np.cumsum(excess, axis=1).max(axis=1)  # (nb,) largest running sum inside each block
    upper = (starts + BET_FRACTIONS[:, None] * best_run[None, :]).max(axis=0) + 1e-9 * _BLOCK  # (nb,)
    weights = BET_LOG_WEIGHTS[:, None]

    def expand(b: int) -> np.ndarray:
        """log mixture at every prefix inside block b."""
        stop = min(n - b * _BLOCK, _BLOCK)
        part = starts[:, b : b + 1] + np.cumsum(blocks[:, b, :stop], axis=1) + weights
        peak = part.max(axis=0)
        return peak + np.log(np.exp(part - peak).sum(axis=0))

    crossing = 0
    for b in np.flatnonzero(upper >= log_thr):
        hit = np.flatnonzero(expand(int(b)) >= log_thr)
        if hit.size:
            crossing = int(b) * _BLOCK + int(hit[0]) + 1
            break
    last = expand(nb - 1)
    final = float(last[-1])
    sup = 0.0
    if want_sup:
        best = max(0.0, float(last.max()))
        for b in np.argsort(-upper, kind="stable"):
            if upper[b] <= best:
                break
            best = max(best, float(expand(int(b)).max()))
        sup = best
    return ScanResult(crossing, final, sup)


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


_EDGE = 1.0 - 1e-9


def _final_log_wealth(values: np.ndarray, counts: np.ndarray, d0: float, side: int) -> float:
    return float(mixture_log_wealth(counts @ bet_log_factors(values, d0, side)))


def _bound(data: Compressed, side: int, log_thr: float) -> float:
    """Edge of the set of d0 rejected by the side's test at the current look, reported on the
    rejected side (so rounding never widens a claim). -1 (+1 for side -1) when none is."""
    values, counts = data.values, data.counts

    def excess(d0: float) -> float:
        return _final_log_wealth(values, counts, d0, side) - log_thr

    outer = -_EDGE if side > 0 else _EDGE
    if excess(outer) < 0:
        return -1.0 if side > 0 else 1.0
    mean = float(counts @ values / counts.sum())
    inner = mean if excess(mean) < 0 else (_EDGE if side > 0 else -_EDGE)
    if excess(inner) >= 0:  # cannot happen for D in [-1, 1]; keep the claim bounded
        return inner
    # The mixture decreases as d0 moves inward, so the rejected set is an interval from the edge.
    root = optimize.brentq(excess, outer, inner, xtol=2e-6, rtol=1e-12, maxiter=100)
    step = 2e-6 if side > 0 else -2e-6
    candidate = root - step
    while excess(candidate) < 0:  # step back onto the rejected side
        candidate -= step
        step *= 2
    return float(candidate)


def interval_at(deltas: np.ndarray, log_thr: float) -> tuple[float, float]:
    """The confidence sequence (lo, hi) after all of ``deltas``: the d0 not rejected by either
    one-sided mixture test at this look."""
    deltas = np.asarray(deltas, dtype=np.float64)
    if deltas.size == 0:
        return (-1.0, 1.0)
    up, down = Compressed(deltas, +1, INTERVAL_GRID), Compressed(deltas, -1, INTERVAL_GRID)
    return _bound(up, +1, log_thr), _bound(down, -1, log_thr)


def interval_path(
    deltas: np.ndarray, log_thr: float, looks: np.ndarray | None = None, margin: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Confidence sequence bounds (lo, hi) at each look (prefix length), as running intersections
    over the given looks (any set of looks gives a valid interval)."""
    deltas = np.asarray(deltas, dtype=np.float64)
    n = deltas.size
    looks = np.arange(1, n + 1) if looks is None else np.asarray(looks, dtype=np.int64)
    lo = np.empty(looks.size)
    hi = np.empty(looks.size)
    run_lo, run_hi = -1.0, 1.0
    for j, t in enumerate(looks):
        a, b = interval_at(deltas[: int(t)], log_thr)
        run_lo, run_hi = max(run_lo, a), min(run_hi, b)
        lo[j], hi[j] = run_lo, run_hi
    return lo, hi
