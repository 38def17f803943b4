"""The trajectory miner: precision and recall on planted patterns, the false-finding rate on null
corpora, and the time to mine a task of 10,000 samples and 150,000 events.

Quality. A synthetic corpus: each trajectory calls each of six tools with its own probability,
in a random order, sometimes twice; failures are independent of the tools, except that a
*planted* pattern is forced onto a share ``strength`` of the failing trajectories: "never calls
search" (search is dropped) or "page before lookup" (page is moved in front of lookup). Recall is
the share of corpora whose findings include the planted feature (by its exact name); precision the
share of significant findings that are about the planted tools (a finding about other tools only
is false: those are independent of the outcome). On null corpora (nothing planted) every finding
is false, so the share of corpora with any finding is the false discovery rate, and must stay at
or below the stated FDR (0.05).

Speed. 10,000 samples with 15 events each (150,000), in DuckDB tables named like the lake's views:
the ``trajectory_features`` SQL, the feature matrix and the tests. The baseline, measured in the
same run, is one plain DuckDB pass over the same events (a group-by count): the ratio says what
the miner costs beyond reading its input. The same per-trajectory aggregation written in polars is
timed too: the faster of the two is what the product uses (DuckDB, when the numbers say so).

    ./dev bench miner [--quick]
"""

from __future__ import annotations

import argparse
import time

import duckdb
import numpy as np
import pyarrow as pa

import sql
from evalrunner_assets.mining.features import Trajectory
from evalrunner_assets.mining.miner import contrast

TOOLS = ("search", "lookup", "page", "notify", "read", "write")
CALL_PROBABILITY = {"search": 0.9, "lookup": 0.8, "page": 0.5, "notify": 0.4, "read": 0.6, "write": 0.3}
PLANTED = {"never": ("never calls search", {"search"}), "order": ("page before lookup", {"page", "lookup"})}
FDR = 0.05


def _sequence(rng: np.random.Generator) -> list[str]:
    calls = [tool for tool in TOOLS if rng.random() < CALL_PROBABILITY[tool]]
    calls += [tool for tool in calls if rng.random() < 0.2]  # some tools twice
    rng.shuffle(calls)
    return calls


def _plant(calls: list[str], kind: str) -> list[str]:
    if kind == "never":
        return [c for c in calls if c != "search"]
    # page before lookup: both called, the first page ahead of the first lookup
    rest = [c for c in calls if c not in ("page", "lookup")]
    return ["page", "lookup", *rest]


def _trajectory(i: int, calls: list[str], score: float) -> Trajectory:
    return Trajectory(
        batch="b",
        sample_id=f"s{i}",
        epoch=1,
        score=score,
        error=None,
        limit_type=None,
        tools=tuple(calls),
        tool_seqs=tuple(range(len(calls))),
        tool_errors=(),
        tool_error_seqs=(),
        turns=len(calls) + 1,
        total_tokens=100 * (len(calls) + 1),
        total_time_s=float(len(calls)),
        first_error_seq=None,
        answer_chars=40,
    )


def corpus(
    rng: np.random.Generator, n: int, kind: str | None, strength: float
) -> tuple[list[Trajectory], list[Trajectory]]:
    """``n`` failing and ``n`` passing trajectories, the pattern ``kind`` forced onto a share
    ``strength`` of the failing ones (None: nothing planted)."""
    failing, passing = [], []
    for i in range(n):
        calls = _sequence(rng)
        if kind is not None and rng.random() < strength:
            calls = _plant(calls, kind)
        failing.append(_trajectory(i, calls, 0.0))
    for i in range(n, 2 * n):
        passing.append(_trajectory(i, _sequence(rng), 1.0))
    return failing, passing


