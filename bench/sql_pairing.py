"""Paired-delta SQL over ≥ 1M sample rows vs a plain Python loop over ``read_eval_log`` results.

Data: the rows of a real 10k-sample Inspect log (see ``bench.ingest.trivial_log``), replicated with new
sample ids into two arms (head, base) × 250k inputs × 2 epochs = 1M rows, written as Parquet
into a temporary lake with batch records, so the SQL reads them through the normal views.
Scores are drawn from a seeded RNG (C/I with ~2% errored rows) so the pairs are not all equal.

Baseline: a plain Python loop over the log's ``EvalSample`` objects (from ``read_eval_log``),
iterated once per replica so it visits the same 1M (arm, input, epoch, score) rows as the SQL;
it averages each arm's epochs per input, pairs the arms and computes the deltas. The time to
read 1M samples with ``read_eval_log`` is *not* charged to the baseline (it is printed apart).
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from bench.ingest import trivial_log

if TYPE_CHECKING:
    from inspect_ai.log import EvalSample

    from lake import Lake
from lake.batch import RunSettings

HEAD, BASE = "a" * 40, "b" * 40
REPO, TASK = "bench/pairing", "trivial"


def _build_lake(
    root: str, samples: pa.Table, inputs: int, epochs: int, seed: int, files_per_arm: int
) -> tuple[Lake, dict[str, np.ndarray]]:
    from lake import BatchKey, Window, open_lake
    from lake.ingest import parquet_bytes
    from lake.schema import BatchRecord

    lake = open_lake(root)
    rng = np.random.default_rng(seed)
    rows_per_arm = inputs * epochs
    arms: dict[str, np.ndarray] = {}
    for commit, p in ((HEAD, 0.62), (BASE, 0.60)):
        correct = rng.random(rows_per_arm) < p
        errored = rng.random(rows_per_arm) < 0.02
        raw = np.where(correct, "C", "I").astype(object)
        raw[errored] = None
        arms[commit] = raw
        per_file = inputs // files_per_arm
        for f in range(files_per_arm):
            lo, hi = f * per_file, (f + 1) * per_file
            n = (hi - lo) * epochs
            idx = np.arange(n) % samples.num_rows
            t = samples.take(pa.array(idx))
            ids = np.repeat(np.arange(lo, hi), epochs)
            ep = np.tile(np.arange(1, epochs + 1), hi - lo)
            r = raw[lo * epochs : hi * epochs]
            key = BatchKey(
                repo=REPO,
                commit=commit,
                task=TASK,
                spec="trivial.py",
                window=Window(lo, hi),
                config_digest="x",
                backend="none",
                runtime_digest="x",
                settings=RunSettings(model="m", seed=seed, epochs=epochs),
            )
            cols = {
                "commit": pa.array([commit] * n),
                "repo": pa.array([REPO] * n),
                "task": pa.array([TASK] * n),
                "batch": pa.array([key.digest] * n),
                "sample_id": pa.array([f"q{i:07d}" for i in ids]),
                "epoch": pa.array(ep, pa.int64()),
                "score": pa.array([None if v is None else (1.0 if v == "C" else 0.0) for v in r], pa.float64()),
                "score_raw": pa.array([None if v is None else f'"{v}"' for v in r]),
                "error": pa.array([("RuntimeError('x')" if v is None else None) for v in r]),
            }
            for name, arr in cols.items():
                t = t.set_column(t.schema.get_field_index(name), t.schema.field(name), arr)
            layout = lake.layout
            sp = layout.table_file("samples", REPO, commit, TASK, key.window, key.digest)
            data = parquet_bytes(t)
            lake.write_bytes(sp, data)
            # The record must vouch for a raw log that exists (the views leave out a batch
            # whose log is missing); nothing here reads it.
            log = b"stands for the Inspect log"
            raw_path = layout.raw_log(REPO, commit, TASK, key.window, key.digest)
            lake.write_bytes(raw_path, log)
            rec = BatchRecord(
                batch=key.digest,
                key=key.as_record(),
                repo=REPO,
                commit=commit,
                task=TASK,
                window=key.window.name,
                publishable=True,
                missing_fields=[],
                status="ok",
                log_status="success",
                log_format="eval",
                log_sha256=hashlib.sha256(log).hexdigest(),
                log_bytes=len(log),
                raw_path=raw_path,
                samples_path=sp,
                samples_sha256=hashlib.sha256(data).hexdigest(),
                samples_bytes=len(data),
                sample_rows=n,
            )
            lake.write_bytes(layout.batch_record(REPO, commit, TASK, key.window, key.digest), rec.to_json_bytes())
    return lake, arms


def _python_pairs(
    log_samples: Sequence[EvalSample], arms: dict[str, np.ndarray], inputs: int, epochs: int
) -> tuple[int, float]:
    """The baseline: epochs averaged per input per arm, then paired deltas, in plain Python."""
    from inspect_ai.scorer import value_to_float

    to_float = value_to_float()
    n_log = len(log_samples)
    sums: dict[str, dict[str, list[float]]] = {}
    for commit, raw in arms.items():
        acc: dict[str, list[float]] = {}
        for i in range(inputs * epochs):
            s = log_samples[i % n_log]  # the EvalSample standing for this replicated row
            _ = (s.id, s.epoch, s.model_usage)
            v = raw[i]
            sid = f"q{i // epochs:07d}"
            slot = acc.setdefault(sid, [0.0, 0])
            # An errored epoch (v is None: the row carries an error) scores 0 (the pairing rule).
            slot[0] += 0.0 if v is None else to_float(v)
            slot[1] += 1
        sums[commit] = acc
    pairs, total = 0, 0.0
    for sid, (hs, hn) in sums[HEAD].items():
        b = sums[BASE].get(sid)
        if b and hn and b[1]:
            pairs += 1
            total += hs / hn - b[0] / b[1]
    return pairs, total


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench sql_pairing")
    parser.add_argument("--inputs", type=int, default=250_000, help="inputs per arm (rows = 2 × inputs × epochs)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--quick", action="store_true", help="25,000 inputs per arm from a 2,000-sample log, for a smoke run"
    )
    args = parser.parse_args(argv)
    log_samples_n = 10_000
    if args.quick:
        # A 2,000-sample log (the one `bench ingest --quick` makes): producing the 10,000-sample
        # one takes minutes on a fresh machine, and the rows are replicated either way.
        args.inputs, log_samples_n = 25_000, 2_000

    from inspect_ai.log import read_eval_log

    from lake import connect
    from lake.duck import query
    from lake.ingest import ingest_log_file

    path = trivial_log(log_samples_n)
    t0 = time.perf_counter()
    log = read_eval_log(str(path))
    if not log.samples:
        raise SystemExit(f"{path}: the bench log has no samples")
    log_samples = log.samples
    t_read = time.perf_counter() - t0
    samples, _ = ingest_log_file(path, events=False)
    rows = 2 * args.inputs * args.epochs
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        lake, arms = _build_lake(tmp, samples, args.inputs, args.epochs, args.seed, files_per_arm=10)
        print(
            f"wrote {rows:,} sample rows (2 arms × {args.inputs:,} inputs × {args.epochs} epochs) "
            f"in {time.perf_counter() - t0:.1f} s"
        )

        t0 = time.perf_counter()
        pairs_py, total_py = _python_pairs(log_samples, arms, args.inputs, args.epochs)
        t_py = time.perf_counter() - t0

        t0 = time.perf_counter()
        con = connect(lake)
        t_connect = time.perf_counter() - t0
        params = {"repo": REPO, "head": HEAD, "base": BASE}
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            table = query(con, "paired_samples", params)
            best = min(best, time.perf_counter() - t0)
        deltas = table.column("delta").to_pylist()
        pairs_sql = sum(d is not None for d in deltas)
        total_sql = sum(d for d in deltas if d is not None)

    assert pairs_sql == pairs_py and abs(total_sql - total_py) < 1e-6, (pairs_sql, pairs_py, total_sql, total_py)
    print(f"results agree: {pairs_sql:,} pairs, sum of deltas {total_sql:.4f}")
    print(
        f"baseline  Python loop over read_eval_log samples: {t_py:7.3f} s "
        f"(+ reading 1M samples with read_eval_log would add ~{t_read / len(log_samples) * rows:,.0f} s "
        f"at this run's {len(log_samples) / t_read:,.0f} samples/s; not charged)"
    )
    print(f"candidate DuckDB paired_samples.sql (best of 3):   {best:7.3f} s  (connect + views {t_connect:.3f} s)")
    print(
        f"ratio {t_py / best:.1f}x  (targets: < 1 s and ≥ 50x: "
        f"{'met' if best < 1 and t_py / best >= 50 else 'not met'})"
    )
