"""The trajectory miner on trajectories built in the test (the lake-backed path is exercised on a
real comparison's lake in tests/pipeline/test_pipeline_e2e.py)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import false_discovery_control, fisher_exact

from evalrunner_assets.mining.features import Feature
from evalrunner_assets.mining.miner import NothingToContrast, benjamini_hochberg, contrast
from tests.helpers.trajectories import trajectory


def planted_groups(failing_with: int = 14, failing: int = 21, passing: int = 40):
    """Failing trajectories page on-call without searching the runbooks first in ``failing_with``
    of ``failing``; passing ones always search first."""
    fail = [
        trajectory(i, ["page_oncall"] if i < failing_with else ["runbook_search", "page_oncall"], score=0.0)
        for i in range(failing)
    ]
    passed = [trajectory(100 + i, ["runbook_search", "page_oncall"], score=1.0) for i in range(passing)]
    return fail, passed


def test_a_planted_pattern_is_found_with_its_evidence_count_and_samples():
    fail, passed = planted_groups()
    result = contrast(fail, passed)
    top = result.findings[0]
    # "never calls runbook_search" and "page_oncall without runbook_search first" are the same
    # trajectories here: one finding, the other name kept as an alias.
    assert {top.feature.name, *top.aliases} >= {
        "never calls runbook_search",
        "page_oncall without runbook_search first",
    }
    assert (top.failing_with, top.failing, top.passing_with, top.passing) == (14, 21, 0, 40)
    assert top.headline.startswith("Pattern seen in 14 / 21 failing samples (0 / 40 passing): ")
    assert top.samples == tuple(f"s{i:03d}" for i in range(14))
    # Its p-value is the one-sided Fisher exact test's.
    assert top.p_value == pytest.approx(fisher_exact([[14, 7], [0, 40]], alternative="greater").pvalue)
    assert top.lift == float("inf") and top.q_value <= 0.05


def test_a_note_attaches_to_the_event_where_the_pattern_shows():
    t = trajectory(1, ["status", "page_oncall", "runbook_search"], score=0.0, errors=("runbook_search",))
    # seqs: status 10, page_oncall 20, runbook_search 30
    assert (
        Feature(
            "page_oncall without runbook_search first", "without_first", ("runbook_search", "page_oncall")
        ).event_seq(t)
        == 20
    )
    assert Feature("status before page_oncall", "before", ("status", "page_oncall")).event_seq(t) == 20
    assert Feature("tool error in runbook_search", "tool_error", ("runbook_search",)).event_seq(t) == 30
    assert Feature("never calls lookup", "never_calls", ("lookup",)).event_seq(t) is None
    fail, passed = planted_groups()
    result = contrast(fail, passed)
    assert [t.sample_id for t in result.failing_with(result.findings[0])] == [f"s{i:03d}" for i in range(14)]


def test_outcome_independent_features_are_not_reported():
    rng = np.random.default_rng(5)
    tools = ["a", "b", "c", "d"]

    def random_calls() -> list[str]:
        calls = [t for t in tools if rng.random() < 0.5]
        rng.shuffle(calls)
        return calls

    fail = [trajectory(i, random_calls(), score=0.0) for i in range(200)]
    passed = [trajectory(1000 + i, random_calls(), score=1.0) for i in range(200)]
    result = contrast(fail, passed)
    assert result.tested > 20
    assert result.findings == []


def test_benjamini_hochberg_matches_scipy():
    p = np.array([0.001, 0.04, 0.03, 0.2, 0.5, 0.0005, 0.04])
    assert benjamini_hochberg(p) == pytest.approx(false_discovery_control(p, method="bh"))


def test_too_few_failures_is_nothing_to_contrast_with_the_counts():
    fail, passed = planted_groups(failing_with=2, failing=3)
    with pytest.raises(
        NothingToContrast, match=r"nothing to contrast in qa/kept: 3 failing and 40 passing trajectories"
    ):
        contrast(fail, passed, what="qa/kept")
    with pytest.raises(ValueError, match="fdr must be between 0 and 1"):
        contrast(*planted_groups(), fdr=1.5)


def test_a_sample_that_raised_failed_and_an_unscored_one_is_left_out():
    assert trajectory(1, [], score=None, error="RuntimeError('boom')").passed(1.0) is False
    assert trajectory(2, [], score=None).passed(1.0) is None
    assert trajectory(3, [], score=0.5).passed(1.0) is False
    assert trajectory(4, [], score=1.0).passed(1.0) is True


def test_tool_errors_are_features():
    fail = [trajectory(i, ["lookup"], score=0.0, errors=("lookup",)) for i in range(12)]
    passed = [trajectory(100 + i, ["lookup"], score=1.0) for i in range(12)]
    names = {n for f in contrast(fail, passed).findings for n in (f.feature.name, *f.aliases)}
    assert "tool error in lookup" in names
