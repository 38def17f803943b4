"""The PR comment is valid GitHub Markdown for every shape of comparison document: each table
the GFM parser finds has as many cells in every row as in its header and delimiter rows."""

from __future__ import annotations

import itertools
from dataclasses import asdict
from typing import Any

import pytest

from evalrunner_assets.documents.comparison import ComparisonDocument
from evalrunner_assets.report.markdown import render_comment
from evalrunner_assets.stats import StatsParams

from ._gfm import _gfm, table_problems

pytestmark = pytest.mark.reliability

HEAD, BASE = "a" * 40, "b" * 40
TASK_IDS = ["triage/runbook_lookup", "odd|task`id", "pipes||and\\|escapes"]
FAILED_TOKENS = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}


def decision(label: str, *, empty: bool) -> dict[str, Any]:
    shared = {"label": label, "n_tasks": len(TASK_IDS), "task_alpha": 0.05 / len(TASK_IDS)}
    if empty:
        return {**shared, "pairs": 0, "anytime_interval": {"lo": None, "hi": None, "level": 0.983, "kind": "cs"}}
    return {
        **shared,
        "pairs": 24,
        "head_better": 9,
        "base_better": 3,
        "ties": 12,
        "base_mean": 0.5,
        "head_mean": 0.75,
        "delta": 0.25,
        "anytime_interval": {"lo": -0.1, "hi": 0.62, "level": 0.975, "kind": "cs"},
        "classical_interval": {"lo": 0.05, "hi": 0.45, "level": 0.95, "kind": "t"},
        "e_values": {"improved": 12.5, "regressed": 0.1},
        "p_above_margin": 0.8,
        "p_within_margin": 0.15,
        "p_below_margin": 0.05,
        "more_pairs_needed": 16,
    }


def arm() -> dict[str, Any]:
    tokens = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    return {"samples": 24, "errors": 0, **tokens, "cost_usd": None, "cost_per_sample_usd": None, "latency_p50_s": None}


def document(verdict: str, label: str, *, empty: bool, failures: bool, head_ref: str) -> ComparisonDocument:
    tasks = {
        t: {
            "decision": decision(label, empty=empty),
            "affinity": "matched",
            "pairs_possible": 24,
            "pairs_limit": 256,
            "positions_landed": 24,
            "windows": 1,
            "head": arm(),
            "base": arm(),
            "failures": {"head": "sandbox_start: bwrap | exit 1\nsecond line | more"} if failures else {},
            "more_samples_hint": "16 more pairs (~$0.01) may decide it"
            if label in ("continue", "inconclusive")
            else None,
            "cost_per_sample_delta_usd": None if empty else 0.00012,
            "latency_p50_delta_s": None if empty else -0.2,
        }
        for t in TASK_IDS
    }
    doc = {
        "comparison": f"acme/repo#1@{HEAD}",
        "repo": "acme/repo",
        "pr": "1",
        "status": "running" if verdict == "RUNNING" else "complete",
        "verdict": verdict,
        "head_sha": HEAD,
        "base_sha": BASE,
        "base_ref": "main",
        "head_ref": head_ref,
        "params": asdict(StatsParams()),
        "final_verdict": {
            "verdict": verdict,
            "reasons": ["a reason | with a pipe"],
            "p_improvement": None if empty else 0.91,
        },
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
        "failed_windows": {"windows": 1, "samples": 4, "cost_usd": None, "unknown_windows": 1, **FAILED_TOKENS}
        if failures
        else None,
    }
    return ComparisonDocument.model_validate(doc)


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
