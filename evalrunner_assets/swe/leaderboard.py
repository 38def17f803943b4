"""The leaderboard of one task set: per agent version, the solve rate with an interval on the
headline tasks, a paired comparison against a reference version on the same task ids, and
cost per task.

- Headline tasks: the set's tasks minus those the latest gold check excluded (listed beside the
  board with the reason). Without a gold check every task counts and the board says so.
- Rows missing a reproducibility field (environment digest, commit, agent version, prompt
  version, seed) are not published: they are counted, never scored.
- ``invalid``/``error`` attempts (no sign the suite ran; infrastructure) are not scores either.
- Solve rate = passed attempts / scored attempts, with Wilson's 95% interval over attempts.
- Paired comparison: each task's mean over its samples is the unit; the version and the
  reference are paired on the task ids both have (the project's pairing rule and decision,
  ``stats.pair_task`` / ``stats.decide_task`` with the task set as one family): the mean
  difference, the anytime-valid interval and the classical paired-t interval (reference only).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from evalrunner_assets.stats import StatsParams, decide_task, pair_task, wilson_interval
from evalrunner_assets.swe.model import REPRO_FIELDS
from evalrunner_assets.swe.store import SweStore

SCORED = ("passed", "failed", "policy_failed")


def _publishable(row: dict[str, Any]) -> bool:
    return all(row.get(f) not in (None, "") for f in REPRO_FIELDS)


def _r(x: float | None) -> float | None:
    return None if x is None else round(float(x), 4)


def leaderboard(store: SweStore, task_set: str, reference: str | None = None) -> dict[str, Any]:
    ts = store.task_set(task_set)
    gold = store.gold(ts.name)
    excluded = {}
    if gold is not None:
        excluded = {tid: gold["tasks"][tid]["reason"] for tid in gold.get("excluded", []) if tid in gold["tasks"]}
    headline = [t.id for t in ts.tasks if t.id not in excluded]
    rows = store.attempts(task_ids=[t.id for t in ts.tasks])
    by_version: dict[str, list[dict[str, Any]]] = defaultdict(list)
    unpublished: dict[str, int] = defaultdict(int)
    for r in rows:
        if not _publishable(r):
            unpublished[r["agent_version"] or "?"] += 1
            continue
        by_version[r["agent_version"]].append(r)
    if reference is None and "baseline" in by_version:
        reference = "baseline"
    entries: list[dict[str, Any]] = []
    for version, vrows in sorted(by_version.items()):
        scored = [r for r in vrows if r["status"] in SCORED and r["task_id"] in headline]
        not_scored = sum(1 for r in vrows if r["status"] not in SCORED and r["task_id"] in headline)
        n = len(scored)
        passes = sum(1 for r in scored if r["passed"])
        ci = wilson_interval(passes, n) if n else None
        costs = [r["cost_usd"] for r in vrows if r["cost_usd"] is not None]
        tasks_covered = sorted({r["task_id"] for r in scored})
        entries.append(
            {
                "agent_version": version,
                "solve_rate": _r(passes / n) if n else None,
                "interval": [_r(ci[0]), _r(ci[1])] if ci else None,
                "attempts": n,
                "passed": passes,
                "policy_failed": sum(1 for r in scored if r["status"] == "policy_failed"),
                "not_scored": not_scored,
                "unpublished_rows": unpublished.get(version, 0),
                "tasks_covered": len(tasks_covered),
                "complete": set(tasks_covered) == set(headline),
                "cost_per_task_usd": _r(sum(costs) / len(costs)) if costs else None,
                "cost_known": len(costs) == len(vrows),
                "prompt_versions": sorted({r["prompt_version"] for r in vrows}),
                "paired_vs_reference": None,
            }
        )
    ref_rows = [r for r in by_version.get(reference or "", []) if r["status"] in SCORED and r["task_id"] in headline]
    for e in entries:
        if reference is None or e["agent_version"] == reference or not ref_rows:
            continue
        head = [r for r in by_version[e["agent_version"]] if r["status"] in SCORED and r["task_id"] in headline]
        e["paired_vs_reference"] = _paired(head, ref_rows, reference)
    entries.sort(key=lambda e: (e["solve_rate"] is None, -(e["solve_rate"] or 0.0), e["agent_version"]))
    for rank, e in enumerate(entries, 1):
        e["rank"] = rank
    return {
        "task_set": ts.name,
        "headline_tasks": headline,
        "excluded_tasks": [{"task_id": k, "reason": v} for k, v in sorted(excluded.items())],
        "gold_checked_at": gold.get("checked_at") if gold else None,
        "gold_note": None if gold else "no gold check yet: no task is excluded and no flaky test is dropped",
        "reference": reference,
        "entries": entries,
        "unpublished_versions": sorted(v for v in unpublished if v not in by_version),
    }


def _paired(head: list[dict[str, Any]], base: list[dict[str, Any]], reference: str) -> dict[str, Any] | None:
    def rows(rs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {
                "sample_id": r["task_id"],
                "epoch": int(r["sample_idx"]) + 1,
                "score": 1.0 if r["passed"] else 0.0,
                "error": None,
            }
            for r in rs
        ]

    pairing = pair_task(rows(head), rows(base))
    if pairing.n_pairs == 0:
        return None
    decision = decide_task(pairing, StatsParams(), 1, forecast=False)
    return {
        "reference": reference,
        "tasks_paired": pairing.n_pairs,
        "delta": _r(decision.delta),
        "anytime_interval": [_r(decision.anytime_interval[0]), _r(decision.anytime_interval[1])],
        "classical_interval": (
            [_r(decision.classical_interval[0]), _r(decision.classical_interval[1])]
            if decision.classical_interval
            else None
        ),
        "label": decision.label,
        "tasks_better": decision.head_better,
        "tasks_worse": decision.base_better,
        "ties": decision.ties,
    }
