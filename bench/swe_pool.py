"""SWE workspaces: what a warm pool saves per lease, and the queue age under contention.

1. N samples one after another, each leasing a workspace and holding it for WORK_S (the
   attempt), baseline ``max_ready=0`` (every lease copies the export: a cold start) against a
   warm pool (a copy prepared in advance, refilled in the background after each lease): the
   median time until a sample's workspace is ready, the total wall time and the ratio, on the
   bundled tinystats export and on a synthetic 2,000-file tree.
2. Queue age: 8 samples wanting a workspace at once from a pool of ``max_leased=2``, each
   holding it 0.2 s: the oldest waiter's age as ``stats()`` reports it, and the longest wait.

    .venv/bin/python -m bench swe_pool [--quick]
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from evalrunner_assets.execution.sandbox import RepoExport
from evalrunner_assets.execution.workspace_pool import WorkspacePool
from evalrunner_assets.swe.example import EXAMPLE_REPO_SOURCE


def _synthetic(root: Path, files: int) -> Path:
    for i in range(files):
        p = root / f"pkg{i % 40}" / f"mod{i}.py"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"VALUE = {i}\n" + "# padding\n" * 40)
    return root


WORK_S = 0.5


def _lease_times(pool: WorkspacePool, export: RepoExport, n: int) -> tuple[list[float], float]:
    times = []
    began = time.perf_counter()
    for _ in range(n):
        started = time.perf_counter()
        with pool.lease(export, "bench"):
            times.append(time.perf_counter() - started)
            time.sleep(WORK_S)
    return times, time.perf_counter() - began


def main(flags: list[str]) -> None:
    n = 5 if "--quick" in flags else 12
    work = Path(tempfile.mkdtemp(prefix="bench-swe-pool-"))
    try:
        trees = {
            "tinystats": EXAMPLE_REPO_SOURCE,
            "synthetic-2000": _synthetic(work / "synthetic", 2000),
        }
        for name, path in trees.items():
            export = RepoExport(repo="bench/x", commit="0" * 40, path=str(path), tree_digest=name)
            cold, cold_total = _lease_times(WorkspacePool(work / f"cold-{name}", max_ready=0), export, n)
            warm_pool = WorkspacePool(work / f"warm-{name}", max_ready=2)
            warm_pool.prepare(export, "bench", 1)
            warm, warm_total = _lease_times(warm_pool, export, n)
            c, w = statistics.median(cold), statistics.median(warm)
            print(
                f"{name:<16} lease median: cold {c * 1000:8.2f} ms  warm {w * 1000:8.2f} ms  |  "
                f"{n} samples x {WORK_S} s: cold {cold_total:6.2f} s  warm {warm_total:6.2f} s  "
                f"ratio {cold_total / warm_total:4.2f}x  (warm hits {warm_pool.warm_hits}, cold starts {warm_pool.cold_starts})"
            )
            warm_pool.close()
        export = RepoExport(repo="bench/x", commit="0" * 40, path=str(EXAMPLE_REPO_SOURCE), tree_digest="q")
        pool = WorkspacePool(work / "queue", max_ready=2, max_leased=2)
        ages: list[float] = []

        def sample() -> None:
            with pool.lease(export, "bench"):
                time.sleep(0.2)

        threads = [threading.Thread(target=sample) for _ in range(8)]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            ages.append(float(pool.stats()["queue_age_s"]))
            time.sleep(0.01)
        stats = pool.stats()
        print(
            f"queue: 8 samples, max_leased 2, 0.2 s each: peak queue age {max(ages):.2f} s, "
            f"longest wait {stats['max_wait_s']:.2f} s (ideal: 3 rounds x 0.2 s = 0.60 s)"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
