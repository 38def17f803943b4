"""Ingest throughput (samples/s) on a real 10k-sample Inspect log, with where the time goes.

Baseline, measured in the same run: the naive path — ``read_eval_log`` of the whole log, then a
Python loop building one row dict per sample. Candidates: ``ingest_log_file(events=False)``
(samples table from Inspect's sample summaries), a full ``land_batch`` (samples + events Parquet
+ record into a temporary lake) forced through ``inspect_ai.log`` (the path before the direct
reader, and still the path of logs it does not recognize), and the same ``land_batch`` through
the direct ``.eval`` reader (``lake.eval_archive``), which is what landing uses.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from lake.batch import RunSettings

T = TypeVar("T")

CACHE = Path(os.environ.get("EVALRUNNER_BENCH_CACHE", Path(tempfile.gettempdir()) / "evalrunner-bench"))


def trivial_log(n: int = 10_000) -> Path:
    """A real .eval log of ``n`` one-turn samples from Inspect on a trivial task (cached; ≈2 min once)."""
    target = CACHE / f"trivial-{n}.eval"
    if target.exists():
        return target
    from tests.helpers.inspect_models import run_probe

    print(f"producing a {n}-sample Inspect log (once; cached at {target}) …", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        log = run_probe(tmp, n=n, max_samples=200)
        if log.status != "success":
            raise RuntimeError(f"benchmark log run ended with status {log.status}")
        CACHE.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log.location, target)
    return target


def _timed(fn: Callable[[], T]) -> tuple[T, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _naive_rows(path: Path) -> int:
    from inspect_ai.log import read_eval_log
    from inspect_ai.scorer import value_to_float

    to_float = value_to_float()
    log = read_eval_log(str(path))
    rows = []
    for s in log.samples or []:
        score = next(iter(s.scores.values())).value if s.scores else None
        usage = list(s.model_usage.values())
        rows.append(
            {
                "sample_id": str(s.id),
                "epoch": s.epoch,
                "score": to_float(score) if score is not None else None,
                "error": s.error.message if s.error else None,
                "input_tokens": sum(u.input_tokens for u in usage),
                "output_tokens": sum(u.output_tokens for u in usage),
                "total_time": s.total_time,
            }
        )
    return len(rows)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench ingest")
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="a small log (2,000 samples), for a smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.samples = 2_000

    from lake import BatchKey, Window, open_lake
    from lake.ingest import ingest_log_file, land_batch, parquet_bytes

    path = trivial_log(args.samples)
    data = path.read_bytes()
    print(f"log: {path} ({len(data) / 1e6:.1f} MB)")

    n, t_base = _timed(lambda: _naive_rows(path))
    print(f"baseline  read_eval_log + row loop (samples only): {t_base:6.2f} s  {n / t_base:8.0f} samples/s")

    (samples, _), t_fast = _timed(lambda: ingest_log_file(path, events=False))
    print(
        f"candidate ingest_log_file(events=False) (summaries): {t_fast:6.2f} s  "
        f"{samples.num_rows / t_fast:8.0f} samples/s  ratio {t_base / t_fast:.1f}x"
    )

    key = BatchKey(
        repo="bench/ingest",
        commit="c" * 40,
        task="trivial",
        spec="trivial.py",
        window=Window(0, n),
        config_digest="x",
        backend="none",
        runtime_digest="x",
        settings=RunSettings(model="lakeprobe/probe-1", seed=0, epochs=1),
    )
    with tempfile.TemporaryDirectory() as tmp, _inspect_path_only():
        record, t_slow = _timed(lambda: land_batch(open_lake(tmp), key, data))
    print(
        f"candidate land_batch via inspect_ai.log (before):   {t_slow:6.2f} s  "
        f"{record.sample_rows / t_slow:8.0f} samples/s  ratio {t_base / t_slow:.2f}x  "
        f"({record.event_rows} events)"
    )
    from lake import read_pool
    from lake.raw_rows import warm_reader

    def land_runs(processes: str) -> list[float]:
        os.environ["EVALRUNNER_LAND_PROCESSES"] = processes
        runs = []
        for _ in range(3):
            with tempfile.TemporaryDirectory() as tmp:
                _, t = _timed(lambda: land_batch(open_lake(tmp), key, data))
            runs.append(t)
        return runs

    saved = os.environ.get("EVALRUNNER_LAND_PROCESSES")
    workers = read_pool.available_cpus()
    _, t_start = _timed(lambda: read_pool.wait_ready(workers, timeout=120, warm=warm_reader))
    try:
        here = land_runs("0")
        pooled = land_runs(str(workers))
    finally:
        if saved is None:
            os.environ.pop("EVALRUNNER_LAND_PROCESSES", None)
        else:
            os.environ["EVALRUNNER_LAND_PROCESSES"] = saved
    n_rows = record.sample_rows
    for label, runs in (("parsed in the landing process", here), (f"parsed in {workers} worker processes", pooled)):
        print(
            f"candidate land_batch via the direct reader, {label}: {min(runs):6.2f} s  {n_rows / min(runs):8.0f} "
            f"samples/s  ratio {t_base / min(runs):.2f}x, {t_slow / min(runs):.1f}x the inspect_ai.log landing  "
            "(3 runs: " + ", ".join(f"{n_rows / t:.0f}" for t in runs) + ")"
        )
    print(f"  (the workers took {t_start:.1f} s to start, once per process; until then logs are parsed here)")
    t_land = min(pooled)
    # where the direct landing's time goes, step by step
    from lake.raw_rows import read_archive_rows

    rows, t_read = _timed(lambda: read_archive_rows(data, processes=0))
    tables, t_tables = _timed(lambda: rows.tables(key))
    s_tbl, e_tbl, _ = tables
    _, t_pq = _timed(lambda: (parquet_bytes(s_tbl), parquet_bytes(e_tbl)))
    total = t_read + t_tables + t_pq
    print("where the direct landing's time goes:")
    for label, t in (
        ("read in one process: unzip + orjson + row columns (samples and events)", t_read),
        ("Arrow tables (Python values -> columns, timestamps parsed)", t_tables),
        ("Parquet encoding (zstd)", t_pq),
    ):
        print(f"  {label:68s} {t:6.2f} s  {100 * t / total:5.1f}%")
    rate = record.sample_rows / t_land
    print(
        f"target ≥ 20000 samples/s: full landing {'meets' if rate >= 20000 else 'misses'} it ({rate:.0f}); "
        f"samples-only path {samples.num_rows / t_fast:.0f}; "
        f"this process's CPU count {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}"
    )


@contextmanager
def _inspect_path_only() -> Iterator[None]:
    """land_batch as it was before the direct reader: every log read by inspect_ai.log."""
    import lake.raw_rows
    from lake.eval_archive import UnrecognizedArchive

    def unrecognized(data: bytes, *, processes: int | None = None) -> Any:
        raise UnrecognizedArchive("the benchmark's baseline reads every log with inspect_ai.log")

    real = lake.raw_rows.read_archive_rows
    lake.raw_rows.read_archive_rows = unrecognized
    try:
        yield
    finally:
        lake.raw_rows.read_archive_rows = real
