"""Group-sequential sign tests at the planned looks (the directional labels' main evidence).

The windows are fixed in advance (``_schedule``), so the looks at which a task can stop are
known before any pair is seen: the pair counts at the window ends up to the design horizon H
(the request's cap, or the dataset when it is smaller). A test that is valid at exactly
those looks spends its error over them (Lan & DeMets 1983) instead of guarding every
conceivable look as an e-process must, and is much more powerful near the horizon.

Per look k (n_k pairs) each one-sided test may have spent alpha * share(n_k) of its error,
where the spending shape ``share`` (Lan & DeMets 1983) is fixed with the design. The default
(:class:`TwoPhaseSpending`) is aimed at the two operating points the product promises: a
difference of 0.2 settled by 64 pairs, and 0.1 found within the cap. It spends 35% of the error
by 64 pairs (shaped t^3, so little goes to the first looks, which only very large effects
need) and the rest towards the horizon (again shaped t^3). Against the power family
alpha * t^rho (Kim & DeMets 1987), the former default with rho = 0.75, it has both more power
at 0.1 and more tasks settled by 64 pairs at 0.2 on every binary generator of the benchmark
(README, ``python -m bench stats --spending``). The forecast also needs the normal
boundaries z_k of a standardized sum with the same spending, solved look by look by recursive
numerical integration of the sub-density of the sum that has not crossed yet (Armitage,
McPherson & Rowe 1969; Jennison & Turnbull 2000, ch. 19).

The statistic is a sign test on discordant pairs. A difference D in [-1, 1] is first reduced
to B in {-1, 0, +1}: B = sign(D) with probability |D|, else 0 (E[B | D] = D, so E[B] = E[D];
binary scores are unchanged: B = D). The uniforms come from a fixed stream, one per position,
drawn independently of the scores. Under "E[D] <= 0" the inputs are exchangeable in the seeded
order and each discordant B is +1 with probability <= 1/2, independently of which pairs are
discordant; so given d_k discordant pairs the count of +1s is stochastically below
Binomial(d_k, 1/2), and P(Bin(d_k, 1/2) >= w_k) <= nu_k bounds the chance of that look's
rejection by nu_k exactly, whatever the ties, the skew or the heavy tails of D. The joint
chance over looks follows the normal boundary computation (the symmetric +-1 walk is close to
Brownian; checked exactly in the tests and by simulation in ``bench/stats.py``).

Beyond the horizon (``/eval more`` raising the cap) the spending is used up and these tests
make no further claim; the reserved share of alpha (``1 - GS_SHARE``) belongs to the anytime-
valid betting e-process (``_sequence``), which runs at every pair, so the rule actually used
stays valid at any stopping time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import optimize, special
from scipy import stats as sps

from evalrunner_assets.stats._schedule import window_schedule

# Share of each one-sided test's level alpha/(2T) spent over the planned looks; the rest is
# the e-process's, at every pair and past the horizon. Chosen by measurement (README).
GS_SHARE = 0.9


@dataclass(frozen=True)
class PowerSpending:
    """alpha * t^rho with t = n / H (Kim & DeMets 1987): rho = 1 spends evenly over
    information (close to Pocock's boundary), rho = 3 is close to O'Brien-Fleming, a smaller
    rho spends more early. Kept for the benchmark's comparisons and the tests."""

    rho: float

    def share(self, pairs: np.ndarray, horizon: int) -> np.ndarray:
        return np.minimum(np.asarray(pairs, dtype=np.float64) / horizon, 1.0) ** self.rho


@dataclass(frozen=True)
class TwoPhaseSpending:
    """``knee_share`` of the error by the knee (``knee_pairs``, or a quarter of a smaller
    horizon), shaped (n / knee)^early_rho, and the rest between the knee and the horizon,
    shaped ((n - knee) / (H - knee))^late_rho. The knee is a pair count, not a share of the
    horizon, so that a larger cap does not delay the verdict on a large difference."""

    knee_pairs: int = 64
    knee_share: float = 0.35
    early_rho: float = 3.0
    late_rho: float = 3.0

    def share(self, pairs: np.ndarray, horizon: int) -> np.ndarray:
        n = np.minimum(np.asarray(pairs, dtype=np.float64), horizon)
        knee = min(float(self.knee_pairs), horizon / 4.0)
        early = self.knee_share * (np.minimum(n, knee) / knee) ** self.early_rho
        late = (1.0 - self.knee_share) * (np.maximum(n - knee, 0.0) / (horizon - knee)) ** self.late_rho
        return early + late


Spending = PowerSpending | TwoPhaseSpending

# Chosen by measurement (README, ``python -m bench stats --spending``): of the shapes compared it
# meets both targets (power >= 70% at delta = 0.1, half the tasks settled by 64 pairs at 0.2) on
# the noisiest binary generators; against alpha * t^0.75, the former default, power at 0.1 is
# 4-5 points higher and 2-3 points more tasks settle by 64 pairs at 0.2.
SPENDING: Spending = TwoPhaseSpending()

# A look whose share of alpha is below this gets no boundary (z = +inf).
_TINY = 1e-14
# Sub-densities are carried on [-_SPAN * sd, boundary]; mass below -8 sd is < 1e-15.
_SPAN = 8.0
# Grid points per standard deviation of the smaller neighbouring increment.
_PER_SD = 8.0


def design_horizon(cap: int, dataset_size: int | None = None) -> int:
    """H: the pairs at which the spending is complete (the design cap, or a smaller dataset)."""
    return cap if dataset_size is None or dataset_size <= 0 else min(cap, dataset_size)


def design_looks(horizon: int, min_pairs: int) -> tuple[int, ...]:
    """Pair counts at which the tests look: the window ends of the schedule up to the horizon,
    from ``min_pairs`` on (an earlier window end looks at ``min_pairs`` instead)."""
    ends = [stop for _, stop in window_schedule(horizon)]
    looks = sorted({max(e, min_pairs) for e in ends if max(e, min_pairs) <= horizon})
    return tuple(looks)


def spent(looks: tuple[int, ...], horizon: int, alpha: float, spending: Spending = SPENDING) -> np.ndarray:
    """Cumulative error alpha * share(n_k) allowed by each look."""
    return alpha * spending.share(np.asarray(looks, dtype=np.float64), horizon)


def _simpson(m: int) -> np.ndarray:
    """Composite Simpson weights for m (odd) equally spaced points, spacing 1."""
    w = np.ones(m)
    w[1:-1:2] = 4.0
    w[2:-1:2] = 2.0
    return w / 3.0


@lru_cache(maxsize=64)
def z_boundaries(
    looks: tuple[int, ...], horizon: int, alpha: float, spending: Spending = SPENDING
) -> tuple[float, ...]:
    """One-sided boundaries z_k on S_k / sqrt(n_k) (S a sum of independent unit-variance
    increments, one per pair) with P(S_j / sqrt(n_j) >= z_j for some j <= k) = alpha share(n_k)
    under a zero mean. +inf for a look with nothing left to spend."""
    if not looks:
        return ()
    if any(b <= a for a, b in zip(looks, looks[1:])) or looks[0] <= 0:
        raise ValueError(f"looks must be increasing positive pair counts, got {looks!r}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    target = spent(looks, horizon, alpha, spending)
    increments = np.diff(np.concatenate([[0.0], target]))
    t = np.asarray(looks, dtype=np.float64)
    gaps = np.diff(np.concatenate([[0.0], t]))
    out: list[float] = []
    # Sub-density of S at the previous look on its grid (points x, weights w * density).
    x = np.zeros(0)
    mass = np.zeros(0)
    for k in range(len(looks)):
        sd_k = math.sqrt(t[k])
        step = math.sqrt(gaps[k])

        def cross(
            z: float, k: int = k, x: np.ndarray = x, mass: np.ndarray = mass, sd: float = sd_k, s: float = step
        ) -> float:
            """P(not crossed before, crossed at look k) for boundary z."""
            if k == 0:
                return float(sps.norm.sf(z))
            return float(mass @ sps.norm.sf((z * sd - x) / s))

        share = float(increments[k])
        if share <= _TINY:
            z = math.inf
        else:
            lo, hi = -2.0, 40.0
            if cross(lo) <= share:  # cannot happen for shares below alpha < 1; keep a bound
                z = lo
            else:
                z = float(optimize.brentq(lambda v, s=share: cross(v) - s, lo, hi, xtol=1e-10, rtol=1e-12))
        out.append(z)
        if k + 1 == len(looks):
            break
        # Carry the not-crossed sub-density to this look's grid.
        nxt = math.sqrt(gaps[k + 1])
        h = min(step, nxt) / _PER_SD
        top = min(z, _SPAN + 4.0) * sd_k
        bottom = -_SPAN * sd_k
        m = int(math.ceil((top - bottom) / h)) // 2 * 2 + 1
        m = max(m, 33)
        y = np.linspace(bottom, top, m)
        weights = _simpson(m) * (y[1] - y[0])
        if k == 0:
            density = sps.norm.pdf(y / sd_k) / sd_k
        else:
            density = (mass[None, :] * sps.norm.pdf((y[:, None] - x[None, :]) / step)).sum(axis=1) / step
        x, mass = y, weights * density
    return tuple(out)


# The fixed uniform stream of the randomized reduction D -> B (one value per position).
_UNIFORM_SEED = 20240601
_uniforms = np.random.default_rng(_UNIFORM_SEED).random(8192)


def _uniform_stream(n: int) -> np.ndarray:
    global _uniforms
    if n > _uniforms.size:
        size = 1 << (n - 1).bit_length()
        _uniforms = np.random.default_rng(_UNIFORM_SEED).random(size)
    return _uniforms[:n]


def signs(deltas: np.ndarray) -> np.ndarray:
    """B in {-1, 0, +1} with E[B | D] = D (last axis = pairs in order): sign(D) when the
    position's uniform is below |D|. Binary differences come back unchanged."""
    d = np.asarray(deltas, dtype=np.float64)
    u = _uniform_stream(d.shape[-1])
    return np.where(u < np.abs(d), np.sign(d), 0.0)


# Mass of Binomial(m, 1/2) beyond this many standard deviations from m/2 is < 1e-40; the
# recursion drops it (only the lower side is dropped for good: the upper side is absorbed).
_TAIL_SD = 14.0


def _binomial_half_pmf(m: int, lo: int, hi: int) -> np.ndarray:
    """P(Binomial(m, 1/2) = j) for j = lo..hi."""
    j = np.arange(lo, hi + 1, dtype=np.float64)
    return np.exp(special.gammaln(m + 1.0) - special.gammaln(j + 1.0) - special.gammaln(m - j + 1.0) - m * _LOG2)


_LOG2 = math.log(2.0)
# Spend a hair less than allowed, so that a tail equal to the budget (dyadic spending values
# meet dyadic binomial tails) is decided the same way by both recursions despite rounding.
_SAFE = 1.0 - 1e-9


def sign_boundaries(discordant: np.ndarray, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact boundaries of the one-sided sign test at each look, given the discordant counts.

    ``discordant``: d_k, non-decreasing counts of discordant pairs at the looks; ``allowed``:
    the cumulative error each look may have spent. Under the null each discordant pair is
    "up" with probability 1/2 independently (conditionally on which pairs are discordant), so
    the count W_k of ups is a binomial walk; c_k is the smallest count with
    P(W_j >= c_j for some j <= k) <= allowed_k, computed exactly by carrying the distribution
    of the walks that have not crossed (error a look leaves unspent carries to the next).
    Returns (c_k, exact cumulative error spent); c_k = d_k + 1 when no count can reject."""
    d = np.asarray(discordant, dtype=np.int64)
    out = np.empty(d.size, dtype=np.int64)
    spent_so_far = np.empty(d.size)
    dist = np.ones(1)  # P(W = offset + i, not crossed)
    offset = 0
    crossed = 0.0
    prev = 0
    for k in range(d.size):
        m = int(d[k] - prev)
        if m < 0:
            raise ValueError(f"discordant counts must not decrease, got {d.tolist()!r}")
        if m:
            half_width = int(_TAIL_SD * 0.5 * math.sqrt(m)) + 1
            lo, hi = max(0, m // 2 - half_width), min(m, m // 2 + half_width + 1)
            dist = np.convolve(dist, _binomial_half_pmf(m, lo, hi))
            offset += lo
            # drop the far lower tail (mass < 1e-40) so the support stays ~ 14 sd wide
            keep_from = max(0, int(d[k] / 2 - _TAIL_SD * 0.5 * math.sqrt(d[k])) - offset)
            if keep_from:
                dist = dist[keep_from:]
                offset += keep_from
            prev = int(d[k])
        tail = np.cumsum(dist[::-1])[::-1]  # tail[i] = P(W >= offset + i, not crossed)
        budget = (float(allowed[k]) - crossed) * _SAFE
        over = int(np.count_nonzero(tail > budget))
        c = offset + over
        if over < dist.size:
            crossed += float(tail[over])
            dist = dist[:over].copy() if over else np.zeros(1)
        out[k] = min(c, int(d[k]) + 1)
        spent_so_far[k] = crossed
    return out, spent_so_far


def sign_boundaries_batch(discordant: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """:func:`sign_boundaries` for many paths at once (rows of ``discordant``), by adding one
    discordant pair at a time to a dense distribution (the benchmark's form)."""
    d = np.asarray(discordant, dtype=np.int64)
    paths, looks = d.shape
    width = int(d.max(initial=0)) + 2
    dist = np.zeros((paths, width))
    dist[:, 0] = 1.0
    crossed = np.zeros(paths)
    out = np.empty((paths, looks), dtype=np.int64)
    prev = np.zeros(paths, dtype=np.int64)
    for k in range(looks):
        inc = d[:, k] - prev
        for j in range(int(inc.max(initial=0))):
            grow = (inc > j)[:, None]
            shifted = np.concatenate([np.zeros((paths, 1)), dist[:, :-1]], axis=1)
            dist = np.where(grow, 0.5 * (dist + shifted), dist)
        prev = d[:, k]
        tail = np.cumsum(dist[:, ::-1], axis=1)[:, ::-1]
        budget = (allowed[k] - crossed) * _SAFE
        c = np.count_nonzero(tail > budget[:, None], axis=1)
        padded = np.concatenate([tail, np.zeros((paths, 1))], axis=1)
        crossed += padded[np.arange(paths), c]
        dist = np.where(np.arange(width)[None, :] < c[:, None], dist, 0.0)
        out[:, k] = np.minimum(c, d[:, k] + 1)
    return out


def first_rejections(deltas: np.ndarray, looks: tuple[int, ...], allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First look (pair count) at which "mean <= 0" resp. "mean >= 0" is rejected, 0 when never,
    over the last axis (one row per path). ``allowed``: cumulative error per look
    (:func:`spent`). Only looks within the pairs given are read."""
    b = signs(deltas)
    n = b.shape[-1]
    usable = [j for j, look in enumerate(looks) if look <= n]
    shape = b.shape[:-1]
    if not usable:
        return np.zeros(shape, dtype=np.int64), np.zeros(shape, dtype=np.int64)
    idx = np.array([looks[j] - 1 for j in usable])
    allowed = np.asarray(allowed, dtype=np.float64)[usable]
    plus = np.cumsum(b > 0, axis=-1)[..., idx]
    minus = np.cumsum(b < 0, axis=-1)[..., idx]
    disc = plus + minus
    if disc.ndim == 1:
        bound = sign_boundaries(disc, allowed)[0]
    else:
        flat = disc.reshape(-1, disc.shape[-1])
        bound = sign_boundaries_batch(flat, allowed).reshape(disc.shape)
    at = np.asarray([looks[j] for j in usable], dtype=np.int64)

    def first(count: np.ndarray) -> np.ndarray:
        hit = count >= bound
        return np.where(hit.any(axis=-1), at[hit.argmax(axis=-1)], 0)

    return first(plus), first(minus)
