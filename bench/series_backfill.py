"""Backfilling a main-branch cohort series: wall time and samples, against fixed n = 200.

The example history padded to ``--commits`` first-parent commits (one real regression, a cohort
of harder evals added, the rest wording-only), measured oldest first in bubblewrap with the
default point settings (stop an eval at ±half-width or at the cap). Reported in the same run:

- wall time per point with up to ``--workers`` points measured at once (their tasks sharing
  the workers), against the same backfill measured one point at a time into its own lake (the
  baseline), and whether both flag the same commits;
- samples run by the sequential (stop-when-sure) points; a second backfill over the same range
  (samples run must be 0);
- samples a fixed n = 200 per eval and point would run (commits × evals × 200), and the
  half-width such a design gives on the measured means (normal approximation), beside the
  half-widths the sequential points reached;
- which commits were flagged.

    .venv/bin/python -m bench series_backfill [--commits N] [--cap N] [--quick]
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path


def main(flags: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="bench series_backfill")
    parser.add_argument("--commits", type=int, default=50)
    parser.add_argument("--cap", type=int, default=256)
    parser.add_argument("--half-width", type=float, default=0.05)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="3 commits, cap 16, for a smoke run")
    args, _ = parser.parse_known_args(flags)
    if args.quick:
        args.commits, args.cap = 3, 16

    from evalrunner_assets.example_repo import HISTORY_STEPS, build_example_history
    from evalrunner_assets.execution.backends import default_workers
    from evalrunner_assets.execution.bubblewrap import BubblewrapBackend
    from evalrunner_assets.execution.repo import RepoExport, RepoSource, export_commit
    from evalrunner_assets.execution.warm_pool import WarmPool
    from evalrunner_assets.pipeline import series
    from lake import Lake

    root = Path(tempfile.mkdtemp(prefix="bench-series-"))
    # Fewer commits than the example's history: its first steps (the base commit is always there).
    steps = HISTORY_STEPS[: max(0, args.commits - 1)]
    history_rows = build_example_history(
        root / "repo", extra_neutral=max(0, args.commits - 1 - len(HISTORY_STEPS)), steps=steps
    )
    src = RepoSource("example/support-agent", str(root / "repo"), cache_dir=str(root / "cache"))
    history = series.history_of(src.first_parent_history("main"))
    settings = series.SeriesSettings(cap=args.cap, half_width=args.half_width)
    backend, pool = BubblewrapBackend(), WarmPool()
    workers = args.workers or default_workers()

    def backfill(lake: Lake, points_at_once: int, exports: str) -> tuple[float, series.SeriesRun]:
        def export_for(sha: str) -> RepoExport:
            return export_commit(src, sha, root / exports)

        started = time.monotonic()
        run = series.SeriesRun(points=[])
        for _ in series.iter_series(
            lake,
            backend,
            "example/support-agent",
            export_for,
            history,
            history,
            settings,
            run,
            branch="main",
            pool=pool,
            workers=workers,
            points_at_once=points_at_once,
        ):
            pass
        return time.monotonic() - started, run

    lake = Lake(str(root / "lake"))
    wall, run = backfill(lake, workers, "exports")
    # The baseline, in the same run: the same backfill into its own lake, one point at a time
    # (each point's tasks still use every worker). It runs second, so one-off costs (the first
    # sandbox, caches) fall on the concurrent run and the ratio errs low.
    one_wall, one_run = backfill(Lake(str(root / "lake-one-at-a-time")), 1, "exports-one")
    wall2, run2 = backfill(lake, workers, "exports")
    pool.close_all()
    same_flags = [p["flagged"] for p in run.points] == [p["flagged"] for p in one_run.points]
    tasks = [t for p in run.points for t in p["tasks"].values() if t["mean"] is not None]
    samples = sum(t["samples"] for t in tasks)
    fixed = 200 * len(tasks)
    half_seq = [(t["interval"][1] - t["interval"][0]) / 2 for t in tasks]
    half_fixed = [1.96 * math.sqrt(max(t["mean"] * (1 - t["mean"]), 1e-9) / 200) for t in tasks]
    flagged = [p["commit"][:7] for p in run.points if p["flagged"]]
    kinds = {c.sha[:7]: c.kind for c in history_rows}
    print(f"commits {len(history)} · evals per point {len(tasks) / len(run.points):.1f} · workers {workers}")
    n = max(len(run.points), 1)
    print(f"one point at a time: wall {one_wall:7.1f} s · {one_wall / n:5.1f} s per point (baseline)")
    print(
        f"{workers} points at once  : wall {wall:7.1f} s · {wall / n:5.1f} s per point · "
        f"{one_wall / max(wall, 1e-9):.2f}x the baseline's speed · same flags: {same_flags}"
    )
    print(
        f"sequential points : wall {wall:7.1f} s · samples run {samples:6d} · "
        f"median half-width {statistics.median(half_seq):.3f} (anytime-valid)"
    )
    print(
        f"fixed n = 200     : samples {fixed:6d} ({fixed / max(samples, 1):.2f}× the sequential) · "
        f"median half-width {statistics.median(half_fixed):.3f} (fixed-n normal interval, not valid under peeking)"
    )
    print(
        f"second backfill   : wall {wall2:7.1f} s · points measured {len(run2.measured)} · "
        f"windows run {run2.windows_run}"
    )
    print(f"flagged commits   : {', '.join(f'{c} ({kinds.get(c)})' for c in flagged) or 'none'}")
    errored = sum(p["combined"]["errored"] for p in run.points)
    unmeasured = [p["commit"][:7] for p in run.points if p["combined"]["not_measured"]]
    print(f"errored inputs    : {errored} · points not measured: {', '.join(unmeasured) or 'none'}")
