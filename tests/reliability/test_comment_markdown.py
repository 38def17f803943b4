"""The PR comment is valid GitHub Markdown for every shape of comparison document: each table
the GFM parser finds has as many cells in every row as in its header and delimiter rows."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from evalrunner_assets.report.markdown import render_comment

from ._gfm import _gfm, table_problems

pytestmark = pytest.mark.reliability

HEAD, BASE = "a" * 40, "b" * 40
TASK_IDS = ["triage/runbook_lookup", "odd|task`id", "pipes||and\\|escapes"]


def decision(label: str, *, empty: bool) -> dict[str, Any]:
    if empty:
        return {"label": label, "pairs": 0}
    return {
        "label": label,
        "pairs": 24,
        "head_better": 9,
        "base_better": 3,
        "ties": 12,
        "base_mean": 0.5,
        "head_mean": 0.75,
        "delta": 0.25,
        "anytime_interval": {"lo": -0.1, "hi": 0.62, "level": 0.975},
        "classical_interval": {"lo": 0.05, "hi": 0.45},
        "e_values": {"improved": 12.5, "regressed": 0.1},
        "p_above_margin": 0.8,
        "p_within_margin": 0.15,
        "p_below_margin": 0.05,
        "more_pairs_needed": 16,
    }


def document(verdict: str, label: str, *, empty: bool, failures: bool, head_ref: str) -> dict[str, Any]:
    tasks = {
        t: {
            "decision": decision(label, empty=empty),
            "head": {"samples": 24},
            "base": {"samples": 24},
            "failures": {"head": "sandbox_start: bwrap | exit 1\nsecond line | more"} if failures else {},
            "more_samples_hint": "16 more pairs (~$0.01) may decide it"
            if label in ("continue", "inconclusive")
            else None,
            "cost_per_sample_delta_usd": None if empty else 0.00012,
            "latency_p50_delta_s": None if empty else -0.2,
        }
        for t in TASK_IDS
    }
    return {
        "verdict": verdict,
        "head_sha": HEAD,
        "base_sha": BASE,
        "base_ref": "main",
        "head_ref": head_ref,
        "params": {"margin": 0.05},
        "final_verdict": {"reasons": ["a reason | with a pipe"], "p_improvement": None if empty else 0.91},
        "tasks": tasks,
        "task_order": TASK_IDS,
        "skipped_tasks": ["skipped|one"],
        "new_tasks": ["new`one"],
        "removed_tasks": [],
        "samples_run": 144,
        "samples_possible": 512,
        "spend_usd": 0.02,
        "spend_known": not empty,
        "trajectories": {"head": "/lake/raw/x"},
        "failed_windows": {"windows": 1, "samples": 4, "cost_usd": None, "unknown_windows": 1} if failures else {},
    }


MATRIX = list(
    itertools.product(
        [
            ("IMPROVED", "improved"),
            ("REGRESSED", "regressed"),
            ("UNCHANGED", "unchanged"),
            ("INCONCLUSIVE", "inconclusive"),
            ("RUNNING", "continue"),
        ],
        [False, True],  # a decision with no pairs yet (every optional figure missing)
        [False, True],  # infrastructure failures with pipes and line breaks in their causes
        ["feature/x", "we`ird|branch", ""],
    )
)


@pytest.mark.parametrize("verdict_label,empty,failures,head_ref", MATRIX)
def test_every_comment_table_has_matching_cell_counts(verdict_label, empty, failures, head_ref):
    verdict, label = verdict_label
    body = render_comment(document(verdict, label, empty=empty, failures=failures, head_ref=head_ref))
    assert table_problems(body) == []
    tables = [t for t in _gfm().parse(body) if t.type == "table_open"]
    assert len(tables) == 2  # the summary and the per-eval details both render as tables


def test_details_header_with_pipes_in_probabilities_renders_as_an_eight_column_table():
    body = render_comment(document("IMPROVED", "improved", empty=False, failures=False, head_ref="f"))
    html = _gfm().render(body)
    assert "<th>P(Δ&gt;m) · P(|Δ|&lt;m) · P(Δ&lt;−m)</th>" in html
    assert "<code>odd|task`id</code>" in html.replace("&quot;", '"')  # the pipe is text, not a cell border


def test_head_ref_is_named_in_the_comment():
    body = render_comment(document("IMPROVED", "improved", empty=False, failures=False, head_ref="feature/x"))
    assert "`feature/x` @ `aaaaaaa` vs `main`" in body
