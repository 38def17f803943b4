"""Per-task decision: label, intervals, evidence and the numbers people read."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from evalrunner_assets.stats import _groupseq, _posterior, _sequence
from evalrunner_assets.stats._classical import paired_t_interval
from evalrunner_assets.stats._pairing import Pairing
from evalrunner_assets.stats._params import StatsParams, check_n_tasks

Label = Literal["improved", "regressed", "unchanged", "continue", "inconclusive", "broken"]
LABELS: tuple[str, ...] = ("improved", "regressed", "unchanged", "continue", "inconclusive", "broken")
# "broken": the PR broke the task's own code — it cannot be loaded on head, or more than
# ``error_cap`` of head's inputs raised — while the base ran it. A finding about the code, not a
# measured difference in quality: it blocks the merge whatever the scores say.

_CODE_TO_LABEL: dict[int, Label] = {
    _sequence.CONTINUE: "continue",
    _sequence.IMPROVED: "improved",
    _sequence.REGRESSED: "regressed",
    _sequence.UNCHANGED: "unchanged",
    _sequence.CONTRADICTED: "inconclusive",
}

# Posterior draws used to estimate how many more pairs an undecided task needs, and the most
# support points they range over (continuous scores are binned, mean-preserving).
_FORECAST_PATHS = 64
_FORECAST_SUPPORT = 33
# Most looks on the "how many samples until we know" chart.
_PATH_LOOKS = 64


def _r(x: float | None, digits: int = 6) -> float | None:
    return None if x is None else round(float(x), digits)


@dataclass(frozen=True)
class TaskDecision:
    """The comparison of one task at the current look (JSON via :meth:`to_dict`)."""

    label: Label
    reason: str | None
    pairs: int
    decided_at: int | None
    n_tasks: int
    task_alpha: float
    base_mean: float | None
    head_mean: float | None
    delta: float | None
    anytime_interval: tuple[float, float]
    classical_interval: tuple[float, float] | None
    head_better: int
    base_better: int
    ties: int
    e_values: dict[str, float]
    p_value: float
    p_value_adjusted: float
    p_improvement: float | None
    p_above_margin: float
    p_within_margin: float
    p_below_margin: float
    more_pairs_needed: int | None
    head_failed: bool = False
    base_failed: bool = False
    pairing: dict[str, Any] = field(default_factory=dict)
    # Arms whose own code is broken: the task cannot be loaded there, or more than the error cap
    # of its inputs raised. ("head",) is the label "broken"; both arms leave it "inconclusive".
    broken_arms: tuple[str, ...] = ()
    # Posterior draws of delta, kept for the run-level headline; not serialized.
    posterior_draws: np.ndarray | None = field(default=None, repr=False, compare=False)
    # Why p_improvement is None: it is shown only beside a directional label, where the
    # posterior cannot contradict the sequential label it sits next to.
    p_improvement_note: str | None = None

    @property
    def comparable(self) -> bool:
        """False when there is no baseline to compare with (the base arm failed, head did not)."""
        return not (self.base_failed and not self.head_failed)

    @property
    def settled(self) -> bool:
        return self.label != "continue"

    def to_dict(self) -> dict[str, Any]:
        lo, hi = self.anytime_interval
        return {
            "label": self.label,
            "reason": self.reason,
            "pairs": self.pairs,
            "decided_at": self.decided_at,
            "n_tasks": self.n_tasks,
            "task_alpha": self.task_alpha,
            "base_mean": _r(self.base_mean),
            "head_mean": _r(self.head_mean),
            "delta": _r(self.delta),
            "anytime_interval": {
                "lo": _r(lo),
                "hi": _r(hi),
                "level": _r(1.0 - self.task_alpha, 8),
                "kind": "anytime-valid confidence sequence (betting, mixture over bet sizes), two-sided, Bonferroni over "
                "tasks, cut at 0 / ±margin where a test (group-sequential or e-process) rejected them",
            },
            "classical_interval": None
            if self.classical_interval is None
            else {
                "lo": _r(self.classical_interval[0]),
                "hi": _r(self.classical_interval[1]),
                "level": 0.95,
                "kind": "paired t, fixed-n reference only: not valid under repeated looks",
            },
            "head_better": self.head_better,
            "base_better": self.base_better,
            "ties": self.ties,
            "e_values": {k: _r(v) for k, v in self.e_values.items()},
            "p_value": _r(self.p_value, 8),
            "p_value_adjusted": _r(self.p_value_adjusted, 8),
            "p_improvement": _r(self.p_improvement, 4),
            "p_improvement_note": self.p_improvement_note,
            "p_above_margin": _r(self.p_above_margin, 4),
            "p_within_margin": _r(self.p_within_margin, 4),
            "p_below_margin": _r(self.p_below_margin, 4),
            "more_pairs_needed": self.more_pairs_needed,
            "head_failed": self.head_failed,
            "base_failed": self.base_failed,
            "comparable": self.comparable,
            "broken_arms": list(self.broken_arms),
            "pairing": dict(self.pairing),
        }


Sides = dict[int, "_sequence.Compressed"]


def _crossings(data: Sides, margin: float, log_thrs: dict[str, float]) -> dict[str, _sequence.ScanResult]:
    scans: dict[str, _sequence.ScanResult] = {}
    for name, (d0, side) in zip(_sequence.TEST_NAMES, _sequence.test_boundaries(margin)):
        scans[name] = _sequence.scan(
            data[side], d0, side, log_thrs[name], want_sup=name in ("above_zero", "below_zero")
        )
    return scans


@dataclass(frozen=True)
class Design:
    """The tests of one task at one level: the group-sequential looks and the error each
    one-sided sign test may have spent by each, and the e-value each e-process test must reach."""

    looks: tuple[int, ...]
    allowed: np.ndarray  # cumulative error of each one-sided sign test by each look
    log_thrs: dict[str, float]
    horizon: int
    gs_alpha: float  # each sign test's level over the whole design
    spending: _groupseq.Spending

    def z(self) -> np.ndarray:
        """The same spending's normal boundaries (computed once per design; the forecast's)."""
        return np.asarray(
            _groupseq.z_boundaries(self.looks, self.horizon, self.gs_alpha, self.spending), dtype=np.float64
        )


def task_design(
    params: StatsParams,
    n_tasks: int,
    dataset_size: int | None = None,
    *,
    share: float = _groupseq.GS_SHARE,
    spending: _groupseq.Spending = _groupseq.SPENDING,
) -> Design:
    """Each direction gets alpha/(2T): ``share`` of it to the group-sequential sign test over
    the planned looks, the rest to the directional e-process (every pair, and past the
    horizon). The margin tests ("unchanged") and the interval keep the full alpha/(2T) per
    side. ``share`` and ``spending`` are for the benchmark's comparisons only."""
    horizon = _groupseq.design_horizon(params.horizon_cap, dataset_size)
    looks = _groupseq.design_looks(horizon, params.min_pairs)
    side_alpha = params.alpha / (2 * n_tasks)
    full = _sequence.log_threshold(params.alpha, n_tasks)
    directional = _sequence.log_threshold((1.0 - share) * params.alpha, n_tasks)
    log_thrs = {
        "above_zero": directional,
        "below_zero": directional,
        "above_minus_margin": full,
        "below_plus_margin": full,
    }
    allowed = _groupseq.spent(looks, horizon, share * side_alpha, spending)
    return Design(looks, allowed, log_thrs, horizon, share * side_alpha, spending)


