"""Simulation evidence for the paired sequential statistics (DESIGN §6, issue 4).

Ground truth: every simulated input has its own base pass rate p ~ Beta(a, b) (so head and
base are correlated through the input's difficulty). The head arm fixes a share s of the
base's failures (q = p + s(1 - p)) for a true improvement, or breaks a share of its passes
(q = p(1 - s)) for a regression; s is chosen so the mean paired difference is exactly the
stated delta. Each arm's score is the mean of `epochs` Bernoulli draws. Pairs arrive in
windows of 8 and every method looks after every window, up to the cap.

Methods, run on the same simulated pairs:
  sequential  the library's anytime-valid rule (evalrunner_assets.stats, alpha/T per task)
  fixed-n     paired t interval once at the cap (Bonferroni alpha/T): improved/regressed when
              it excludes 0, unchanged when inside +-margin
  bootstrap   stop at the first window whose 95% percentile bootstrap interval excludes 0
              (or lies inside +-margin: "unchanged") -- the rule DESIGN §6 warns against

`python -m bench stats` runs the full evidence (2,000 repetitions per row, 40,000 null
tasks); `python -m bench stats --quick` a small smoke run.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from evalrunner_assets.stats import StatsParams
from evalrunner_assets.stats import _sequence as seq

BATCH = 8
CAPS = (200, 400)
T_VALUES = (1, 3, 20)
BOOT_RESAMPLES = 200
LABEL_NAMES = {seq.CONTINUE: "inconclusive", seq.IMPROVED: "improved", seq.REGRESSED: "regressed",
               seq.UNCHANGED: "unchanged", seq.CONTRADICTED: "inconclusive"}


@dataclass(frozen=True)
class Regime:
    name: str
    beta_a: float
    beta_b: float
    epochs: int

    @property
    def support(self) -> np.ndarray:
        return (np.arange(2 * self.epochs + 1) - self.epochs) / self.epochs


def simulate(rng: np.random.Generator, regime: Regime, delta: float, n_paths: int, n_pairs: int) -> np.ndarray:
    """Category index (head passes - base passes + epochs) per pair, shape (paths, pairs)."""
    p = rng.beta(regime.beta_a, regime.beta_b, size=(n_paths, n_pairs))
    mu = regime.beta_a / (regime.beta_a + regime.beta_b)
    if delta >= 0:
        share = delta / (1 - mu)
        q = p + share * (1 - p)
    else:
        share = -delta / mu
        q = p * (1 - share)
    if not 0 <= share <= 1:
        raise ValueError(f"delta {delta} is not reachable with mean pass rate {mu:.2f}")
    head = rng.binomial(regime.epochs, q)
    base = rng.binomial(regime.epochs, p)
    return (head - base + regime.epochs).astype(np.int8)


def sequential_labels(cats: np.ndarray, support: np.ndarray, params: StatsParams, t_values: tuple[int, ...]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """(label code, settled-at prefix) per path for each T, using the library's e-processes."""
    n_paths, n_pairs = cats.shape
    onehot_cum = np.cumsum(np.eye(support.size, dtype=np.float32)[cats], axis=1)  # (P, N, S)
    crossings: dict[int, dict[str, np.ndarray]] = {t: {} for t in t_values}
    for name, (d0, side) in zip(seq.TEST_NAMES, seq.test_boundaries(params.margin)):
        per_value = seq.bet_log_factors(support, d0, side).astype(np.float32)  # (S, K)
        log_w = seq.mixture_log_wealth(onehot_cum @ per_value)  # (P, N)
        for t in t_values:
            crossings[t][name] = seq.first_crossings(log_w, seq.log_threshold(params.alpha, t))
    out = {}
    for t in t_values:
        c = crossings[t]
        out[t] = seq.labels_from_crossings(c["above_zero"], c["below_zero"], c["above_minus_margin"], c["below_plus_margin"], params.min_pairs)
    return out


def fixed_n_labels(cats: np.ndarray, support: np.ndarray, n: int, alpha: float, margin: float) -> np.ndarray:
    """Paired-t decision once at n pairs (two-sided level alpha)."""
    d = support[cats[:, :n]]
    mean = d.mean(axis=1)
    sd = d.std(axis=1, ddof=1)
    half = sps.t.ppf(1 - alpha / 2, n - 1) * sd / math.sqrt(n)
    lo, hi = mean - half, mean + half
    code = np.full(cats.shape[0], seq.CONTINUE)
    code = np.where((lo > -margin) & (hi < margin), seq.UNCHANGED, code)
    code = np.where(lo > 0, seq.IMPROVED, code)
    code = np.where(hi < 0, seq.REGRESSED, code)
    return code


