"""Simulation evidence for the paired sequential statistics (the Statistics page, evalrunner_assets/stats/README.md).

Ground truth: simulated inputs with a known mean paired difference delta, consumed in the
pipeline's own window schedule (``stats.window_schedule``) up to the cap of 256 pairs.
Generators (each with an exact true delta):
  binary Beta(a,b)    per-input base pass rate p ~ Beta(a, b) (inputs differ in difficulty, so
                      head and base are correlated through it); the head fixes a share s of the
                      base's failures (q = p + s(1 - p)) or breaks a share of its passes
  near-deterministic  the same with Beta(.05, .05): almost every input always passes or always fails
  continuous          scores in [0, 1]: input quality m ~ Beta(2, 2), each arm's score ~ Beta(4m, 4(1-m));
                      the head moves its score a share s toward 1 (or toward 0)
  heterogeneous       binary, half the inputs get a new pass rate on head (z ~ Beta with mean
                      0.5 + 2 delta): per-input effects of both signs, even at delta = 0
  3 epochs            binary Beta(.5,.5), 3 epochs per input sharing the input's pass rate
                      (within-input correlation), averaged per input

Methods, run on the same simulated pairs:
  sequential   the library's rule (alpha/T two-sided per task): its group-sequential sign tests
               at the window ends (``_groupseq``, exact recursion per path) and its e-processes
               (``_sequence``, read at every pair), pairs counted in whole windows
  fixed-n 200  paired t interval once at 200 pairs (Bonferroni alpha/T)
  fixed-n 256  the same at the cap: about the most power any test using at most 256 pairs has
  peeking      paired t 95% interval after every window, stop when it excludes 0 or lies in
               +-margin -- the rule the Statistics page warns against

`python -m bench stats` runs the full evidence (2,000 repetitions per row, 40,000 null tasks
per generator); `--quick` 200; `--reps=N` any other count; `--priors` compares bet priors;
`--spending` compares the group-sequential share of alpha and spending exponents.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from evalrunner_assets.stats import Pairing, StatsParams, _posterior, decide_task, window_schedule
from evalrunner_assets.stats import _groupseq as gs
from evalrunner_assets.stats import _sequence as seq
from evalrunner_assets.stats._decide import Design, task_design

CAP = 256
FIXED_N = 200
T_RUN = (3, 20)


def window_ends(cap: int = CAP) -> np.ndarray:
    return np.array([stop for _, stop in window_schedule(cap)])


def pairs_run(settled_at: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Pairs sampled when a label settles at ``settled_at``: the end of the window holding it."""
    idx = np.searchsorted(ends, np.maximum(settled_at, 1))
    return ends[np.minimum(idx, ends.size - 1)]


# --- generators: (rng, delta, paths, pairs) -> D (paths, pairs) ------------------------------