def _with_sign_tests(crossings: dict[str, int], d: np.ndarray, design: Design) -> dict[str, int]:
    """A directional null counts as rejected from the earlier of its e-process and its
    group-sequential sign test."""
    gs_up, gs_down = (int(x) for x in _groupseq.first_rejections(d, design.looks, design.allowed)) if d.size else (0, 0)
    out = dict(crossings)
    out["above_zero"] = _earliest(crossings["above_zero"], gs_up)
    out["below_zero"] = _earliest(crossings["below_zero"], gs_down)
    return out


def _test_crossings(d: np.ndarray, margin: float, design: Design) -> dict[str, int]:
    """First crossing of each of the decision's four tests over the pairs ``d`` (0 = never)."""
    data = {side: _sequence.Compressed(d, side) for side in (+1, -1)}
    scans = _crossings(data, margin, design.log_thrs)
    return _with_sign_tests({name: scan.crossing for name, scan in scans.items()}, d, design)


def _earliest(a: int, b: int) -> int:
    """The earlier of two first-crossing times (0 = never)."""
    return min(a, b) if a and b else max(a, b)


def _settle(crossings: dict[str, int], min_pairs: int, n: int) -> tuple[int, int]:
    code, at = _sequence.labels_from_crossings(
        np.array(crossings["above_zero"]),
        np.array(crossings["below_zero"]),
        np.array(crossings["above_minus_margin"]),
        np.array(crossings["below_plus_margin"]),
        min_pairs,
    )
    if int(at) > n:  # the first look that could carry the label has not happened yet
        return _sequence.CONTINUE, 0
    return int(code), int(at)


