"""Run verdict rules (issue 4, point 3)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from evalrunner_assets.stats import Pairing, StatsParams, decide_task, run_verdict

_BASE = decide_task(Pairing.from_scores([1.0] * 40, [0.0] * 40), StatsParams(), 1, forecast=False)


def task(label: str, **changes):
    return dataclasses.replace(_BASE, label=label, **changes)


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        (["continue", "improved"], "RUNNING"),
        (["continue", "regressed"], "RUNNING"),
        (["regressed", "improved"], "REGRESSED"),
        (["regressed", "inconclusive"], "REGRESSED"),
        (["improved", "inconclusive"], "INCONCLUSIVE"),
        (["unchanged", "inconclusive"], "INCONCLUSIVE"),
        (["improved", "unchanged"], "IMPROVED"),
        (["improved", "improved"], "IMPROVED"),
        (["unchanged", "unchanged"], "UNCHANGED"),
        ([], "INCONCLUSIVE"),
        (["broken", "improved"], "BROKEN"),
        (["broken", "regressed"], "BROKEN"),
        (["broken", "inconclusive"], "BROKEN"),
        (["continue", "broken"], "RUNNING"),
    ],
)
def test_run_verdict_rules(labels, expected):
    decisions = {f"t{i}": task(label) for i, label in enumerate(labels)}
    verdict = run_verdict(decisions)
    assert verdict.verdict == expected
    assert verdict.reasons
    json.dumps(verdict.to_dict(), allow_nan=False)


def test_candidate_failure_caps_the_verdict_at_inconclusive_with_the_reason():
    verdict = run_verdict({"a": task("improved")}, failures={"b": "sandbox exceeded its memory limit"})
    assert verdict.verdict == "INCONCLUSIVE"
    assert any(
        "b: failed on head while base succeeded (sandbox exceeded its memory limit)" in r for r in verdict.reasons
    )
    assert run_verdict({"a": task("regressed")}, failures={"b": "x"}).verdict == "REGRESSED"


def test_head_failed_decision_caps_the_verdict():
    failed = task("inconclusive", head_failed=True, reason="failed on head while base succeeded")
    verdict = run_verdict({"a": task("unchanged"), "b": failed})
    assert verdict.verdict == "INCONCLUSIVE"
    assert any(r.startswith("b: failed on head") for r in verdict.reasons)


def test_task_without_a_baseline_is_reported_but_not_compared():
    no_base = task(
        "inconclusive", base_failed=True, reason="failed on base while head succeeded: no baseline to compare with"
    )
    verdict = run_verdict({"a": task("unchanged"), "new": no_base})
    assert verdict.verdict == "UNCHANGED"
    assert any(r.startswith("new: not compared") for r in verdict.reasons)


def test_headline_p_improvement_combines_task_posteriors():
    up = decide_task(Pairing.from_scores([1.0] * 30, [0.0] * 30), StatsParams(), 2, forecast=False)
    down = decide_task(Pairing.from_scores([0.0] * 30, [1.0] * 30), StatsParams(), 2, forecast=False)
    assert run_verdict({"a": up, "b": up}).p_improvement > 0.99
    assert run_verdict({"a": down, "b": down}).p_improvement < 0.01
    assert 0.3 < run_verdict({"a": up, "b": down}).p_improvement < 0.7


def test_headline_p_improvement_only_beside_a_directional_verdict():
    up = decide_task(Pairing.from_scores([1.0] * 30, [0.0] * 30), StatsParams(), 2, forecast=False)
    undecided = decide_task(Pairing.from_scores([1.0, 0.0] * 10, [0.0, 1.0] * 10), StatsParams(), 2, forecast=False)
    assert run_verdict({"a": up, "b": up}).p_improvement_note is None
    running = run_verdict({"a": up, "b": undecided})
    assert running.verdict == "RUNNING" and running.p_improvement is None and "sampling" in running.p_improvement_note
    capped = run_verdict({"a": up, "b": dataclasses.replace(undecided, label="inconclusive")})
    assert capped.verdict == "INCONCLUSIVE" and capped.p_improvement is None
    assert capped.to_dict()["p_improvement_note"].startswith("not reported for an INCONCLUSIVE verdict")


def test_the_cause_of_errored_samples_is_a_reason_of_the_run_verdict():
    from evalrunner_assets.stats import pair_task

    head = [
        {
            "sample_id": f"s{i}",
            "epoch": 1,
            "score": None,
            "error": "RuntimeError('boom')",
            "error_where": "solver:agent",
        }
        for i in range(16)
    ]
    base = [{"sample_id": f"s{i}", "epoch": 1, "score": 1.0, "error": None} for i in range(16)]
    d = decide_task(pair_task(head, base), StatsParams(), 1, forecast=False, breakage=True)
    verdict = run_verdict({"t": d})
    # Every head sample raising while the base ran is the PR breaking the task: BROKEN, with the
    # cause (type, where, how many) as the first reason.
    assert d.label == "broken" and d.broken_arms == ("head",)
    assert verdict.verdict == "BROKEN" and verdict.broken == ("t",)
    assert verdict.reasons[0] == (
        "t: broken by this PR: head: 16/16 samples raised RuntimeError('boom') in solver 'agent' "
        "(more than 50% of its inputs raised; base ran)"
    )
    assert verdict.p_improvement is None


def test_a_broken_task_leads_the_reasons_and_blocks_beside_a_regression():
    decisions = {
        "a": task(
            "broken", reason="broken by this PR: head: 16/16 samples raised KeyError('x')", broken_arms=("head",)
        ),
        "b": task("regressed"),
        "c": task("improved"),
    }
    verdict = run_verdict(decisions)
    assert verdict.verdict == "BROKEN" and verdict.broken == ("a",)
    assert verdict.reasons[:2] == ("a: broken by this PR: head: 16/16 samples raised KeyError('x')", "regressed: b")
    assert verdict.p_improvement is None and "BROKEN" in verdict.p_improvement_note
    # While another task still samples, the breakage is named as already settled.
    running = run_verdict({**decisions, "d": task("continue")})
    assert running.verdict == "RUNNING" and "already broken by this PR: a" in running.reasons


def test_a_broken_new_task_makes_the_verdict_broken_and_both_arms_broken_stays_inconclusive():
    verdict = run_verdict({"a": task("unchanged")}, broken_new={"n": "broken by this PR: the eval it adds cannot load"})
    assert verdict.verdict == "BROKEN" and verdict.broken == ("n",)
    assert verdict.reasons[0] == "n: broken by this PR: the eval it adds cannot load"
    both = task("inconclusive", reason="broken on both head and base: …", broken_arms=("head", "base"))
    verdict = run_verdict({"a": task("unchanged"), "b": both})
    assert verdict.verdict == "INCONCLUSIVE" and verdict.broken_on_both == ("b",) and not verdict.broken