def _binary_rates(
    rng: np.random.Generator, a: float, b: float, delta: float, shape: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    p = rng.beta(a, b, size=shape)
    mu = a / (a + b)
    if delta >= 0:
        share = delta / (1 - mu)
        q = p + share * (1 - p)
    else:
        share = -delta / mu
        q = p * (1 - share)
    if not 0 <= share <= 1:
        raise ValueError(f"delta {delta} is not reachable with mean pass rate {mu:.2f}")
    return p, q


def binary(a: float, b: float, epochs: int = 1) -> Callable[..., np.ndarray]:
    def gen(rng: np.random.Generator, delta: float, paths: int, pairs: int) -> np.ndarray:
        p, q = _binary_rates(rng, a, b, delta, (paths, pairs))
        return (rng.binomial(epochs, q) - rng.binomial(epochs, p)) / epochs

    return gen


def continuous(rng: np.random.Generator, delta: float, paths: int, pairs: int) -> np.ndarray:
    m = rng.beta(2.0, 2.0, size=(paths, pairs))
    base = rng.beta(4 * m + 1e-9, 4 * (1 - m) + 1e-9)
    head = rng.beta(4 * m + 1e-9, 4 * (1 - m) + 1e-9)
    share = abs(delta) / 0.5  # E[score] = 0.5
    head = head + share * (1 - head) if delta >= 0 else head * (1 - share)
    return head - base


def heterogeneous(rng: np.random.Generator, delta: float, paths: int, pairs: int) -> np.ndarray:
    p = rng.beta(0.5, 0.5, size=(paths, pairs))
    mean_new = 0.5 + 2 * delta  # half the inputs change: delta = 0.5 * (E[z] - E[p])
    z = rng.beta(2 * mean_new, 2 * (1 - mean_new), size=(paths, pairs))
    q = np.where(rng.random((paths, pairs)) < 0.5, z, p)
    return rng.binomial(1, q) - rng.binomial(1, p).astype(np.float64)


GENERATORS: dict[str, Callable[..., np.ndarray]] = {
    "binary Beta(.5,.5)": binary(0.5, 0.5),
    "binary Beta(2,2)": binary(2.0, 2.0),
    "near-deterministic": binary(0.05, 0.05),
    "continuous": continuous,
    "heterogeneous": heterogeneous,
    "3 epochs Beta(.5,.5)": binary(0.5, 0.5, epochs=3),
}
DELTAS = (0.0, 0.1, 0.2, -0.2)


# --- methods ----------------------------------------------------------------------------------


def crossings(
    d: np.ndarray,
    params: StatsParams,
    designs: dict[str, Design],
    prior: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, dict[str, np.ndarray]]:
    """First crossing of each test for each design (level), per path: the library's e-processes
    with its rounding toward each null (float32 running sums: a simulation shortcut), and for
    the two directional tests the earlier of that and the library's group-sequential sign test.
    ``prior``: (bet fractions, log weights) instead of the library's, to compare priors."""
    fractions, log_weights = prior if prior is not None else (seq.BET_FRACTIONS, seq.BET_LOG_WEIGHTS)
    out: dict[str, dict[str, np.ndarray]] = {k: {} for k in designs}
    for name, (d0, side) in zip(seq.TEST_NAMES, seq.test_boundaries(params.margin)):
        rounded = seq._rounded(d, side)
        values, inverse = np.unique(rounded, return_inverse=True)
        table = seq.bet_log_factors(values, d0, side, fractions).astype(np.float32)  # (S, K)
        cum = np.cumsum(table[inverse.reshape(d.shape)], axis=1)  # (P, n, K)
        log_w = seq.mixture_log_wealth(cum, log_weights)
        for key, design in designs.items():
            out[key][name] = seq.first_crossings(log_w, design.log_thrs[name])
    for key, design in designs.items():
        up, down = gs.first_rejections(d, design.looks, design.allowed)
        for name, hit in (("above_zero", up), ("below_zero", down)):
            e = out[key][name]
            out[key][name] = np.where((e > 0) & (hit > 0), np.minimum(e, hit), np.maximum(e, hit))
    return out


def sequential_labels(c: dict[str, np.ndarray], params: StatsParams) -> tuple[np.ndarray, np.ndarray]:
    code, at = seq.labels_from_crossings(
        c["above_zero"], c["below_zero"], c["above_minus_margin"], c["below_plus_margin"], params.min_pairs
    )
    code = np.where((at > 0) & (at <= CAP), code, seq.CONTINUE)
    code = np.where(code == seq.CONTRADICTED, seq.CONTINUE, code)
    return code, np.where(code != seq.CONTINUE, at, 0)


def fixed_n_labels(d: np.ndarray, n: int, alpha: float, margin: float) -> np.ndarray:
    x = d[:, :n]
    mean, sd = x.mean(axis=1), x.std(axis=1, ddof=1)
    half = sps.t.ppf(1 - alpha / 2, n - 1) * sd / math.sqrt(n)
    lo, hi = mean - half, mean + half
    code = np.full(d.shape[0], seq.CONTINUE)
    code = np.where((lo > -margin) & (hi < margin), seq.UNCHANGED, code)
    code = np.where(lo > 0, seq.IMPROVED, code)
    return np.where(hi < 0, seq.REGRESSED, code)


def peeking_labels(d: np.ndarray, ends: np.ndarray, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """Paired t 95% after every window; the first window whose interval excludes 0 or lies in +-margin."""
    csum, csq = np.cumsum(d, axis=1), np.cumsum(d * d, axis=1)
    code = np.full(d.shape[0], seq.CONTINUE)
    at = np.zeros(d.shape[0], dtype=np.int64)
    for t in ends:
        if t < 2:
            continue
        mean = csum[:, t - 1] / t
        var = np.maximum(csq[:, t - 1] / t - mean**2, 0.0) * t / (t - 1)
        half = sps.t.ppf(0.975, t - 1) * np.sqrt(var / t)
        new = np.full(d.shape[0], seq.CONTINUE)
        new = np.where((mean - half > -margin) & (mean + half < margin), seq.UNCHANGED, new)
        new = np.where(mean - half > 0, seq.IMPROVED, new)
        new = np.where(mean + half < 0, seq.REGRESSED, new)
        fresh = (code == seq.CONTINUE) & (new != seq.CONTINUE)
        code = np.where(fresh, new, code)
        at = np.where(fresh, t, at)
    return code, at


# --- summaries --------------------------------------------------------------------------------


def upper95(k: int, n: int) -> float:
    """Clopper-Pearson one-sided 95% upper bound of a binomial rate."""
    return 1.0 if k >= n else float(sps.beta.ppf(0.95, k + 1, n - k))


@dataclass
class Row:
    generator: str
    delta: float
    method: str
    n: int
    improved: int
    regressed: int
    unchanged: int
    median_run: float
    mean_run: float
    overshoot: float

    def rate(self, k: int) -> float:
        return k / self.n

    @property
    def right(self) -> int:
        return self.improved if self.delta > 0 else self.regressed if self.delta < 0 else self.unchanged

    @property
    def false(self) -> int:
        if self.delta == 0:
            return self.improved + self.regressed
        return self.regressed + self.unchanged if self.delta > 0 else self.improved + self.unchanged


def summarize(
    generator: str, delta: float, method: str, code: np.ndarray, run: np.ndarray, settled: np.ndarray | None
) -> Row:
    right_code = seq.IMPROVED if delta > 0 else seq.REGRESSED if delta < 0 else seq.UNCHANGED
    right = code == right_code
    decided = code != seq.CONTINUE
    over = float("nan")
    if settled is not None and decided.any():
        over = float(np.mean(run[decided] / settled[decided]))
    return Row(
        generator,
        delta,
        method,
        code.size,
        int(np.sum(code == seq.IMPROVED)),
        int(np.sum(code == seq.REGRESSED)),
        int(np.sum(code == seq.UNCHANGED)),
        float(np.median(run[right])) if right.any() else float("nan"),
        float(np.mean(run)),
        over,
    )


def _pct(x: float) -> str:
    return "    -" if isinstance(x, float) and math.isnan(x) else f"{100 * x:5.1f}%"


def print_rows(rows: list[Row]) -> None:
    head = (
        f"{'generator':<22}{'delta':>6}  {'method':<26}{'improved':>9}{'regressed':>10}{'unchanged':>10}"
        f"{'false':>8}{'(95% ub)':>9}{'power':>8}{'median':>7}{'mean':>7}{'oversh.':>8}{'n':>7}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        med = "     -" if math.isnan(r.median_run) else f"{r.median_run:6.0f}"
        over = "      -" if math.isnan(r.overshoot) else f"{r.overshoot:7.3f}"
        power = float("nan") if r.delta == 0 else r.rate(r.right)
        print(
            f"{r.generator:<22}{r.delta:>+6.2f}  {r.method:<26}{_pct(r.rate(r.improved)):>9}{_pct(r.rate(r.regressed)):>10}"
            f"{_pct(r.rate(r.unchanged)):>10}{_pct(r.rate(r.false)):>8}{_pct(upper95(r.false, r.n)):>9}{_pct(power):>8}"
            f"{med:>7}{r.mean_run:7.1f}{over:>8}{r.n:>7}"
        )


# --- P(improvement) at null stops ------------------------------------------------------------


def p_improvement_at_stops(
    d: np.ndarray, code: np.ndarray, run: np.ndarray, params: StatsParams, limit: int
) -> tuple[int, int, int, int]:
    """(reported > 0.95, posterior > 0.95 regardless of label, stops looked at, inconclusive
    stops with posterior > 0.95). Reported: the library's rule (only beside a directional
    label); the posterior column is what showing it everywhere would print."""
    reported = shown_anyway = inconclusive_high = 0
    count = min(limit, d.shape[0])
    for i in range(count):
        stop = int(run[i]) if code[i] != seq.CONTINUE else CAP
        post = _posterior.summarize(d[i, :stop], params.margin).p_improvement
        if post > 0.95:
            shown_anyway += 1
            if code[i] == seq.CONTINUE:
                inconclusive_high += 1
            if code[i] in (seq.IMPROVED, seq.REGRESSED):
                reported += 1
    return reported, shown_anyway, count, inconclusive_high


# --- decision cost ----------------------------------------------------------------------------


def decision_cost(n: int = 4096, repeats: int = 30) -> list[tuple[str, float, float, float]]:
    """(case, min ms, median ms, peak MB) of one decide_task call on n pairs (CPU time, so a
    shared machine's other load does not count)."""
    rng = np.random.default_rng(7)
    cases = {
        "binary, undecided (cap 8192, forecast)": (
            rng.binomial(1, 0.5, n).astype(float),
            rng.binomial(1, 0.5, n).astype(float),
            8192,
        ),
        "binary, improved": (rng.binomial(1, 0.6, n).astype(float), rng.binomial(1, 0.5, n).astype(float), 8192),
        "continuous, undecided (cap 8192, forecast)": (
            rng.random(n),
            np.clip(rng.random(n) + rng.normal(0, 0.001, n), 0, 1),
            8192,
        ),
        "continuous, improved": (np.clip(rng.random(n) + 0.1, 0, 1), rng.random(n), 8192),
        "3 epochs, at cap (4096)": (rng.binomial(3, 0.5, n) / 3, rng.binomial(3, 0.5, n) / 3, 4096),
    }
    out = []
    for name, (head, base, cap) in cases.items():
        pairing = Pairing.from_scores(head.tolist(), base.tolist())
        params = StatsParams(cap=cap)
        decide_task(pairing, params, 1, at_cap=cap <= n)
        times = []
        for _ in range(repeats):
            t0 = time.process_time()
            decide_task(pairing, params, 1, at_cap=cap <= n)
            times.append(time.process_time() - t0)
        tracemalloc.start()
        decide_task(pairing, params, 1, at_cap=cap <= n)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        out.append((name, 1e3 * min(times), 1e3 * float(np.median(times)), peak / 1e6))
    return out


def all_tie_pairs_to_unchanged(margin: float, n_tasks: int, params: StatsParams, horizon: int = 2000) -> int | str:
    """Pairs after which an all-tie task settles "unchanged" (first crossing of both margin tests)."""
    zeros = np.zeros(horizon)
    thr = seq.log_threshold(params.alpha, n_tasks)
    code, at = seq.labels_from_crossings(
        np.array(0),
        np.array(0),
        seq.first_crossings(seq.log_wealth_path(zeros, -margin, +1), thr),
        seq.first_crossings(seq.log_wealth_path(zeros, margin, -1), thr),
        params.min_pairs,
    )
    return int(at) if int(code) == seq.UNCHANGED else f">{horizon}"


def _prior(fractions: np.ndarray, weights: np.ndarray | None = None, top: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(fractions, log weights): ``weights`` (default equal) scaled to 1 - top, plus ``top`` at 0.99."""
    w = np.ones(fractions.size) if weights is None else np.asarray(weights, dtype=np.float64)
    w = (1 - top) * w / w.sum()
    if top:
        fractions, w = np.append(fractions, 0.99), np.append(w, top)
    return fractions, np.log(w)


def compare_priors(reps: int, seed: int) -> None:
    """The bet prior under the same rule: power at 0.1, median pairs at +-0.2, all-tie 'unchanged'."""
    params = StatsParams(cap=CAP)
    ends = window_ends()
    mid = (np.arange(32) + 0.5) / 32
    priors = {
        "equal, 40 points (before)": _prior(np.arange(1, 41) / 41.0),
        "equal, 32 points (chosen)": _prior(mid),
        "Beta(1.5,3) density": _prior(mid, sps.beta.pdf(mid, 1.5, 3)),
        "Beta(1.5,3) + 25% at 0.99": _prior(mid, sps.beta.pdf(mid, 1.5, 3), top=0.25),
        "Beta(1.2,2) + 20% at 0.99": _prior(mid, sps.beta.pdf(mid, 1.2, 2), top=0.2),
        "log-spaced 0.01-0.99": _prior(np.geomspace(0.01, 0.99, 32)),
    }
    thr = {"T=1": task_design(params, 1)}
    print(
        f"\n## Bet priors under the same rule (T = 1, cap {CAP}, {reps} reps per cell): power at +0.1 / median pairs at +0.2, -0.2"
    )
    for name, prior in priors.items():
        cells = []
        for gname in ("binary Beta(.5,.5)", "binary Beta(2,2)", "heterogeneous"):
            rng = np.random.default_rng(seed)
            out = []
            for delta in (0.1, 0.2, -0.2):
                d = GENERATORS[gname](rng, delta, reps, CAP)
                code, at = sequential_labels(crossings(d, params, thr, prior)["T=1"], params)
                right = code == (seq.IMPROVED if delta > 0 else seq.REGRESSED)
                run = pairs_run(at, ends)
                out.append(
                    f"{100 * right.mean():.0f}%"
                    if delta == 0.1
                    else f"{np.median(run[right]) if right.any() else float('nan'):.0f}"
                )
            cells.append(f"{gname}: {out[0]} / {out[1]}, {out[2]}")
        fractions, log_weights = prior
        ties = []
        for t in (1, 3, 20):
            path = seq.mixture_log_wealth(
                np.cumsum(seq.bet_log_factors(np.zeros(600), -params.margin, +1, fractions), axis=0), log_weights
            )
            ties.append(int(seq.first_crossings(path, seq.log_threshold(params.alpha, t))))
        print(f"{name:<28} " + " | ".join(cells) + f" | all ties 'unchanged' at T=1/3/20: {'/'.join(map(str, ties))}")


# (label, share of alpha/(2T) for the sign tests, spending shape)
SPENDING_CHOICES: tuple[tuple[str, float, gs.Spending], ...] = (
    ("t^0.6", 0.9, gs.PowerSpending(0.6)),
    ("t^0.75 (the former default)", 0.9, gs.PowerSpending(0.75)),
    ("t^1.25", 0.9, gs.PowerSpending(1.25)),
    ("25% by 64 (t^3), t^3 after", 0.9, gs.TwoPhaseSpending(knee_share=0.25)),
    ("35% by 64 (t^3), t^3 after (chosen)", 0.9, gs.TwoPhaseSpending()),
    ("45% by 64 (t^3), t^3 after", 0.9, gs.TwoPhaseSpending(knee_share=0.45)),
    ("35% by 64 (t^1.5), t^3 after", 0.9, gs.TwoPhaseSpending(early_rho=1.5)),
    ("35% by 64 (t^3), t^6 after", 0.9, gs.TwoPhaseSpending(late_rho=6.0)),
    ("35% by 64 (t^3), t^3 after, share 0.95", 0.95, gs.TwoPhaseSpending()),
)
# Binary Beta(a, a) pass rates from less to more noisy (a = 0.5 is the table's Beta(.5,.5),
# a = 2 its Beta(2,2)): the noisiest one on which both item-2 targets hold is how a spending
# shape is chosen, so that the choice is not tuned to one generator.
NOISE_LADDER = (0.5, 0.65, 0.8, 1.0, 1.3)


def _power_and_settled_by_64(
    gen: Callable[..., np.ndarray], design: Design, params: StatsParams, reps: int, seed: int
) -> tuple[float, float]:
    """Share of tasks IMPROVED within the cap at +0.1, and IMPROVED after at most 64 pairs run
    at +0.2 (a median of at most 64 pairs needs the latter >= 1/2)."""
    rng = np.random.default_rng(seed)
    code, _ = sequential_labels(crossings(gen(rng, 0.1, reps, CAP), params, {"x": design})["x"], params)
    power = float(np.mean(code == seq.IMPROVED))
    code, at = sequential_labels(crossings(gen(rng, 0.2, reps, CAP), params, {"x": design})["x"], params)
    by_64 = float(np.mean((code == seq.IMPROVED) & (pairs_run(at, window_ends()) <= 64)))
    return power, by_64


def compare_spending(reps: int, seed: int) -> None:
    """The group-sequential share of alpha and spending shape under the same rule: false
    directional labels at delta = 0, power at +0.1 and median pairs at +-0.2 (T = 1)."""
    params = StatsParams(cap=CAP)
    ends = window_ends()
    print(
        f"\n## Spending under the same rule (T = 1, cap {CAP}, {reps} reps per cell, {2 * reps} null tasks): "
        "false at 0 / power at +0.1 / median pairs at +0.2, -0.2"
    )
    for label, share, spending in SPENDING_CHOICES:
        design = task_design(params, 1, share=share, spending=spending)
        cells = []
        for gname in GENERATORS:
            rng = np.random.default_rng(seed)
            out = []
            for delta in (0.0, 0.1, 0.2, -0.2):
                d = GENERATORS[gname](rng, delta, 2 * reps if delta == 0 else reps, CAP)
                code, at = sequential_labels(crossings(d, params, {"x": design})["x"], params)
                if delta == 0:
                    out.append(f"{100 * np.mean((code == seq.IMPROVED) | (code == seq.REGRESSED)):.1f}%")
                    continue
                right = code == (seq.IMPROVED if delta > 0 else seq.REGRESSED)
                run = pairs_run(at, ends)
                out.append(
                    f"{100 * right.mean():.0f}%"
                    if delta == 0.1
                    else f"{np.median(run[right]) if right.any() else float('nan'):.0f}"
                )
            cells.append(f"{gname}: {out[0]} / {out[1]} / {out[2]}, {out[3]}")
        print(f"{label:<32} " + " | ".join(cells), flush=True)
        ladder = []
        noisiest = "none"
        for a in NOISE_LADDER:
            power, by_64 = _power_and_settled_by_64(binary(a, a), design, params, reps, seed)
            ladder.append(f"a={a:g}: {100 * power:.1f}% / {100 * by_64:.0f}%")
            if power >= 0.70 and by_64 >= 0.5:
                noisiest = f"a={a:g}"
        print(
            f"{'':<32} Beta(a,a) power at +0.1 / settled correctly by 64 at +0.2: "
            + " | ".join(ladder)
            + f" | noisiest meeting both: {noisiest}",
            flush=True,
        )
    # The same looks and spending (all of alpha/(2T)) with a paired t statistic instead of the
    # exact sign test: what the sign test's validity costs, and why the t-test is not used.
    design = task_design(params, 1)
    z = np.asarray(gs.z_boundaries(design.looks, design.horizon, params.alpha / 2, design.spending))
    looks = np.asarray(design.looks)
    cells = []
    for gname in GENERATORS:
        rng = np.random.default_rng(seed)
        out = []
        for delta in (0.0, 0.1, 0.2, -0.2):
            d = GENERATORS[gname](rng, delta, 2 * reps if delta == 0 else reps, CAP)
            total, squares = np.cumsum(d, axis=1)[:, looks - 1], np.cumsum(d * d, axis=1)[:, looks - 1]
            mean = total / looks
            var = np.maximum(squares / looks - mean**2, 0.0) * looks / (looks - 1)
            with np.errstate(divide="ignore", invalid="ignore"):
                t = np.where(var > 0, mean / np.sqrt(var / looks), np.sign(mean) * np.inf)
            up, down = t >= z, -t >= z
            never = np.zeros(d.shape[0], dtype=np.int64)
            c = {
                "above_zero": np.where(up.any(axis=1), looks[up.argmax(axis=1)], 0),
                "below_zero": np.where(down.any(axis=1), looks[down.argmax(axis=1)], 0),
                "above_minus_margin": never,
                "below_plus_margin": never,
            }
            code, at = sequential_labels(c, params)
            if delta == 0:
                out.append(f"{100 * np.mean((code == seq.IMPROVED) | (code == seq.REGRESSED)):.1f}%")
                continue
            right = code == (seq.IMPROVED if delta > 0 else seq.REGRESSED)
            run = pairs_run(at, ends)
            out.append(
                f"{100 * right.mean():.0f}%"
                if delta == 0.1
                else f"{np.median(run[right]) if right.any() else float('nan'):.0f}"
            )
        cells.append(f"{gname}: {out[0]} / {out[1]} / {out[2]}, {out[3]}")
    print(f"{'paired t, same spending (1.0; invalid)':<32} " + " | ".join(cells), flush=True)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench stats", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small smoke run (200 reps) instead of the full evidence")
    parser.add_argument("--reps", type=int, default=None, help="repetitions per non-null row (default 2000, quick 200)")
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--priors", action="store_true", help="only compare bet priors under the same rule")
    parser.add_argument(
        "--spending", action="store_true", help="only compare group-sequential spending choices under the same rule"
    )
    args = parser.parse_args(argv)
    reps = args.reps or (200 if args.quick else 2000)
    if args.priors:
        compare_priors(reps, args.seed)
        return
    if args.spending:
        compare_spending(reps, args.seed)
        return
    null_paths = reps * max(T_RUN)  # enough null tasks for `reps` runs of T = 20
    params = StatsParams(cap=CAP)
    ends = window_ends()
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    print(
        f"alpha={params.alpha} margin={params.margin} min_pairs={params.min_pairs} cap={CAP}; windows end at "
        f"{', '.join(map(str, ends))}; {reps} reps per effect row, {null_paths} null tasks per generator; seed {args.seed}"
    )
    thrs = {"T=1": task_design(params, 1), "per side a/T": task_design(StatsParams(alpha=2 * params.alpha, cap=CAP), 1)}
    thrs.update({f"T={t}": task_design(params, t) for t in T_RUN})
    rows: list[Row] = []
    run_level: list[tuple[str, int, str, int, int]] = []
    p_imp: list[tuple[str, tuple[int, int, int, int]]] = []
    chunk = 500
    for gname, gen in GENERATORS.items():
        for delta in DELTAS:
            n_paths = null_paths if delta == 0 else reps
            parts: dict[str, list] = {
                k: [] for k in ("seq", "seq_at", "side", "side_at", "fixed", "fixed_cap", "peek", "peek_at", "d")
            }
            runs: dict[int, list[np.ndarray]] = {t: [] for t in T_RUN}
            for start in range(0, n_paths, chunk):
                d = gen(rng, delta, min(chunk, n_paths - start), CAP)
                c = crossings(d, params, thrs)
                code, at = sequential_labels(c["T=1"], params)
                parts["seq"].append(code)
                parts["seq_at"].append(at)
                code2, at2 = sequential_labels(c["per side a/T"], params)
                parts["side"].append(code2)
                parts["side_at"].append(at2)
                parts["fixed"].append(fixed_n_labels(d, FIXED_N, params.alpha, params.margin))
                parts["fixed_cap"].append(fixed_n_labels(d, CAP, params.alpha, params.margin))
                pc, pa = peeking_labels(d, ends, params.margin)
                parts["peek"].append(pc)
                parts["peek_at"].append(pa)
                if delta == 0:
                    for t in T_RUN:
                        runs[t].append(sequential_labels(c[f"T={t}"], params)[0])
                    if start == 0:
                        parts["d"].append(d[: min(2000, d.shape[0])])
            cat = {k: np.concatenate(v) for k, v in parts.items() if v}
            seq_run = np.where(cat["seq"] != seq.CONTINUE, pairs_run(cat["seq_at"], ends), CAP)
            rows.append(
                summarize(
                    gname,
                    delta,
                    "sequential (alpha/T 2-sided)",
                    cat["seq"],
                    seq_run,
                    np.where(cat["seq_at"] > 0, cat["seq_at"], 1),
                )
            )
            side_run = np.where(cat["side"] != seq.CONTINUE, pairs_run(cat["side_at"], ends), CAP)
            rows.append(
                summarize(
                    gname,
                    delta,
                    "  ref: alpha/T per side",
                    cat["side"],
                    side_run,
                    np.where(cat["side_at"] > 0, cat["side_at"], 1),
                )
            )
            rows.append(
                summarize(gname, delta, f"fixed-n {FIXED_N}", cat["fixed"], np.full(cat["fixed"].size, FIXED_N), None)
            )
            rows.append(
                summarize(gname, delta, f"fixed-n {CAP}", cat["fixed_cap"], np.full(cat["fixed_cap"].size, CAP), None)
            )
            peek_run = np.where(cat["peek"] != seq.CONTINUE, cat["peek_at"], CAP)
            rows.append(summarize(gname, delta, "peeking (t 95% per window)", cat["peek"], peek_run, None))
            if delta == 0:
                for t in T_RUN:
                    lab = np.concatenate(runs[t])
                    n_runs = lab.size // t
                    lab = lab[: n_runs * t].reshape(n_runs, t)
                    bad = int(np.sum(((lab == seq.IMPROVED) | (lab == seq.REGRESSED)).any(axis=1)))
                    run_level.append((gname, t, "sequential", bad, n_runs))
                d0 = cat["d"]
                p_imp.append(
                    (
                        gname,
                        p_improvement_at_stops(
                            d0, cat["seq"][: d0.shape[0]], seq_run[: d0.shape[0]], params, d0.shape[0]
                        ),
                    )
                )
        print(f"  {gname}: done at {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)

    print(
        "\n## Per task, T = 1 (alpha = 0.05, two-sided: each direction at alpha/2). Under delta = 0, false = improved +"
    )
    print(
        "## regressed and power = 'unchanged'; otherwise false = wrong direction or 'unchanged'. median / mean = pairs run"
    )
    print(
        "## (whole windows) to the correct verdict / per task; overshoot = mean(pairs run / pair at which the label settled)."
    )
    print(
        "## 'ref: alpha/T per side' is the same rule at the looser split (each direction at alpha/T) -- shown for reference, not used.\n"
    )
    print_rows(rows)

    print(
        "\n## Run level under no change: runs of T null tasks with any false IMPROVED/REGRESSED label (target <= alpha)"
    )
    for gname, t, method, bad, n_runs in run_level:
        print(
            f"{gname:<22} T={t:<3} {method:<12} {_pct(bad / n_runs)} (95% ub {_pct(upper95(bad, n_runs))}) of {n_runs} runs"
        )

    print(
        "\n## P(improvement) > 0.95 at null stops (settled or capped at 256): as reported (only beside a directional label)"
    )
    print("## vs the posterior shown regardless of label (the earlier behaviour); target <= alpha")
    for gname, (reported, anyway, count, inconcl) in p_imp:
        print(
            f"{gname:<22} reported {_pct(reported / count)} (95% ub {_pct(upper95(reported, count))})   "
            f"shown regardless {_pct(anyway / count)} ({inconcl} of them beside an undecided task)   of {count} stops"
        )

    print("\n## A task whose pairs all tie: pairs until 'unchanged' is settled")
    for margin in (0.05, 0.1):
        print(
            f"margin {margin:.2f}: "
            + ", ".join(f"T={t}: {all_tie_pairs_to_unchanged(margin, t, params)}" for t in (1, 3, 20))
        )

    print("\n## One decide_task call on 4,096 pairs (CPU time; targets <= 5 ms, <= 10 MB)")
    for name, best, median, mb in decision_cost():
        print(f"{name:<46} min {best:6.2f} ms  median {median:6.2f} ms  peak {mb:5.2f} MB")

    seq_rows = [r for r in rows if r.method.startswith("sequential")]
    worst_dir = max(max(r.improved, r.regressed) / r.n for r in seq_rows if r.delta == 0)
    med = [r.median_run for r in seq_rows if abs(r.delta) >= 0.2]
    power = [r.rate(r.right) for r in seq_rows if r.delta == 0.1]
    over = [r.overshoot for r in seq_rows if r.delta != 0 and not math.isnan(r.overshoot)]
    print(
        f"\nsequential: worst per-direction false rate {100 * worst_dir:.2f}% (target <= {100 * params.alpha:.0f}%); "
        f"median pairs at |delta| = 0.2: {min(med):.0f}-{max(med):.0f} (target <= {0.35 * FIXED_N:.0f}); "
        f"power at delta = 0.1: {100 * min(power):.0f}-{100 * max(power):.0f}% (target >= 70%); "
        f"overshoot {min(over):.3f}-{max(over):.3f} (target <= 1.15)"
    )
    print(f"elapsed {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