def _over_error_cap(pairing: Pairing, arm: str, params: StatsParams, at_limit: bool) -> bool:
    """Whether ``arm`` raised on more than ``error_cap`` of its inputs, once enough inputs ran to
    say so (``error_cap_inputs``, or all there will be)."""
    inputs = pairing.inputs_head if arm == "head" else pairing.inputs_base
    if not inputs or (inputs < max(params.min_pairs, params.error_cap_inputs) and not at_limit):
        return False
    return pairing.error_share(arm) > params.error_cap


def _limit_reason(params: StatsParams, *, at_cap: bool, dataset_size: int | None, budget_samples: int | None) -> str:
    """Why an undecided task stops: the real limit, in words."""
    if at_cap and dataset_size is not None and dataset_size < params.min_pairs:
        noun = "sample" if dataset_size == 1 else "samples"
        return f"cannot be decided ({dataset_size} {noun}): a label needs at least {params.min_pairs} pairs"
    if at_cap and dataset_size is not None and dataset_size <= params.cap:
        return f"dataset exhausted ({dataset_size} samples) before the interval settled"
    if at_cap:
        return f"reached the per-task cap of {params.cap} pairs before the interval settled"
    if budget_samples is not None:
        return f"run budget of {budget_samples} samples exhausted before the interval settled"
    return "run budget exhausted before the interval settled"


