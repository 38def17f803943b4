"""Time to verdict of one pull request through the daemon path against `evalrunner compare`,
measured in the same run, each on a fresh evalrunner home.

1. Baseline: `evalrunner compare` of the example repo's ``--variant`` against main (a
   subprocess, wall time from start to exit, which includes its own start-up).
2. Candidate: `evalrunner serve` (webhook receiver + `dagster dev`), started and ready first
   (its start-up is not counted), then a signed ``pull_request``/``opened`` delivery for the
   same commits to the real receiver, GitHub the REST stand-in of ``tests/helpers/github_standin.py``,
   no sensor called by hand: the time from the delivery's POST to the head's check run
   completing on the stand-in, and the Dagster runs the PR made.

Prints both times, the ratio (daemon / CLI; the target is ≤ 1.5) and the runs per PR.

    .venv/bin/python -m bench daemon_vs_cli [--variant=improve-runbook] [--rounds=1] [--quick]

``--quick`` caps both sides at 16 pairs per task (the CLI with ``--cap``; the daemon's request is
written to its lake before the delivery, which the PR sensor keeps as a redelivery would).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import dagster as dg

REPO = "example/support-agent"
PR = 7
TARGET_RATIO = 1.5
EVALRUNNER = str(Path(sys.executable).with_name("evalrunner"))


def _test_helpers() -> tuple[ModuleType, ModuleType]:
    """The GitHub stand-in and the served-daemon driver live with the tests (``tests/helpers/``)."""
    return importlib.import_module("tests.helpers.github_standin"), importlib.import_module(
        "tests.helpers.served_evalrunner"
    )


def _verdict(home: Path, head: str) -> str:
    from evalrunner_assets.pipeline.assess import load_result
    from lake import Lake

    result = load_result(Lake(str(home / "lake")), REPO, str(PR), head)
    return f"{result.verdict} ({result.samples_run} samples)" if result else "none"


def run_cli(home: Path, repo: Path, variant: str, head: str, cap: int | None) -> tuple[float, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALRUNNER_", "DAGSTER_"))}
    env["EVALRUNNER_HOME"] = str(home)
    cmd = [EVALRUNNER, "compare", "--repo", str(repo), "--repo-id", REPO, "--base", "main", "--head", variant]
    if cap is not None:
        cmd += ["--cap", str(cap)]
    started = time.monotonic()
    proc = subprocess.run([*cmd, "--pr", str(PR)], env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"evalrunner compare failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, _verdict(home, head)


def _write_capped_request(home: Path, variant: str, base: str, head: str, files: list[str], cap: int) -> None:
    """The request the PR sensor would open for the delivery, with ``cap``: a request already in
    the lake is the one in force (as for a redelivery)."""
    from datetime import UTC, datetime

    from evalrunner_assets.pipeline.spec import ComparisonRequest, request_path
    from lake import Lake

    request = ComparisonRequest.build(
        repo=REPO,
        source="",
        pr=str(PR),
        base_sha=base,
        head_sha=head,
        base_ref="main",
        head_ref=variant,
        changed_files=tuple(files),
        affinity="order",
        cap=cap,
        requested_at=datetime.now(UTC).isoformat(),
    )
    Lake(str(home / "lake")).write_once(request_path(REPO, str(PR), head), request.to_json())


def run_daemon(
    home: Path, repo: Path, variant: str, base: str, head: str, cap: int | None
) -> tuple[float, str, list[dg.DagsterRun], float]:
    """(seconds to verdict, verdict, the PR's Dagster runs, seconds the daemon took to be ready)."""
    standin_mod, served_mod = _test_helpers()
    from evalrunner_assets.pipeline.keys import comparison_key

    files = served_mod.changed_files(repo, base, head)
    if cap is not None:
        _write_capped_request(home, variant, base, head, files, cap)
    with standin_mod.GitHubStandin(token="bench-token") as standin:
        standin.add_repo(REPO)
        standin.add_pull(REPO, PR, head, base, files=files, head_ref=variant)
        started = time.monotonic()
        served = served_mod.ServedEvalrunner.start(home, standin, {REPO: repo})
        ready = time.monotonic() - started
        try:
            payload = served_mod.pull_request_delivery(
                "opened", repo=REPO, pr=PR, head=head, base=base, head_ref=variant
            )
            sent = time.monotonic()
            status, answer = served.deliver("pull_request", payload)
            if status != 202:
                raise SystemExit(f"the receiver answered {status}: {answer}")
            served.wait_for(lambda: served.completed_check_run(REPO, head), 900, "a verdict", every=0.1)
            seconds = time.monotonic() - sent
            key = comparison_key(REPO, str(PR), head)
            served.wait_for(lambda: all(r.is_finished for r in served.runs_for(key)), 120, "the runs ended")
            runs = served.all_runs()
        finally:
            served.stop()
    return seconds, _verdict(home, head), runs, ready


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="bench daemon_vs_cli")
    parser.add_argument("--variant", default="improve-runbook", help="the example repo's head variant")
    parser.add_argument("--rounds", type=int, default=1, help="measure this many times (fresh homes each)")
    parser.add_argument("--quick", action="store_true", help="cap 16 on both sides, for a smoke run")
    args, _ = parser.parse_known_args(argv)
    cap = 16 if args.quick else None
    from evalrunner_assets.example_repo import build_example_repo

    with tempfile.TemporaryDirectory(prefix="bench-daemon-vs-cli-") as tmp_dir:
        tmp = Path(tmp_dir)
        example = build_example_repo(tmp / "example-repo", [args.variant])
        base, head = example.base_sha, example.sha(args.variant)
        rows = []
        for n in range(args.rounds):
            cli_s, cli_verdict = run_cli(tmp / f"cli-home-{n}", example.path, args.variant, head, cap)
            print(f"round {n + 1}: evalrunner compare: {cli_s:.1f}s to verdict, {cli_verdict}", flush=True)
            daemon_s, daemon_verdict, runs, ready = run_daemon(
                tmp / f"daemon-home-{n}", example.path, args.variant, base, head, cap
            )
            jobs: dict[str, int] = {}
            for r in runs:
                jobs[r.job_name] = jobs.get(r.job_name, 0) + 1
            print(
                f"round {n + 1}: daemon (serve ready in {ready:.0f}s, not counted): {daemon_s:.1f}s from the "
                f"delivery to the completed check run, {daemon_verdict}; Dagster runs for the PR: {len(runs)} "
                f"{json.dumps(jobs)}, {[r.status.value for r in runs]}",
                flush=True,
            )
            rows.append((cli_s, daemon_s, len(runs)))
        for n, (cli_s, daemon_s, count) in enumerate(rows):
            ratio = daemon_s / cli_s
            verdict = "meets" if ratio <= TARGET_RATIO else "misses"
            print(
                f"round {n + 1}: CLI {cli_s:.1f}s, daemon {daemon_s:.1f}s, ratio {ratio:.2f}x "
                f"({verdict} the {TARGET_RATIO}x target), {count} Dagster run(s) per PR"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
