"""Group-sequential sign tests: boundaries, exact error, the randomized reduction, extension."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from evalrunner_assets.stats import Pairing, StatsParams, _groupseq, confidence_path, decide_task
from evalrunner_assets.stats._decide import task_design

LOOKS = _groupseq.design_looks(256, 8)


def test_looks_are_the_window_ends_up_to_the_horizon():
    assert LOOKS[:9] == (8, 16, 24, 32, 40, 48, 56, 64, 72)
    assert LOOKS[-4:] == (192, 216, 240, 256)
    assert _groupseq.design_looks(100, 8)[-2:] == (96, 100)  # a smaller dataset ends the design
    assert _groupseq.design_looks(256, 20)[0] == 20  # no look before min_pairs
    assert _groupseq.design_horizon(256, 100) == 100 and _groupseq.design_horizon(256, None) == 256


def test_normal_boundaries_spend_what_they_promise_by_independent_simulation():
    """Brownian paths observed at the looks cross the boundaries with probability alpha share(n_k)
    by each look (Monte Carlo, independent of the recursive integration), for the default
    two-phase spending and for a power family."""
    alpha = 0.025
    for spending in (_groupseq.SPENDING, _groupseq.PowerSpending(1.0)):
        _check_normal_boundaries_by_simulation(alpha, spending)


def _check_normal_boundaries_by_simulation(alpha: float, spending: _groupseq.Spending) -> None:
    z = np.array(_groupseq.z_boundaries(LOOKS, 256, alpha, spending))
    rng = np.random.default_rng(11)
    t = np.array(LOOKS, dtype=float)
    paths = 200_000
    steps = rng.standard_normal((paths, t.size)) * np.sqrt(np.diff(np.concatenate([[0.0], t])))
    crossed = np.cumsum(steps, axis=1) / np.sqrt(t) >= z
    by_look = np.logical_or.accumulate(crossed, axis=1).mean(axis=0)
    target = _groupseq.spent(LOOKS, 256, alpha, spending)
    se = np.sqrt(target * (1 - target) / paths)
    assert np.all(np.abs(by_look - target) <= 4 * se + 1e-4)


def test_two_phase_spending_reaches_its_share_at_the_knee_and_everything_at_the_horizon():
    spending = _groupseq.TwoPhaseSpending()
    for horizon, knee in ((256, 64), (1024, 64), (100, 25)):  # a pair count, or a quarter of a small horizon
        n = np.arange(0, horizon + 1)
        share = spending.share(n, horizon)
        assert share[0] == 0.0 and share[-1] == pytest.approx(1.0) and np.all(np.diff(share) >= 0)
        assert share[knee] == pytest.approx(spending.knee_share)
        half = spending.share(np.array([knee / 2]), horizon)[0]
        assert half == pytest.approx(spending.knee_share / 8)  # t^3 before the knee
    assert spending.share(np.array([300]), 256)[0] == pytest.approx(1.0)  # past the horizon: all spent
    allowed = _groupseq.spent(LOOKS, 256, 0.025)
    assert allowed[LOOKS.index(64)] == pytest.approx(0.025 * 0.35) and allowed[-1] == pytest.approx(0.025)


def test_normal_boundaries_fall_across_looks_and_with_more_alpha():
    """With spending at least linear in information (rho >= 1) the boundary falls look by look;
    a larger alpha lowers the first boundary and the final one."""
    for rho in (0.75, 1.0, 3.0):
        z = np.array(_groupseq.z_boundaries(LOOKS, 256, 0.025, _groupseq.PowerSpending(rho)))
        if rho >= 1:
            assert np.all(np.diff(z) < 0)
        looser = np.array(_groupseq.z_boundaries(LOOKS, 256, 0.05, _groupseq.PowerSpending(rho)))
        assert looser[0] < z[0] and looser[-1] < z[-1]


def _enumerated_error(discordant: list[int], bounds: np.ndarray) -> float:
    """P(some look's up-count reaches its boundary) by enumerating every sign sequence."""
    total = discordant[-1]
    hits = 0
    for signs in itertools.product((0, 1), repeat=total):
        ups = np.cumsum(signs)
        if any(ups[d - 1] >= c for d, c in zip(discordant, bounds) if d > 0):
            hits += 1
    return hits / 2**total


@pytest.mark.parametrize("discordant", [[3, 5, 8, 12], [0, 2, 2, 9, 14], [6, 6, 11, 13]])
def test_exact_sign_boundaries_error_matches_enumeration_and_never_exceeds_the_spending(discordant):
    allowed = np.array([0.01, 0.02, 0.04, 0.06, 0.08])[: len(discordant)]
    bounds, spent = _groupseq.sign_boundaries(np.array(discordant), allowed)
    assert _enumerated_error(discordant, bounds) == pytest.approx(spent[-1], abs=1e-12)
    assert np.all(spent <= allowed) and np.all(np.diff(spent) >= 0)
    # tight: lowering any boundary by one would overspend at that look
    for k in range(len(discordant)):
        if bounds[k] <= discordant[k] and bounds[k] > 0:
            lowered = bounds.copy()
            lowered[k] -= 1
            assert _enumerated_error(discordant[: k + 1], lowered[: k + 1]) > allowed[k]


def test_batch_and_single_path_recursions_agree():
    rng = np.random.default_rng(5)
    gaps = np.diff(np.concatenate([[0], LOOKS]))
    discordant = np.cumsum(rng.binomial(gaps[None, :].repeat(200, 0), rng.random((200, 1))), axis=1)
    allowed = _groupseq.spent(LOOKS, 256, 0.025)
    single = np.array([_groupseq.sign_boundaries(row, allowed)[0] for row in discordant])
    assert np.array_equal(single, _groupseq.sign_boundaries_batch(discordant, allowed))


def test_all_discordant_walk_spends_at_most_alpha_and_nearly_all_of_it():
    allowed = _groupseq.spent(LOOKS, 256, 0.025)
    _, spent = _groupseq.sign_boundaries(np.array(LOOKS), allowed)
    assert spent[-1] <= 0.025 and spent[-1] > 0.02


def test_randomized_reduction_keeps_binary_scores_and_the_mean():
    d = np.array([1.0, 0.0, -1.0, 1.0])
    assert np.array_equal(_groupseq.signs(d), d)
    rng = np.random.default_rng(2)
    cont = rng.uniform(-1, 1, 8192) * rng.random(8192)
    b = _groupseq.signs(cont)
    assert set(np.unique(b)) <= {-1.0, 0.0, 1.0}
    assert abs(b.mean() - cont.mean()) < 4 * np.sqrt(np.mean(np.abs(cont)) / cont.size)
    assert np.array_equal(_groupseq.signs(-cont), -b)  # swapping head and base swaps the signs


def test_skewed_null_stays_valid_where_a_t_test_would_not():
    """A mean-zero difference that is usually slightly positive and rarely -1 (an agent that
    is a bit better on most inputs and crashes on a few): false 'improved' stays within the
    test's level (binomial 99.9% margin over 4,000 tasks)."""
    rng = np.random.default_rng(8)
    p_crash = 0.05
    small = p_crash / (1 - p_crash)
    d = np.where(rng.random((4000, 256)) < p_crash, -1.0, small)
    design = task_design(StatsParams(), 1)
    up, _ = _groupseq.first_rejections(d, design.looks, design.allowed)
    level = design.allowed[-1]
    assert np.mean(up > 0) <= level + 3.1 * np.sqrt(level * (1 - level) / 4000)


def _pairing(deltas: np.ndarray) -> Pairing:
    base = np.where(deltas >= 0, 0.0, 1.0)
    return Pairing.from_scores(base + deltas, base)


def test_eval_more_keeps_the_design_cap_and_its_decisions():
    """Raising the cap (``/eval more``) leaves the looks, their boundaries and every decision up
    to the design cap unchanged; past it the group-sequential tests claim nothing more."""
    original = StatsParams(cap=256)
    extended = StatsParams(cap=512, design_cap=256)
    a, b = task_design(original, 3), task_design(extended, 3)
    assert a.looks == b.looks and np.array_equal(a.allowed, b.allowed)
    rng = np.random.default_rng(4)
    for _ in range(20):
        d = (rng.random(256) < 0.3).astype(float) - (rng.random(256) < 0.25)
        x, y = (
            decide_task(_pairing(d), original, 3, forecast=False),
            decide_task(_pairing(d), extended, 3, forecast=False),
        )
        assert (x.label, x.decided_at) == (y.label, y.decided_at)
    # No effect in the first 256 pairs, +0.15 after: a design over 512 pairs settles it at a
    # look past 256; the design over 256 has spent its error by then, and the reserved
    # e-process alone does not reach its (higher) threshold.
    rng = np.random.default_rng(0)
    first = (rng.random(256) < 0.3) * 1.0 - (rng.random(256) < 0.3)
    later = (rng.random(256) < 0.35) * 1.0 - (rng.random(256) < 0.2)
    d = np.concatenate([first, later])
    fresh = decide_task(_pairing(d), StatsParams(cap=512), 3, forecast=False)
    kept = decide_task(_pairing(d), extended, 3, forecast=False)
    assert fresh.label == "improved" and fresh.decided_at is not None and fresh.decided_at > 256
    assert kept.label == "continue"


def test_design_cap_must_lie_between_min_pairs_and_cap():
    from evalrunner_assets.stats import ParamsError

    with pytest.raises(ParamsError, match="design_cap"):
        StatsParams(cap=256, design_cap=512)
    with pytest.raises(ParamsError, match="design_cap"):
        StatsParams(cap=256, design_cap=4)
    assert StatsParams(cap=512, design_cap=256).horizon_cap == 256


def test_chart_path_is_cut_at_zero_from_the_look_the_sign_test_settled():
    rng = np.random.default_rng(9)
    d = (rng.random(200) < 0.45) * 1.0 - (rng.random(200) < 0.2)
    decision = decide_task(_pairing(d), StatsParams(), 1, forecast=False)
    assert decision.label == "improved" and decision.decided_at is not None
    path = confidence_path(_pairing(d), StatsParams(), 1)
    for pairs, _, lo, hi in path:
        if pairs >= decision.decided_at:
            assert lo >= 0.0 and lo <= hi
    assert path[-1][2] == pytest.approx(decision.anytime_interval[0])
