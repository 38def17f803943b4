"""Gold-patch checks: run each task's gold patch several times, find flaky tests and tasks whose
gold fails.

Per test: ``flake_rate`` = failed runs / runs; *flaky* when it both passed and failed, *always
failing* when it never passed. Per task:

- ``ok``: every required test passed in every run;
- ``tests_dropped``: some required tests are flaky; they are dropped from grading and the task
  stays (at least one fail-to-pass test is left, and no required test always fails);
- ``excluded``: the gold patch fails (a required test always fails, a run was invalid) or
  dropping the flaky tests would leave no fail-to-pass test. Excluded tasks leave the headline
  score and are listed beside it with the reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from evalrunner_assets.swe.grading import Grade
from evalrunner_assets.swe.model import GOLD_RUNS_MIN, SweError, SweTask


def classify_task(task: SweTask, grades: list[Grade]) -> dict[str, Any]:
    """The gold verdict of one task from its gold runs' grades (pure)."""
    runs = len(grades)
    if runs < GOLD_RUNS_MIN:
        raise SweError(f"a gold check needs at least {GOLD_RUNS_MIN} runs, got {runs}")
    invalid = [g.reason for g in grades if g.status == "invalid" or not g.patch_applied]
    required = list(dict.fromkeys(task.fail_to_pass + task.pass_to_pass))
    seen = sorted(set(required).union(*(g.results.keys() for g in grades)))
    failures: Counter[str] = Counter()
    for g in grades:
        for t in seen:
            if g.results.get(t) != "passed":
                failures[t] += 1
    tests = []
    for t in seen:
        f = failures[t]
        cls = "stable" if f == 0 else ("always_failing" if f == runs else "flaky")
        tests.append({"test_id": t, "runs": runs, "failures": f, "flake_rate": f / runs, "classification": cls})
    by_id = {r["test_id"]: r["classification"] for r in tests}
    flaky = sorted(t for t in required if by_id[t] == "flaky")
    always = sorted(t for t in required if by_id[t] == "always_failing")
    f2p_left = [t for t in task.fail_to_pass if t not in flaky]
    if invalid:
        status, reason = "excluded", f"gold run invalid: {invalid[0]}"
    elif always:
        status, reason = "excluded", f"gold patch fails: {', '.join(always[:3])} failed in every run"
    elif flaky and not f2p_left:
        status, reason = "excluded", f"every fail-to-pass test is flaky under gold: {', '.join(flaky[:3])}"
    elif flaky:
        status, reason = "tests_dropped", f"flaky tests dropped from grading: {', '.join(flaky)}"
    else:
        status, reason = "ok", f"gold passed {runs}/{runs} runs"
    return {
        "task_id": task.id,
        "status": status,
        "reason": reason,
        "runs": runs,
        "gold_passes": sum(1 for g in grades if g.passed),
        "dropped_tests": flaky if status == "tests_dropped" else [],
        "tests": tests,
    }


def gold_check(
    tasks: list[SweTask], grade_gold: Callable[[SweTask], Grade], runs: int = GOLD_RUNS_MIN
) -> dict[str, Any]:
    """Run every task's gold patch ``runs`` times (each in a fresh sandbox, via ``grade_gold``)."""
    if runs < GOLD_RUNS_MIN:
        raise SweError(f"gold runs must be at least {GOLD_RUNS_MIN}, got {runs}")
    verdicts = {t.id: classify_task(t, [grade_gold(t) for _ in range(runs)]) for t in tasks}
    return {
        "runs": runs,
        "tasks": verdicts,
        "excluded": sorted(k for k, v in verdicts.items() if v["status"] == "excluded"),
        "dropped_tests": {k: v["dropped_tests"] for k, v in verdicts.items() if v["dropped_tests"]},
    }