def _forecast_more_pairs(
    sides: Sides,
    scans: dict[str, _sequence.ScanResult],
    crossings: dict[str, int],
    params: StatsParams,
    design: Design,
) -> int | None:
    """Median extra pairs until some label settles, over posterior draws of the pair distribution.

    Each of :data:`_FORECAST_PATHS` Dirichlet draws gives every e-process test and bet an
    expected log growth per pair; a bet's wealth is projected along it (past + t * growth), and
    the mixture crosses no later than its first bet reaching the threshold plus that bet's prior
    weight. The group-sequential sign tests are projected along their drift: the first planned
    look l at which mean * sqrt(l / E|D|) reaches its boundary. Cost O(draws x (support x bets +
    looks)), independent of the cap. None when most draws do not settle before the cap (more
    samples are unlikely to help) or the cap is already reached.
    """
    n = sides[1].n
    horizon = params.cap - n
    if horizon <= 0:
        return None
    values, counts, prior = _posterior.dirichlet_support(sides[1].deltas, max_support=_FORECAST_SUPPORT)
    rng = np.random.default_rng(12345)
    probs = rng.dirichlet(counts + prior, size=_FORECAST_PATHS)  # (P, S)
    never = np.iinfo(np.int64).max
    extra: dict[str, np.ndarray] = {}
    for name, (d0, side) in zip(_sequence.TEST_NAMES, _sequence.test_boundaries(params.margin)):
        if crossings[name] > 0:
            extra[name] = np.full(_FORECAST_PATHS, crossings[name] - n)
            continue
        table = _sequence.bet_log_factors(values, d0, side)  # (S, K)
        data = sides[side]
        past = data.counts @ _sequence.bet_log_factors(data.values, d0, side) if n else np.zeros(table.shape[1])
        growth = probs @ table  # (P, K)
        need = design.log_thrs[name] - _sequence.BET_LOG_WEIGHTS - past  # (K,)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(growth > 0, np.ceil(np.maximum(need, 0.0) / growth), np.inf)
        best = t.min(axis=1)
        ok = np.isfinite(best) & (best <= horizon)
        extra[name] = np.where(ok, np.where(ok, best, 0.0).astype(np.int64), never)
    ahead = np.array([look for look in design.looks if look > n], dtype=np.int64)
    if ahead.size:
        z_ahead = design.z()[len(design.looks) - ahead.size :]
        mean = probs @ values
        spread = np.maximum(probs @ np.abs(values), 1e-12)
        drift = mean[:, None] * np.sqrt(ahead[None, :] / spread[:, None])  # (P, looks ahead)
        for name, sign in (("above_zero", 1.0), ("below_zero", -1.0)):
            if crossings[name] > 0:
                continue
            hit = sign * drift >= z_ahead[None, :]
            first = np.where(hit.any(axis=1), ahead[hit.argmax(axis=1)] - n, never)
            extra[name] = np.minimum(extra[name], first)
    imp, reg = extra["above_zero"], extra["below_zero"]
    unch = np.maximum(extra["above_minus_margin"], extra["below_plus_margin"])
    first = np.minimum(np.minimum(imp, reg), unch)
    first = np.where(first == never, never, np.maximum(first, params.min_pairs - n))
    median = np.sort(first)[(first.size - 1) // 2]
    if median == never or median > horizon:
        return None
    return int(max(median, 1))


def _directional_cut(lo: float, hi: float, crossings: dict[str, int], min_pairs: int, n: int) -> tuple[float, float]:
    """Bounds at look n as the directional tests have it: lo >= 0 once "delta <= 0" is rejected
    (and lo <= 0 until then), hi the same way; a crossing counts from ``min_pairs`` on, as in
    the label."""
    up = 0 < crossings["above_zero"] <= n and n >= min_pairs
    down = 0 < crossings["below_zero"] <= n and n >= min_pairs
    return (max(lo, 0.0) if up else min(lo, 0.0)), (min(hi, 0.0) if down else max(hi, 0.0))


def _interval(
    data: Sides, crossings: dict[str, int], margin: float, log_thr: float, contradicted: bool, min_pairs: int
) -> tuple[float, float]:
    """The confidence sequence at this look, made to agree with the label read off the decision's
    own tests: cut at 0 once a directional test settled the sign (each rejection holds for
    good), and reaching 0 while none has. The sequence is a test at the margin tests' level,
    the directional label another (the sign test and the directional e-process), so the
    sequence alone can exclude 0 a few looks before the label settles; a wider interval is
    still a valid one. Then cut to the +-margin band the margin tests established."""
    current = _sequence.interval_at(data[1].deltas, log_thr)
    lo, hi = current
    if contradicted:
        return lo, hi
    lo, hi = _directional_cut(lo, hi, crossings, min_pairs, data[1].n)
    if crossings["above_minus_margin"]:
        lo = max(lo, -margin)
    if crossings["below_plus_margin"]:
        hi = min(hi, margin)
    if lo > hi:  # the established facts disagree with this look: show this look's interval
        return current
    return lo, hi


def _p_improvement_note(label: str, interval: tuple[float, float], margin: float) -> str | None:
    """Why P(improvement) is not shown for a task (None when it is)."""
    if label in ("improved", "regressed"):
        return None
    lo, hi = interval
    where = f"its anytime interval ({lo:+.3f}, {hi:+.3f})"
    if label == "unchanged":
        return f"not reported for an unchanged task: {where} lies within ±{margin:g}"
    if label == "continue":
        return f"not reported until the label settles: {where} is the current evidence"
    if label == "broken":
        return "not reported for a broken task: its head arm's code fails, the scores measure no change in quality"
    return f"not reported for an inconclusive task: {where} contains 0 at the task's level"


def decide_task(
    pairing: Pairing,
    params: StatsParams,
    n_tasks: int,
    *,
    at_cap: bool = False,
    budget_exhausted: bool = False,
    head_failed: bool = False,
    base_failed: bool = False,
    forecast: bool = True,
    dataset_size: int | None = None,
    budget_samples: int | None = None,
    head_load_error: str | None = None,
    base_load_error: str | None = None,
    breakage: bool = False,
) -> TaskDecision:
    """Decide one task from its pairs, consumed in their pre-committed order.

    The label is the first one settled at any look — every prefix of at least ``min_pairs``
    pairs for the e-processes, the planned window ends up to the design cap (or a smaller
    ``dataset_size``) for the group-sequential sign tests — so adding pairs never changes a
    settled label. ``at_cap`` (no position left to run)
    / ``budget_exhausted`` turn an undecided task into "inconclusive", with a reason naming the
    real limit: ``dataset_size`` (the samples both commits have) tells a dataset that ran out
    ("dataset exhausted (20 samples)") and a task too small to ever carry a label ("cannot be
    decided (1 sample)") from the per-task cap; ``budget_samples`` names the run budget. A
    failed arm makes the task "inconclusive" with the reason, except a task that cannot be loaded
    on head while the base ran it (``head_load_error``, the repository's own code): "broken". An
    arm whose errored share exceeds ``params.error_cap`` (after ``error_cap_inputs`` inputs, or at
    the limit) ends the task with that cause. With ``breakage`` (head is a change to the base,
    as in a PR) head alone is "broken" (the PR broke it) and both arms "inconclusive" (broken on
    both); otherwise (a symmetric comparison: candidates, leaderboards) and for base alone it is
    "regressed" if the scores settled it, else "inconclusive" (see the README).
    ``forecast=False`` skips the more-pairs estimate. ``p_improvement`` is given only beside
    "improved" / "regressed"; otherwise it is None and ``p_improvement_note`` says why (a
    posterior beside an undecided label reads as a decision the sequential rule did not make).
    """
    if not isinstance(pairing, Pairing):
        raise TypeError(f"pairing must be a Pairing (from pair_task), got {type(pairing).__name__}")
    if not isinstance(params, StatsParams):
        raise TypeError(f"params must be StatsParams, got {type(params).__name__}")
    check_n_tasks(n_tasks)
    task_alpha = params.task_alpha(n_tasks)
    log_thr = _sequence.log_threshold(params.alpha, n_tasks)
    design = task_design(params, n_tasks, dataset_size)
    d = pairing.deltas
    n = d.size
    head = np.asarray(pairing.head, dtype=np.float64)
    base = np.asarray(pairing.base, dtype=np.float64)

    data = {side: _sequence.Compressed(d, side) for side in (+1, -1)}
    scans = _crossings(data, params.margin, design.log_thrs)
    crossings = _with_sign_tests({name: scan.crossing for name, scan in scans.items()}, d, design)
    code, settled_at = _settle(crossings, params.min_pairs, n) if n else (_sequence.CONTINUE, 0)
    label = _CODE_TO_LABEL[code]
    reason: str | None = None
    if code == _sequence.CONTRADICTED:
        reason = "evidence for both an improvement and a regression: the pairs do not share one mean (drift or a changed order)"
    interval = (
        _interval(data, crossings, params.margin, log_thr, code == _sequence.CONTRADICTED, params.min_pairs)
        if n
        else (-1.0, 1.0)
    )

    head_failed = head_failed or head_load_error is not None
    base_failed = base_failed or base_load_error is not None
    broken_arms: tuple[str, ...] = ()
    if head_failed or base_failed:
        label = "inconclusive"
        settled_at = 0
        broken_arms = tuple(arm for arm, e in (("head", head_load_error), ("base", base_load_error)) if e)
        if head_load_error and not base_failed:
            label = "broken"
            reason = f"broken by this PR: the task cannot be loaded on head ({head_load_error})"
        elif head_load_error and base_load_error:
            reason = f"broken on both head and base: the task cannot be loaded on either ({head_load_error})"
        elif head_failed and base_failed:
            reason = "failed on both head and base"
        elif head_failed:
            reason = "failed on head while base succeeded"
        else:
            reason = "failed on base while head succeeded: no baseline to compare with"
    else:
        over = [arm for arm in ("head", "base") if _over_error_cap(pairing, arm, params, at_cap or budget_exhausted)]
        share = f"more than {params.error_cap:.0%} of its inputs raised"
        if breakage and over == ["head"]:
            # The PR's own code raises where the base's ran: broken, whatever the scores say.
            label, settled_at, broken_arms = "broken", 0, ("head",)
            reason = f"broken by this PR: head: {pairing.error_cause('head')} ({share}; base ran)"
        elif breakage and over == ["head", "base"]:
            label, settled_at, broken_arms = "inconclusive", 0, ("head", "base")
            causes = "; ".join(f"{arm}: {pairing.error_cause(arm)}" for arm in over)
            reason = f"broken on both head and base: {causes} ({share} on each arm: no quality verdict)"
        elif over:
            cause = "; ".join(f"{arm}: {pairing.error_cause(arm)}" for arm in over)
            if label != "regressed":  # errors as failures settled a regression: a valid claim
                label = "inconclusive"
                settled_at = 0
                reason = f"{cause} (more than {params.error_cap:.0%} of an arm raised: no quality verdict)"
            else:
                reason = cause
        elif label == "continue" and (at_cap or budget_exhausted):
            label = "inconclusive"
            reason = _limit_reason(params, at_cap=at_cap, dataset_size=dataset_size, budget_samples=budget_samples)

    sup_log_e = max(scans["above_zero"].sup, scans["below_zero"].sup) if n else 0.0
    p_value = min(1.0, 2.0 * math.exp(-sup_log_e))
    if crossings["above_zero"] or crossings["below_zero"]:  # a directional rejection holds at the task's level
        p_value = min(p_value, task_alpha)
    post = _posterior.summarize(d, params.margin)
    note = _p_improvement_note(label, interval, params.margin)
    if note is not None and label == "inconclusive" and reason and not (interval[0] <= 0.0 <= interval[1]):
        note = f"not reported for an inconclusive task ({reason})"
    more = None
    if label == "continue" and forecast:
        more = _forecast_more_pairs(data, scans, crossings, params, design)
        if more is not None and n < params.min_pairs:
            more = max(more, params.min_pairs - n)
    return TaskDecision(
        label=label,
        reason=reason,
        pairs=n,
        decided_at=settled_at or None,
        n_tasks=n_tasks,
        task_alpha=task_alpha,
        base_mean=float(base.mean()) if n else None,
        head_mean=float(head.mean()) if n else None,
        delta=float(d.mean()) if n else None,
        anytime_interval=interval,
        classical_interval=paired_t_interval(d),
        head_better=int(np.sum(d > 0)),
        base_better=int(np.sum(d < 0)),
        ties=int(np.sum(d == 0)),
        e_values={name: float(np.exp(scan.final)) for name, scan in scans.items()},
        p_value=p_value,
        p_value_adjusted=min(1.0, p_value * n_tasks),
        p_improvement=post.p_improvement if note is None else None,
        p_above_margin=post.p_above_margin,
        p_within_margin=post.p_within_margin,
        p_below_margin=post.p_below_margin,
        more_pairs_needed=more,
        head_failed=head_failed,
        base_failed=base_failed,
        pairing=pairing.to_dict(),
        broken_arms=broken_arms,
        posterior_draws=post.draws,
        p_improvement_note=note,
    )


def confidence_path(pairing: Pairing, params: StatsParams, n_tasks: int) -> list[tuple[int, float, float, float]]:
    """(pairs, delta, lo, hi) at every batch boundary (and the current look), for the
    "how many samples until we know" chart. Bounds are the anytime-valid running intersection,
    cut at 0 from the look at which a directional test settled the sign and reaching 0 before
    it (as the decision's own interval is)."""
    check_n_tasks(n_tasks)
    d = pairing.deltas
    n = d.size
    if n == 0:
        return []
    looks = list(range(params.batch_size, n + 1, params.batch_size))
    if len(looks) > _PATH_LOOKS:  # a chart needs no more points; each look costs two root finds
        step = -(-len(looks) // _PATH_LOOKS)
        looks = looks[::step]
    if not looks or looks[-1] != n:
        looks.append(n)
    lo, hi = _sequence.interval_path(
        d, _sequence.log_threshold(params.alpha, n_tasks), looks=np.array(looks), margin=params.margin
    )
    design = task_design(params, n_tasks)
    crossings = _test_crossings(d, params.margin, design)
    if not (crossings["above_zero"] and crossings["below_zero"]):  # both contradict one mean: leave it
        cut = [_directional_cut(a, b, crossings, params.min_pairs, int(t)) for t, a, b in zip(looks, lo, hi)]
        cut_lo, cut_hi = np.array([c[0] for c in cut]), np.array([c[1] for c in cut])
        agree = cut_lo <= cut_hi  # where they disagree, show the look's own sequence (as _interval)
        lo, hi = np.where(agree, cut_lo, lo), np.where(agree, cut_hi, hi)
    running_mean = np.cumsum(d) / np.arange(1, n + 1)
    return [(int(t), float(running_mean[t - 1]), float(a), float(b)) for t, a, b in zip(looks, lo, hi)]


def estimated_cost(pairs: int, cost_per_sample: float | None, arms: int = 2) -> float | None:
    """Dollars for ``pairs`` more pairs (each runs on every arm); None when the cost is unknown."""
    if cost_per_sample is None or not math.isfinite(cost_per_sample) or cost_per_sample <= 0:
        return None
    return pairs * arms * float(cost_per_sample)


def describe_more_samples(pairs: int | None, cost_per_sample: float | None, arms: int = 2) -> str:
    """ "run 32 more samples (~$1.40)"; a sample is one input run on both head and base.

    An unknown or zero cost is reported as unknown, never as $0.00 (costs through a proxy or
    for models without a price can read 0 without being free).
    """
    if pairs is None:
        return "more samples are unlikely to settle this task before the cap"
    if isinstance(pairs, bool) or not isinstance(pairs, int) or pairs < 0:
        raise ValueError(f"pairs must be a non-negative integer or None, got {pairs!r}")
    cost = estimated_cost(pairs, cost_per_sample, arms)
    noun = "sample" if pairs == 1 else "samples"
    if cost is None:
        return f"run {pairs} more {noun} (cost unknown)"
    if cost < 0.01:
        return f"run {pairs} more {noun} (~<$0.01)"
    return f"run {pairs} more {noun} (~${cost:,.2f})"