def quality(reps: int, null_reps: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    print("planted    strength  n/group  recall  precision  findings/corpus")
    for kind, (name, tools) in PLANTED.items():
        for strength in (0.1, 0.2, 0.4):
            for n in (50, 200, 1000):
                found = true = total = 0
                for _ in range(reps):
                    result = contrast(*corpus(rng, n, kind, strength), fdr=FDR)
                    names = [f.feature.name for f in result.findings]
                    found += name in names or any(name in f.aliases for f in result.findings)
                    total += len(names)
                    true += sum(1 for f in result.findings if set(f.feature.tools) & tools)
                precision = true / total if total else float("nan")
                print(f"{kind:9}  {strength:8.1f}  {n:7d}  {found / reps:6.2f}  {precision:9.2f}  {total / reps:15.1f}")
    for n in (50, 200, 1000):
        with_findings = sum(1 for _ in range(null_reps) if contrast(*corpus(rng, n, None, 0.0), fdr=FDR).findings)
        rate = with_findings / null_reps
        verdict = "ok" if rate <= FDR else "ABOVE the stated FDR"
        print(
            f"null corpora, n/group {n}: false discovery rate {rate:.3f} over {null_reps} corpora (stated {FDR}: {verdict})"
        )


def _tables(samples: int, events_per_sample: int, seed: int) -> tuple[pa.Table, pa.Table]:
    rng = np.random.default_rng(seed)
    n_events = samples * events_per_sample
    sample_ids = np.repeat(np.array([f"s{i}" for i in range(samples)], dtype=object), events_per_sample)
    seq = np.tile(np.arange(events_per_sample), samples)
    kinds = rng.choice(
        np.array(["model", "tool", "span_begin", "span_end"], dtype=object), n_events, p=[0.3, 0.3, 0.2, 0.2]
    )
    is_tool, is_model = kinds == "tool", kinds == "model"
    tool_names = rng.choice(np.array(TOOLS, dtype=object), n_events)
    tool = [name if flag else None for name, flag in zip(tool_names, is_tool, strict=True)]
    failed = is_tool & (rng.random(n_events) < 0.05)
    error = ["tool failed" if flag else None for flag in failed]
    common = {"repo": ["bench/miner"] * n_events, "commit": ["c" * 40] * n_events, "task": ["t"] * n_events}
    events = pa.table(
        {
            **common,
            "batch": ["b"] * n_events,
            "sample_id": sample_ids,
            "epoch": np.ones(n_events, dtype=np.int64),
            "seq": seq,
            "event": kinds,
            "role": ["assistant" if flag else None for flag in is_model],
            "tool_function": tool,
            "error": error,
            "text": ["an answer of some length" if flag else None for flag in is_model],
        }
    )
    ids = [f"s{i}" for i in range(samples)]
    samples_table = pa.table(
        {
            "repo": ["bench/miner"] * samples,
            "commit": ["c" * 40] * samples,
            "task": ["t"] * samples,
            "batch": ["b"] * samples,
            "window": ["w000000-010000"] * samples,
            "sample_id": ids,
            "epoch": np.ones(samples, dtype=np.int64),
            "score": (rng.random(samples) < 0.6).astype(float),
            "error": [None] * samples,
            "limit_type": [None] * samples,
            "total_tokens": rng.integers(100, 5000, samples),
            "total_time_s": rng.random(samples) * 30,
        }
    )
    return samples_table, events


def _mine(con: duckdb.DuckDBPyConnection) -> int:
    con.execute(sql.load("trajectory_features"))
    rows = con.sql(sql.load("trajectory_features_of"), params={"repo": "bench/miner", "commit": "c" * 40, "task": "t"})
    found = [Trajectory.from_row(row) for row in rows.to_arrow_table().to_pylist()]
    failing = [t for t in found if t.passed(1.0) is False]
    passing = [t for t in found if t.passed(1.0)]
    return len(contrast(failing, passing, fdr=FDR).findings)


def _polars_aggregation(events: pa.Table) -> int:
    import polars as pl

    frame = pl.from_arrow(events)
    assert isinstance(frame, pl.DataFrame)
    tools = frame.filter(pl.col("event") == "tool").sort("seq")
    out = tools.group_by(["repo", "commit", "task", "batch", "sample_id", "epoch"]).agg(
        pl.col("tool_function").alias("tool_sequence"), pl.col("seq").alias("tool_seqs")
    )
    return out.height


def speed(samples: int, rounds: int) -> None:
    samples_table, events = _tables(samples, 15, seed=7)
    con = duckdb.connect()
    con.register("samples", samples_table)
    con.register("events", events)
    timings: dict[str, list[float]] = {"baseline": [], "miner": [], "duckdb_aggregation": [], "polars_aggregation": []}
    for _ in range(rounds):
        t = time.perf_counter()
        con.sql("select sample_id, count(*) from events group by sample_id").fetchall()
        timings["baseline"].append(time.perf_counter() - t)
        t = time.perf_counter()
        findings = _mine(con)
        timings["miner"].append(time.perf_counter() - t)
        t = time.perf_counter()
        con.sql("select count(*) from trajectory_features").fetchall()
        timings["duckdb_aggregation"].append(time.perf_counter() - t)
        t = time.perf_counter()
        _polars_aggregation(events)
        timings["polars_aggregation"].append(time.perf_counter() - t)
    median = {k: float(np.median(v)) for k, v in timings.items()}
    print(f"speed: {samples} samples, {events.num_rows} events, median of {rounds} rounds")
    print(f"  baseline (one DuckDB pass over the events)  {median['baseline'] * 1000:8.1f} ms")
    print(
        f"  miner (SQL features + matrix + tests)       {median['miner'] * 1000:8.1f} ms  "
        f"= {median['miner'] / median['baseline']:.1f}x the baseline; target ≤ 2000 ms: "
        f"{'ok' if median['miner'] <= 2.0 else 'MISSED'} ({findings} findings on outcome-independent data)"
    )
    print(
        f"  per-trajectory aggregation: DuckDB {median['duckdb_aggregation'] * 1000:.1f} ms, "
        f"polars {median['polars_aggregation'] * 1000:.1f} ms (tool lists only) -> "
        f"{'DuckDB' if median['duckdb_aggregation'] <= median['polars_aggregation'] else 'polars'} is faster"
    )


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="bench miner")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    reps, null_reps = (5, 40) if args.quick else (40, 400)
    quality(reps, null_reps, seed=11)
    speed(10_000, 1 if args.quick else 3)
