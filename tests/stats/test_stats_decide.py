"""Per-task decisions: classical cross-checks, anytime-valid labels and their properties."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from evalrunner_assets.stats import (
    Pairing,
    ParamsError,
    StatsParams,
    _sequence,
    confidence_path,
    decide_task,
    describe_more_samples,
)
from evalrunner_assets.stats._classical import paired_t_interval

PARAMS = StatsParams()
FLIP = {"improved": "regressed", "regressed": "improved"}


def pairing_from_deltas(deltas) -> Pairing:
    """Scores whose differences are exactly ``deltas`` (head = base + delta)."""
    base = [0.0 if d >= 0 else 1.0 for d in deltas]
    head = [b + d for b, d in zip(base, deltas)]
    return Pairing.from_scores(head, base)


def test_classical_interval_matches_scipy_paired_t():
    rng = np.random.default_rng(3)
    head = rng.random(37)
    base = np.clip(head - rng.normal(0.05, 0.2, 37), 0, 1)
    lo, hi = paired_t_interval(head - base)
    ref = sps.ttest_rel(head, base).confidence_interval(0.95)
    assert (lo, hi) == pytest.approx((ref.low, ref.high), abs=1e-12)
    decision = decide_task(Pairing.from_scores(head, base), PARAMS, 1, forecast=False)
    assert decision.classical_interval == pytest.approx((ref.low, ref.high), abs=1e-12)


def test_classical_interval_edge_cases():
    assert paired_t_interval(np.array([0.5])) is None
    assert paired_t_interval(np.zeros(10)) == (0.0, 0.0)


def test_clear_improvement_is_labelled_with_consistent_numbers():
    deltas = [1.0] * 30 + [0.0] * 10
    d = decide_task(pairing_from_deltas(deltas), PARAMS, 3)
    assert d.label == "improved"
    assert d.decided_at is not None and d.decided_at >= PARAMS.min_pairs
    assert d.anytime_interval[0] >= 0.0
    assert (d.head_better, d.base_better, d.ties) == (30, 0, 10)
    assert d.p_value_adjusted <= PARAMS.alpha
    assert d.p_improvement > 0.99 and d.p_above_margin > 0.99
    assert d.delta == pytest.approx(0.75)
    json.dumps(d.to_dict(), allow_nan=False)


def test_no_label_before_min_pairs_even_with_overwhelming_evidence():
    params = StatsParams(min_pairs=20)
    assert decide_task(pairing_from_deltas([1.0] * 19), params, 1, forecast=False).label == "continue"
    assert decide_task(pairing_from_deltas([1.0] * 20), params, 1, forecast=False).label == "improved"


def test_all_ties_settle_unchanged_only_after_many_pairs():
    decision = decide_task(pairing_from_deltas([0.0] * 256), PARAMS, 1, forecast=False)
    assert decision.label == "unchanged"
    # +-0.05 is a narrow band: well over 100 pairs even when every pair ties.
    assert decision.decided_at > 100
    assert -PARAMS.margin <= decision.anytime_interval[0] and decision.anytime_interval[1] <= PARAMS.margin
    assert decide_task(pairing_from_deltas([0.0] * 60), PARAMS, 1, forecast=False).label == "continue"


def test_undecided_task_at_cap_or_out_of_budget_is_inconclusive():
    p = pairing_from_deltas([1.0, -1.0] * 10)
    assert decide_task(p, PARAMS, 1, forecast=False).label == "continue"
    capped = decide_task(p, PARAMS, 1, at_cap=True)
    assert capped.label == "inconclusive" and "cap" in capped.reason
    assert decide_task(p, PARAMS, 1, budget_exhausted=True).reason.startswith("run budget")


def test_failed_arms_make_the_task_inconclusive_with_the_reason():
    p = pairing_from_deltas([1.0] * 40)
    head_failed = decide_task(p, PARAMS, 1, head_failed=True)
    assert head_failed.label == "inconclusive" and "head" in head_failed.reason and head_failed.comparable
    base_failed = decide_task(p, PARAMS, 1, base_failed=True)
    assert base_failed.label == "inconclusive" and not base_failed.comparable


def test_undecided_task_estimates_more_pairs_and_their_cost():
    d = decide_task(pairing_from_deltas([1.0, 0.0, 0.0, 1.0, -1.0, 1.0, 0.0, 1.0, 0.0, 1.0]), PARAMS, 1)
    assert d.label == "continue"
    assert isinstance(d.more_pairs_needed, int) and 0 < d.more_pairs_needed <= PARAMS.cap - d.pairs
    assert describe_more_samples(32, 0.021875) == "run 32 more samples (~$1.40)"
    assert describe_more_samples(32, None) == "run 32 more samples (cost unknown)"
    assert describe_more_samples(32, 0.0) == "run 32 more samples (cost unknown)"
    assert "unlikely" in describe_more_samples(None, 0.1)


def test_empty_pairing_is_undecided():
    d = decide_task(Pairing.from_scores([], []), PARAMS, 2, forecast=False)
    assert d.label == "continue" and d.delta is None and d.anytime_interval == (-1.0, 1.0)
    json.dumps(d.to_dict(), allow_nan=False)


def test_confidence_path_reports_every_batch_boundary_and_narrows():
    p = pairing_from_deltas([1.0, 0.0, 0.0, -1.0, 0.0, 1.0, 0.0] * 10)  # 70 pairs
    path = confidence_path(p, PARAMS, 3)
    assert [t for t, *_ in path] == [8, 16, 24, 32, 40, 48, 56, 64, 70]
    widths = [hi - lo for _, _, lo, hi in path]
    assert all(b <= a + 1e-12 for a, b in zip(widths, widths[1:]))
    assert all(lo <= hi for _, _, lo, hi in path)


def test_bad_parameters_are_named():
    with pytest.raises(ParamsError, match="alpha"):
        StatsParams(alpha=0)
    with pytest.raises(ParamsError, match="cap"):
        StatsParams(cap=4, min_pairs=8)
    with pytest.raises(ParamsError, match="n_tasks"):
        decide_task(pairing_from_deltas([0.0]), PARAMS, 0)


def test_mixture_e_process_keeps_false_verdicts_below_alpha_under_no_change():
    # Mean-zero paired differences with ties, monitored after every pair up to 200.
    rng = np.random.default_rng(11)
    deltas = rng.choice([-1.0, 0.0, 1.0], p=[0.2, 0.6, 0.2], size=(400, 200))
    thr = _sequence.log_threshold(0.05, 1)
    cum = np.cumsum(_sequence.bet_log_factors(deltas, 0.0, +1), axis=1)
    crossed = (_sequence.mixture_log_wealth(cum) >= thr).any(axis=1)
    assert crossed.mean() <= 0.025 + 3 * math.sqrt(0.025 * 0.975 / 400)


deltas_strategy = st.lists(
    st.one_of(st.sampled_from([-1.0, 0.0, 1.0]), st.sampled_from([-2 / 3, -1 / 3, 1 / 3, 2 / 3])),
    min_size=0,
    max_size=60,
)
biased_strategy = st.tuples(
    st.integers(0, 40), st.integers(0, 20), st.integers(0, 10), st.randoms(use_true_random=False)
).map(lambda t: t[3].sample([1.0] * t[0] + [0.0] * t[1] + [-1.0] * t[2], t[0] + t[1] + t[2]))
fast = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@fast
@given(st.one_of(deltas_strategy, biased_strategy), st.integers(1, 5))
def test_swapping_head_and_base_flips_the_label_and_negates_delta(deltas, n_tasks):
    p = pairing_from_deltas(deltas)
    a = decide_task(p, PARAMS, n_tasks, forecast=False)
    b = decide_task(p.swapped(), PARAMS, n_tasks, forecast=False)
    assert b.label == FLIP.get(a.label, a.label)
    assert b.decided_at == a.decided_at
    if a.delta is not None:
        assert b.delta == pytest.approx(-a.delta, abs=1e-12)
        assert b.anytime_interval == pytest.approx((-a.anytime_interval[1], -a.anytime_interval[0]), abs=1e-5)
        assert (b.head_better, b.base_better) == (a.base_better, a.head_better)
        assert b.p_value == pytest.approx(a.p_value)


@fast
@given(st.one_of(deltas_strategy, biased_strategy), deltas_strategy)
def test_adding_pairs_never_moves_a_settled_label(deltas, more):
    before = decide_task(pairing_from_deltas(deltas), PARAMS, 1, forecast=False)
    after = decide_task(pairing_from_deltas(deltas + more), PARAMS, 1, forecast=False)
    if before.settled:
        assert (after.label, after.decided_at) == (before.label, before.decided_at)


@fast
@given(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=0, max_size=300), st.integers(1, 20))
def test_all_tie_data_never_yields_improved_or_regressed(scores, n_tasks):
    d = decide_task(Pairing.from_scores(scores, scores), PARAMS, n_tasks, forecast=False)
    assert d.label in ("continue", "unchanged")
    assert d.p_value == 1.0


@pytest.mark.parametrize("kind", ["binary", "continuous", "near-deterministic", "thirds"])
def test_block_scan_matches_the_full_path_of_every_test(kind):
    # The decision never builds the n x bets path; its crossings, current and largest
    # e-values must equal the full path's (on the differences rounded toward each null).
    rng = np.random.default_rng(abs(hash(kind)) % 2**32)
    for n in (1, 7, 63, 64, 65, 300, 700):
        if kind == "binary":
            d = rng.choice([-1.0, 0.0, 1.0], p=[0.2, 0.5, 0.3], size=n)
        elif kind == "continuous":
            d = np.clip(rng.random(n) - rng.random(n) + 0.05, -1, 1)
        elif kind == "near-deterministic":
            d = rng.choice([-1.0, 0.0, 1.0], p=[0.01, 0.98, 0.01], size=n)
        else:
            d = rng.choice([-2 / 3, -1 / 3, 0.0, 1 / 3, 2 / 3], size=n)
        for n_tasks in (1, 3):
            thr = _sequence.log_threshold(0.05, n_tasks)
            for d0, side in _sequence.test_boundaries(0.05):
                got = _sequence.scan(_sequence.Compressed(d, side), d0, side, thr, want_sup=True)
                path = _sequence.log_wealth_path(_sequence._rounded(d, side), d0, side)
                assert got.crossing == int(_sequence.first_crossings(path, thr))
                assert got.final == pytest.approx(path[-1], abs=1e-9)
                assert got.sup == pytest.approx(max(0.0, path.max()), abs=1e-9)


def test_rounding_toward_the_null_keeps_grid_values_and_never_helps_the_claim():
    d = np.array([1.0, 0.5, 0.25, -0.125, 0.0, 0.1 - 0.6, 1 / 3, -1 / 3, 0.123456])
    up, down = _sequence._rounded(d, +1), _sequence._rounded(d, -1)
    assert up[:6].tolist() == down[:6].tolist() == [1.0, 0.5, 0.25, -0.125, 0.0, -0.5]
    assert np.all(up <= d + 1e-12) and np.all(down >= d - 1e-12)
    assert np.all(d - up < 1 / _sequence.GRID) and np.all(down - d < 1 / _sequence.GRID)


def test_p_improvement_is_shown_only_beside_a_directional_label():
    # The case: 256 pairs, head all pass, base all pass but 5 -> inconclusive at the
    # cap, while the posterior alone would say 0.99.
    base = [1.0] * 256
    for i in (10, 60, 110, 160, 210):
        base[i] = 0.0
    capped = decide_task(Pairing.from_scores([1.0] * 256, base), StatsParams(), 3, at_cap=True)
    assert capped.label == "inconclusive"
    lo, hi = capped.anytime_interval
    assert lo < 0 < hi
    assert capped.p_improvement is None
    assert "inconclusive" in capped.p_improvement_note and f"{lo:+.3f}" in capped.p_improvement_note
    assert capped.to_dict()["p_improvement"] is None and capped.to_dict()["p_improvement_note"]
    improved = decide_task(pairing_from_deltas([1.0] * 30 + [0.0] * 10), PARAMS, 3)
    assert improved.p_improvement > 0.99 and improved.p_improvement_note is None
    unchanged = decide_task(pairing_from_deltas([0.0] * 256), PARAMS, 1, forecast=False)
    assert unchanged.label == "unchanged" and unchanged.p_improvement is None
    assert "within ±0.05" in unchanged.p_improvement_note


def test_interval_agrees_with_the_label_read_off_the_same_tests():
    rng = np.random.default_rng(4)
    for _ in range(60):
        n = int(rng.integers(8, 200))
        d = rng.choice([-1.0, 0.0, 1.0], p=[0.15, 0.5, 0.35], size=n)
        dec = decide_task(pairing_from_deltas(list(d)), PARAMS, 2, forecast=False)
        lo, hi = dec.anytime_interval
        if dec.label == "improved":
            assert lo >= 0
        if lo > 0:
            assert dec.label == "improved"
        if dec.label == "unchanged":
            assert -PARAMS.margin <= lo and hi <= PARAMS.margin


def test_large_pairings_settle_at_the_same_look_as_their_prefix_and_forecast_within_the_cap():
    rng = np.random.default_rng(9)
    n = 4096
    p = Pairing.from_scores(rng.random(n), rng.random(n))
    d = decide_task(p, StatsParams(cap=8192), 1)
    assert d.settled and d.decided_at is not None
    assert decide_task(p.prefix(d.decided_at), StatsParams(cap=8192), 1).label == d.label
    assert decide_task(p.prefix(d.decided_at - 1), StatsParams(cap=8192), 1, forecast=False).label == "continue"
    noisy = Pairing.from_scores(rng.binomial(1, 0.5, 300).astype(float), rng.binomial(1, 0.5, 300).astype(float))
    undecided = decide_task(noisy, StatsParams(cap=8192), 1)
    assert undecided.label == "continue"
    assert undecided.more_pairs_needed is None or 0 < undecided.more_pairs_needed <= 8192 - 300


# --- reasons name the real limit --------------------------------------------------------------


def test_a_one_sample_task_cannot_be_decided_rather_than_reaching_the_cap():
    d = decide_task(Pairing.from_scores([1.0], [0.0]), PARAMS, 1, at_cap=True, dataset_size=1, forecast=False)
    assert d.label == "inconclusive"
    assert d.reason == f"cannot be decided (1 sample): a label needs at least {PARAMS.min_pairs} pairs"
    assert "cap" not in d.reason


def test_a_dataset_that_runs_out_says_so_and_the_cap_and_budget_name_themselves():
    ties = Pairing.from_scores([0.5] * 20, [0.5] * 20)
    exhausted = decide_task(ties, PARAMS, 1, at_cap=True, dataset_size=20, forecast=False)
    assert exhausted.reason == "dataset exhausted (20 samples) before the interval settled"
    capped = decide_task(ties, StatsParams(cap=16), 1, at_cap=True, dataset_size=500, forecast=False)
    assert capped.reason == "reached the per-task cap of 16 pairs before the interval settled"
    spent = decide_task(ties, PARAMS, 1, budget_exhausted=True, budget_samples=40, dataset_size=500, forecast=False)
    assert spent.reason == "run budget of 40 samples exhausted before the interval settled"


# --- errored samples: scored 0, capped ---------------------------------------------------------


def rows_of(scores, error=None, where=None):
    return [
        {"sample_id": f"s{i}", "epoch": 1, "score": None if error else s, "error": error, "error_where": where}
        for i, s in enumerate(scores)
    ]


def test_a_head_that_raises_on_every_sample_is_broken_by_the_pr_with_the_cause():
    from evalrunner_assets.stats import pair_task

    pairing = pair_task(rows_of([0.0] * 16, "RuntimeError('boom')", "solver:agent"), rows_of([1.0] * 16))
    d = decide_task(pairing, PARAMS, 1, forecast=False, breakage=True)
    assert d.label == "broken" and d.broken_arms == ("head",)
    assert d.reason == (
        "broken by this PR: head: 16/16 samples raised RuntimeError('boom') in solver 'agent' "
        "(more than 50% of its inputs raised; base ran)"
    )
    assert d.p_improvement is None and d.decided_at is None


def test_without_breakage_a_raising_arm_keeps_the_symmetric_rule():
    # Candidates and leaderboards compare two configurations, neither a change to the other:
    # an arm over the error cap is a regression if the scores settled it, else inconclusive.
    from evalrunner_assets.stats import pair_task

    pairing = pair_task(rows_of([0.0] * 16, "RuntimeError('boom')", "solver:agent"), rows_of([1.0] * 16))
    d = decide_task(pairing, PARAMS, 1, forecast=False)
    assert d.label == "regressed" and not d.broken_arms
    assert d.reason == "head: 16/16 samples raised RuntimeError('boom') in solver 'agent'"


def test_both_arms_over_the_error_cap_are_broken_on_both_and_inconclusive():
    from evalrunner_assets.stats import pair_task

    pairing = pair_task(rows_of([0.0] * 16, "RuntimeError('boom')"), rows_of([0.0] * 16, "KeyError('x')"))
    d = decide_task(pairing, PARAMS, 1, forecast=False, breakage=True)
    assert d.label == "inconclusive" and d.broken_arms == ("head", "base")
    assert d.reason.startswith("broken on both head and base: head: 16/16 samples raised RuntimeError('boom'); ")
    assert "base: 16/16 samples raised KeyError('x')" in d.reason


def test_a_task_that_cannot_load_on_head_is_broken_and_on_both_inconclusive():
    from evalrunner_assets.stats import pair_task

    empty = pair_task([], [])
    err = "loading task 'evals/x.py@t' raised SyntaxError: invalid syntax (x.py, line 3)"
    d = decide_task(empty, PARAMS, 1, forecast=False, head_load_error=err)
    assert d.label == "broken" and d.head_failed and not d.base_failed and d.comparable
    assert d.reason == f"broken by this PR: the task cannot be loaded on head ({err})"
    both = decide_task(empty, PARAMS, 1, forecast=False, head_load_error=err, base_load_error=err)
    assert both.label == "inconclusive" and both.broken_arms == ("head", "base")
    assert both.reason.startswith("broken on both head and base")
    # The sandbox failing on head (infrastructure) is not the PR's fault: inconclusive, as before.
    # (load errors are the engine's finding about a PR; they need no ``breakage``.)
    infra = decide_task(empty, PARAMS, 1, forecast=False, head_failed=True)
    assert infra.label == "inconclusive" and infra.reason == "failed on head while base succeeded"


def test_an_arm_over_the_error_cap_gets_no_quality_verdict():
    from evalrunner_assets.stats import pair_task

    # Base fails every sample anyway: errors scored 0 tie with it, so the scores cannot show a
    # regression; but the head's code raising is the PR's breakage, never "unchanged".
    pairing = pair_task(rows_of([0.0] * 200, "RuntimeError('boom')", "solver:agent"), rows_of([0.0] * 200))
    d = decide_task(pairing, PARAMS, 1, forecast=False, breakage=True)
    assert d.label == "broken"
    assert d.reason.startswith("broken by this PR: head: 200/200 samples raised RuntimeError('boom') in solver 'agent'")
    # At or under the cap errors are plain failures: a quality verdict stays possible.
    half = rows_of([0.0] * 100, "RuntimeError('boom')") + [
        {"sample_id": f"t{i}", "epoch": 1, "score": 0.0, "error": None} for i in range(100)
    ]
    assert (
        decide_task(
            pair_task(
                half,
                rows_of([0.0] * 100)
                + [{"sample_id": f"t{i}", "epoch": 1, "score": 0.0, "error": None} for i in range(100)],
            ),
            PARAMS,
            1,
            forecast=False,
        ).label
        == "unchanged"
    )


def test_the_error_cap_waits_for_min_pairs_inputs_unless_the_task_is_at_its_limit():
    from evalrunner_assets.stats import pair_task

    pairing = pair_task(rows_of([0.0] * 3, "RuntimeError('boom')"), rows_of([0.0] * 3))
    assert decide_task(pairing, PARAMS, 1, forecast=False, breakage=True).label == "continue"
    last = decide_task(pairing, PARAMS, 1, at_cap=True, dataset_size=3, forecast=False, breakage=True)
    assert last.label == "broken" and last.reason.startswith("broken by this PR: head: 3/3 samples raised")


def test_error_cap_is_validated():
    with pytest.raises(ParamsError, match="error_cap"):
        StatsParams(error_cap=1.0)