def bootstrap_labels(rng: np.random.Generator, cats: np.ndarray, support: np.ndarray, cap: int, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """Stop at the first window whose 95% percentile bootstrap CI excludes 0 or sits in +-margin."""
    n_paths = cats.shape[0]
    onehot_cum = np.cumsum(np.eye(support.size, dtype=np.int32)[cats[:, :cap]], axis=1)
    code = np.full(n_paths, seq.CONTINUE)
    stopped = np.zeros(n_paths, dtype=np.int64)
    for t in range(BATCH, cap + 1, BATCH):
        open_ = np.flatnonzero(code == seq.CONTINUE)
        if open_.size == 0:
            break
        probs = onehot_cum[open_, t - 1] / t
        draws = rng.multinomial(t, probs[:, None, :], size=(open_.size, BOOT_RESAMPLES))
        means = (draws @ support) / t
        lo, hi = np.percentile(means, [2.5, 97.5], axis=1)
        new = np.full(open_.size, seq.CONTINUE)
        new = np.where((lo > -margin) & (hi < margin), seq.UNCHANGED, new)
        new = np.where(lo > 0, seq.IMPROVED, new)
        new = np.where(hi < 0, seq.REGRESSED, new)
        code[open_] = new
        stopped[open_] = np.where(new != seq.CONTINUE, t, 0)
    return code, stopped


def spent(settled_at: np.ndarray, code: np.ndarray, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """(decided within cap, pairs sampled: whole windows up to the decision, else the cap)."""
    decided = (code != seq.CONTINUE) & (settled_at > 0) & (settled_at <= cap)
    pairs = np.where(decided, np.minimum(np.ceil(settled_at / BATCH) * BATCH, cap), cap).astype(np.int64)
    return decided, pairs


@dataclass
class Row:
    method: str
    regime: str
    delta: float
    cap: int
    n_tasks: int
    improved: float
    regressed: float
    unchanged: float
    inconclusive: float
    false_rate: float
    power: float
    median_pairs: float
    mean_pairs: float
    reps: int


def summarize(method: str, regime: str, delta: float, cap: int, n_tasks: int, code: np.ndarray, pairs: np.ndarray, decided: np.ndarray, margin: float) -> Row:
    labels = np.where(decided, code, seq.CONTINUE)
    imp = np.mean(labels == seq.IMPROVED)
    reg = np.mean(labels == seq.REGRESSED)
    unch = np.mean(labels == seq.UNCHANGED)
    if delta == 0:
        false = imp + reg
        right = labels == seq.UNCHANGED
    elif delta > 0:
        false = reg + (unch if abs(delta) >= margin else 0.0)
        right = labels == seq.IMPROVED
    else:
        false = imp + (unch if abs(delta) >= margin else 0.0)
        right = labels == seq.REGRESSED
    verdict_pairs = pairs[right]
    return Row(method, regime, delta, cap, n_tasks, imp, reg, unch, max(0.0, 1 - imp - reg - unch), float(false), float(np.mean(right)),
               float(np.median(verdict_pairs)) if verdict_pairs.size else float("nan"), float(np.mean(pairs)), labels.size)


def run_regime(rng: np.random.Generator, regime: Regime, deltas: tuple[float, ...], reps: int, null_paths: int, params: StatsParams, chunk: int) -> tuple[list[Row], dict]:
    rows: list[Row] = []
    run_level: dict = {}
    support = regime.support
    n_max = max(CAPS)
    for delta in deltas:
        n_paths = null_paths if delta == 0 else reps
        seq_code: dict[int, list[np.ndarray]] = {t: [] for t in T_VALUES}
        seq_at: dict[int, list[np.ndarray]] = {t: [] for t in T_VALUES}
        fixed: dict[tuple[int, int], list[np.ndarray]] = {(c, t): [] for c in CAPS for t in T_VALUES}
        boot: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {c: [] for c in CAPS}
        for start in range(0, n_paths, chunk):
            cats = simulate(rng, regime, delta, min(chunk, n_paths - start), n_max)
            for t, (code, at) in sequential_labels(cats, support, params, T_VALUES).items():
                seq_code[t].append(code)
                seq_at[t].append(at)
            for c in CAPS:
                for t in T_VALUES:
                    fixed[(c, t)].append(fixed_n_labels(cats, support, c, params.alpha / t, params.margin))
                boot[c].append(bootstrap_labels(rng, cats, support, c, params.margin))
        for c in CAPS:
            code, at = np.concatenate(seq_code[1]), np.concatenate(seq_at[1])
            decided, pairs = spent(at, code, c)
            rows.append(summarize("sequential", regime.name, delta, c, 1, code, pairs, decided, params.margin))
            fcode = np.concatenate(fixed[(c, 1)])
            rows.append(summarize(f"fixed-n {c}", regime.name, delta, c, 1, fcode, np.full(fcode.size, c), fcode != seq.CONTINUE, params.margin))
            bcode = np.concatenate([b[0] for b in boot[c]])
            bat = np.concatenate([b[1] for b in boot[c]])
            bdecided, bpairs = spent(bat, bcode, c)
            rows.append(summarize("bootstrap", regime.name, delta, c, 1, bcode, bpairs, bdecided, params.margin))
        if delta == 0:
            # Run level: consecutive null tasks form runs of T tasks, each decided at alpha/T.
            for c in CAPS:
                for t in T_VALUES[1:]:
                    n_runs = n_paths // t
                    code, at = np.concatenate(seq_code[t])[: n_runs * t], np.concatenate(seq_at[t])[: n_runs * t]
                    decided, _ = spent(at, code, c)
                    lab = np.where(decided, code, seq.CONTINUE).reshape(n_runs, t)
                    fcode = np.concatenate(fixed[(c, t)])[: n_runs * t].reshape(n_runs, t)
                    bcode = np.concatenate([b[0] for b in boot[c]])[: n_runs * t].reshape(n_runs, t)
                    for method, lab_m in (("sequential", lab), (f"fixed-n {c}", fcode), ("bootstrap", bcode)):
                        run_level[(regime.name, c, t, method)] = (
                            float(np.mean((lab_m == seq.REGRESSED).any(axis=1))),
                            float(np.mean(((lab_m == seq.REGRESSED) | (lab_m == seq.IMPROVED)).any(axis=1))),
                            n_runs,
                        )
    return rows, run_level


def _fmt(x: float, pct: bool = False) -> str:
    if isinstance(x, float) and math.isnan(x):
        return "   -  "
    return f"{100 * x:5.1f}%" if pct else f"{x:6.1f}"


def print_rows(rows: list[Row], alpha: float) -> None:
    header = f"{'regime':<22}{'delta':>6} {'cap':>4}  {'method':<12}{'improved':>9}{'regressed':>10}{'unchanged':>10}{'inconcl.':>9}{'false':>8}{'power':>8}{'median':>8}{'mean':>8}{'reps':>7}"
    print(header)
    print("-" * len(header))
    for r in rows:
        flag = " !" if r.false_rate > alpha + 2 * math.sqrt(alpha * (1 - alpha) / r.reps) else ""
        print(f"{r.regime:<22}{r.delta:>+6.2f} {r.cap:>4}  {r.method:<12}{_fmt(r.improved, True):>9}{_fmt(r.regressed, True):>10}"
              f"{_fmt(r.unchanged, True):>10}{_fmt(r.inconclusive, True):>9}{_fmt(r.false_rate, True):>8}{_fmt(r.power, True):>8}"
              f"{_fmt(r.median_pairs):>8}{_fmt(r.mean_pairs):>8}{r.reps:>7}{flag}")


def all_tie_pairs_to_unchanged(margin: float, n_tasks: int, params: StatsParams, horizon: int = 2000) -> int | str:
    """Pairs after which an all-tie task settles "unchanged" (first crossing of both margin tests)."""
    zeros = np.zeros(horizon)
    code, at = seq.labels_from_crossings(
        np.array(0), np.array(0),
        seq.first_crossings(seq.log_wealth_path(zeros, -margin, +1), seq.log_threshold(params.alpha, n_tasks)),
        seq.first_crossings(seq.log_wealth_path(zeros, margin, -1), seq.log_threshold(params.alpha, n_tasks)),
        params.min_pairs,
    )
    return int(at) if int(code) == seq.UNCHANGED else f">{horizon}"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench stats", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small smoke run (200 reps) instead of the full evidence")
    parser.add_argument("--reps", type=int, default=None, help="repetitions per non-null row (default 2000, quick 200)")
    parser.add_argument("--seed", type=int, default=20240601)
    args = parser.parse_args(argv)
    reps = args.reps or (200 if args.quick else 2000)
    null_paths = reps * max(T_VALUES)  # enough null tasks for `reps` runs of T=20
    params = StatsParams()
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    print(f"alpha={params.alpha} margin={params.margin} min_pairs={params.min_pairs} windows of {BATCH}; caps {CAPS}; "
          f"{reps} reps per row, {null_paths} null tasks for the main regime; seed {args.seed}")
    main_regime = Regime("Beta(.5,.5) x1 epoch", 0.5, 0.5, 1)
    stress = [Regime("Beta(.1,.1) x1 epoch", 0.1, 0.1, 1), Regime("Beta(2,2) x1 epoch", 2.0, 2.0, 1),
              Regime("Beta(.5,.5) x3 epochs", 0.5, 0.5, 3)]
    all_rows: list[Row] = []
    run_level: dict = {}
    rows, rl = run_regime(rng, main_regime, (0.0, 0.1, 0.2, 0.3, -0.2), reps, null_paths, params, chunk=500)
    all_rows += rows
    run_level.update(rl)
    for regime in stress:
        rows, rl = run_regime(rng, regime, (0.0, 0.2), reps, max(reps, null_paths // 4), params, chunk=500)
        all_rows += rows
        run_level.update(rl)

    print("\n## A task whose pairs all tie (deterministic): pairs until 'unchanged' is settled")
    for margin in (0.05, 0.1):
        cells = []
        for t in T_VALUES:
            cells.append(f"T={t}: {all_tie_pairs_to_unchanged(margin, t, params)}")
        print(f"margin {margin:.2f}: " + ", ".join(cells))

    print("\n## Per task (T = 1, alpha = 0.05). false = wrong-direction verdicts (and 'unchanged' when |delta| >= margin);")
    print("## under delta = 0 false = improved + regressed and power = reached 'unchanged'. median = pairs to the correct verdict,")
    print("## mean = mean pairs sampled per task (inconclusive tasks spend the cap). '!' marks a false rate above alpha.\n")
    print_rows(all_rows, params.alpha)

    print("\n## Run level under no change: rate of runs with any false REGRESSED / any false directional verdict")
    print(f"{'regime':<22}{'cap':>4} {'T':>3}  {'method':<12}{'any REGRESSED':>14}{'any directional':>16}{'runs':>7}")
    for (regime, cap, t, method), (reg, anyd, n_runs) in sorted(run_level.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        flag = " !" if reg > params.alpha else ""
        print(f"{regime:<22}{cap:>4} {t:>3}  {method:<12}{_fmt(reg, True):>14}{_fmt(anyd, True):>16}{n_runs:>7}{flag}")

    print("\n## Samples saved (mean pairs per task, same simulated pairs): fixed-n / sequential, bootstrap / sequential")
    by_key = {(r.method.split()[0], r.regime, r.delta, r.cap): r for r in all_rows}
    for r in all_rows:
        if r.method != "sequential":
            continue
        fixed = by_key[("fixed-n", r.regime, r.delta, r.cap)]
        boot = by_key[("bootstrap", r.regime, r.delta, r.cap)]
        print(f"{r.regime:<22}{r.delta:>+6.2f} {r.cap:>4}  fixed-n/seq x{fixed.mean_pairs / r.mean_pairs:5.2f} "
              f"(false {_fmt(fixed.false_rate, True)} vs {_fmt(r.false_rate, True)}, power {_fmt(fixed.power, True)} vs {_fmt(r.power, True)})   "
              f"bootstrap/seq x{boot.mean_pairs / r.mean_pairs:5.2f} (false {_fmt(boot.false_rate, True)}, power {_fmt(boot.power, True)})")

    worst = max(r.false_rate for r in all_rows if r.method == "sequential")
    worst_run = max(v[0] for k, v in run_level.items() if k[3] == "sequential")
    med = [r.median_pairs for r in all_rows if r.method == "sequential" and r.regime == main_regime.name and abs(r.delta) >= 0.2 and r.cap == 200]
    print(f"\nsequential: worst per-task false rate {100 * worst:.2f}% (target <= {100 * params.alpha:.0f}%), "
          f"worst run-level false REGRESSED {100 * worst_run:.2f}%, "
          f"median pairs at |delta| >= 0.2 (cap 200, main regime): {', '.join(f'{m:.0f}' for m in med)} (target <= 100)")
    print(f"elapsed {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
