"""Server-side time of the web app's pages over a real lake on disk, against the bare cost of
reading each page's input.

Pages, through the real Starlette app (``create_app(Lake(...))``, driven by Starlette's
``TestClient``, so routing, templates and the response are all in the figure):

- the pull-request page, the run page and the budget page of a comparison of 20 tasks whose
  samples (head + base rows) add to 10,000. Targets (the product issue): PR page ≤ 300 ms; run
  page ≤ 50 ms (it reloads every few seconds while a comparison runs); budget page ≤ 300 ms.
- the trajectory page of one sample with 2,000 events, and the trajectory list page of its task
  (the other samples of a real landed log). Target ≤ 500 ms each.

Data. The comparison document is a ``ComparisonDocument`` built the way ``assess`` builds one:
per task, seeded head and base scores are paired (``stats.pair_task``) and decided
(``stats.decide_task``), its interval history after each window is ``stats.confidence_path``,
the run verdict is ``stats.run_verdict``; the pairs per task are ends of the real window
schedule (``stats.window_schedule``) that add to 5,000 (10,000 samples over both arms), under a
cap of 512 pairs per task (the default 256 leaves room for only 10,240 samples over 20 tasks, so
nearly every task would sit at the cap); the undecided tasks have their next windows planned, so
the comparison is running and the run page reloads itself. It is written where ``pages.comparison`` reads it (``LAYOUT.comparison``). The trajectory batch is a
real Inspect log (``bench.ingest.trivial_log(200)``) landed with ``land_batch``; one sample's
event rows are then replicated to 2,000 (an agent loop: its input, 949 model turns each asking
for one or two tool calls, their tool results, the final answer and the score), new ``seq``
values, every column's type kept, and the events file and its record are rewritten so the
record vouches for it (``verify_lake`` is clean). Each page is checked (status 200, the tasks /
events / rows it must show) before it is timed.

Baselines, measured in the same run:
- PR / run / budget pages: reading and parsing the comparison document from the lake, exactly
  what ``pages.comparison`` does (``parse_document(ComparisonDocument, lake.read_bytes(rel))``).
- trajectory pages: one plain DuckDB query over the same events Parquet file (a fresh
  connection, ``select count(*) from read_parquet(...) where sample_id = ? and epoch = ?``).
Each page's requests are interleaved with as many baseline calls (so load from other work on
the machine falls on both), after two warm-up calls of each; the ratio is the page's median over
its baseline's median: what the page costs beyond reading its input.

    python -m bench web_pages [--quick]
"""

from __future__ import annotations

import argparse
import hashlib
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from bench.ingest import trivial_log

if TYPE_CHECKING:
    from evalrunner_assets.documents.comparison import ComparisonDocument
    from lake import Lake

REPO, PR = "bench/web-pages", "4242"
HEAD, BASE = "1" * 40, "2" * 40
TASKS, SAMPLES, EVENTS = 20, 10_000, 2_000
LOG_SAMPLES = 200
CAP = 512  # per-task pair cap: 20 tasks × 512 × 2 arms leaves room for 10,000 samples
TOOLS = ("search", "read_file", "run_tests", "edit_file", "lookup")


# -- the comparison document ---------------------------------------------------------------


def _pairs_per_task(rng: np.random.Generator, ends: list[int], n_tasks: int, total: int) -> list[int]:
    """Window ends (pairs) per task adding up to ``total``: three tasks stopped early, the rest
    spread up to the cap; then moved one window at a time towards the total."""
    idx = [int(rng.integers(2, 12)) if i < 3 else int(rng.integers(10, len(ends))) for i in range(n_tasks)]
    for _ in range(10_000):
        diff = total - sum(ends[i] for i in idx)
        if diff == 0:
            return [ends[i] for i in idx]
        step = [(k, ends[i + 1] - ends[i]) for k, i in enumerate(idx) if i + 1 < len(ends)] if diff > 0 else []
        step += [(k, ends[i] - ends[i - 1]) for k, i in enumerate(idx) if i > 0] if diff < 0 else []
        fits = [(k, s) for k, s in step if s <= abs(diff)]
        if not fits:
            raise RuntimeError(f"cannot reach {total} pairs from window ends {ends}")
        k = max(fits, key=lambda ks: (ks[1], -ks[0]))[0]
        idx[k] += 1 if diff > 0 else -1
    raise RuntimeError(f"no window ends add to {total}")


def _digest(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def _usage(rng: np.random.Generator, n: int, price_per_token: float) -> list[dict[str, Any]]:
    """Per-sample tokens, cost and time columns as the lake's ``samples`` rows carry them."""
    inp = rng.integers(900, 2_400, n)
    out = rng.integers(40, 400, n)
    seconds = rng.gamma(4.0, 0.6, n)
    return [
        {
            "input_tokens": int(i),
            "output_tokens": int(o),
            "total_tokens": int(i + o),
            "cost_usd": float((i + o) * price_per_token),
            "total_time_s": round(float(t), 3),
        }
        for i, o, t in zip(inp, out, seconds, strict=True)
    ]


def build_comparison(lake: Lake, seed: int) -> ComparisonDocument:
    """A running comparison of ``TASKS`` tasks and ``SAMPLES`` samples, decided by the stats."""
    from evalrunner_assets import stats
    from evalrunner_assets.documents.comparison import ComparisonDocument
    from evalrunner_assets.pricing import PriceTable, sample_accounting, usage_accounting
    from lake.layout import LAYOUT, Window

    rng = np.random.default_rng(seed)
    params = stats.StatsParams(cap=CAP)
    prices = PriceTable()  # every row carries its logged cost
    schedule = stats.window_schedule(CAP)
    ends = [stop for _, stop in schedule]
    pairs = _pairs_per_task(rng, ends, TASKS, SAMPLES // 2)
    names = [f"suite{i // 5}/task_{i:02d}" for i in range(TASKS)]
    decisions: dict[str, Any] = {}
    tasks: dict[str, Any] = {}
    next_windows: list[dict[str, str]] = []
    for name, n in zip(names, pairs, strict=True):
        p_base = float(rng.uniform(0.35, 0.9))
        p_head = min(0.98, p_base + float(rng.choice([0.0, 0.0, 0.0, 0.06, -0.08, 0.15])))
        ids = [f"{name.split('/')[1]}-{k:05d}" for k in range(n)]
        arms: dict[str, list[dict[str, Any]]] = {}
        for arm, p in (("head", p_head), ("base", p_base)):
            errored = rng.random(n) < 0.01
            correct = rng.random(n) < p
            arms[arm] = [
                {
                    "sample_id": sid,
                    "epoch": 1,
                    "score": None if e else float(c),
                    "error": "RuntimeError('tool timed out')" if e else None,
                    **usage,
                }
                for sid, c, e, usage in zip(ids, correct, errored, _usage(rng, n, 3e-6), strict=True)
            ]
        pairing = stats.pair_task(arms["head"], arms["base"])
        decision = stats.decide_task(pairing, params, TASKS, at_cap=n >= CAP, breakage=True, dataset_size=CAP + 88)
        decisions[name] = decision
        windows = sum(1 for _, stop in schedule if stop <= n)
        head = sample_accounting(arms["head"], prices)
        base = sample_accounting(arms["base"], prices)
        per_pair = (head["cost_per_sample_usd"] + base["cost_per_sample_usd"]) / 2
        tasks[name] = {
            "decision": decision.to_dict(),
            "affinity": "matched" if len(tasks) % 3 == 0 else "unmatched",
            "pairs_possible": CAP + 88,
            "pairs_limit": CAP,
            "positions_landed": n,
            "windows": windows,
            "failures": {},
            "load_errors": {},
            "changed_inputs_listed": 0,
            "head": head,
            "base": base,
            "cost_per_sample_delta_usd": head["cost_per_sample_usd"] - base["cost_per_sample_usd"],
            "latency_p50_delta_s": round(head["latency_p50_s"] - base["latency_p50_s"], 3),
            "more_samples_hint": (
                stats.describe_more_samples(decision.more_pairs_needed, per_pair)
                if decision.label in ("continue", "inconclusive") and decision.more_pairs_needed
                else None
            ),
            "path": [list(step) for step in stats.confidence_path(pairing, params, TASKS)],
            "batches": {arm: [_digest(name, arm, w) for w in range(windows)] for arm in ("head", "base")},
        }
        if decision.label == "continue" and n < CAP:
            start, stop = next((a, b) for a, b in schedule if a == n)
            for arm, sha in (("head", HEAD), ("base", BASE)):
                next_windows.append({"arm": arm, "commit": sha, "task": name, "window": Window(start, stop).name})
    verdict = stats.run_verdict(decisions)
    final = verdict.to_dict()
    running = bool(next_windows)
    if running:
        final["verdict"] = "RUNNING"
    spend = round(sum(t[arm]["cost_usd"] for t in tasks.values() for arm in ("head", "base")), 6)
    doc = {
        "schema_version": 1,
        "comparison": f"{REPO}#{PR}@{HEAD}",
        "repo": REPO,
        "pr": PR,
        "head_sha": HEAD,
        "base_sha": BASE,
        "base_ref": "main",
        "head_ref": "bench/many-tasks",
        "model": "openai/gpt-4o-mini",
        "status": "running" if running else "complete",
        "verdict": "RUNNING" if running else verdict.verdict,
        "final_verdict": final,
        "params": params.to_dict(),
        "tasks": tasks,
        "task_order": names,
        "samples_run": sum(t["head"]["samples"] + t["base"]["samples"] for t in tasks.values()),
        "samples_possible": 2 * CAP * TASKS,
        "spend_usd": spend,
        "spend_known": True,
        "failed_windows": usage_accounting([], prices),
        "next_windows": next_windows,
        "trajectories": {arm: lake.url(LAYOUT.raw_prefix(REPO, sha)) for arm, sha in (("head", HEAD), ("base", BASE))},
        "arm_models": {
            arm: {"model": "openai/gpt-4o-mini", "model_args": {}, "source": "run setting"} for arm in ("head", "base")
        },
        "computed_at": "2026-12-01T07:22:55.775114+00:00",
        "execution": {
            "max_in_flight": 8,
            "workers": 4,
            "windows": {"landed": sum(2 * t["windows"] for t in tasks.values())},
        },
    }
    return ComparisonDocument.model_validate(doc)


# -- the trajectory batch ------------------------------------------------------------------


def _text(rng: np.random.Generator, what: str, limit: int = 2_000) -> tuple[str, bool]:
    """A text excerpt as the lake keeps it: up to ``limit`` characters, cut and flagged beyond."""
    words = ("the", "config", "test", "failed", "line", "value", "returns", "error", "file", "ok", "path")
    n = int(rng.integers(8, 500))
    body = f"{what}: " + " ".join(words[int(i)] for i in rng.integers(0, len(words), n))
    return (body[:limit], True) if len(body) > limit else (body, False)


def grow_events(events: pa.Table, sample_id: str, n_events: int, seed: int) -> pa.Table:
    """``events`` with ``sample_id``'s rows replaced by ``n_events`` rows replicated from its own
    (sample_init / model / score rows as templates; tool results from the model row), each with
    a new ``seq``, timestamp, kind and text; every column keeps its type."""
    import pyarrow.compute as pc

    rng = np.random.default_rng(seed)
    mine = events.filter(pc.equal(events["sample_id"], sample_id))
    rest = events.filter(pc.not_equal(events["sample_id"], sample_id))
    kinds = mine["event"].to_pylist()
    template = {k: kinds.index(k) for k in ("sample_init", "model", "score")}
    # The agent loop: its input, turns of one or two tool calls, the final answer, the score.
    double = 99
    single = (n_events - 3 - 3 * double) // 2
    turns = [2] * double + [1] * single
    rng.shuffle(turns)
    plan: list[tuple[str, str, int]] = [("sample_init", "sample_init", 0)]
    for calls in turns:
        plan.append(("model", "call", calls))
        plan += [("model", "result", 0)] * calls
    plan += [("model", "answer", 0), ("score", "score", 0)]
    if len(plan) != n_events:
        raise RuntimeError(f"planned {len(plan)} events, not {n_events}")

    t = mine.take(pa.array([template[kind] for kind, _, _ in plan]))
    start = mine["timestamp"][0].as_py()
    cols: dict[str, list[Any]] = {c: [] for c in ("event", "role", "model", "tool_function", "tool_arguments",
                                                   "tool_calls", "input_tokens", "output_tokens", "total_tokens",
                                                   "error", "text", "text_truncated", "timestamp", "working_start")}  # fmt: skip
    model = mine["model"][template["model"]].as_py()
    tool = None
    for i, (kind, what, calls) in enumerate(plan):
        row: dict[str, Any] = {c: None for c in cols}
        row["event"], row["text_truncated"] = kind, False
        if what == "sample_init":
            row["role"] = "user"
            row["text"] = mine["text"][template["sample_init"]].as_py()
        elif what == "call":
            tool = TOOLS[int(rng.integers(0, len(TOOLS)))]
            inp = int(rng.integers(800, 30_000))
            out = int(rng.integers(20, 300))
            row.update(role="assistant", model=model, tool_function=tool, tool_calls=calls)
            row.update(tool_arguments=f'{{"query": "step {i}", "path": "src/mod_{i % 37}.py"}}')
            row.update(input_tokens=inp, output_tokens=out, total_tokens=inp + out)
            row["text"], row["text_truncated"] = _text(rng, "thinking")
        elif what == "result":
            row.update(event="tool", role="tool", tool_function=tool, tool_arguments=f'{{"step": {i}}}')
            row["text"], row["text_truncated"] = _text(rng, f"{tool} result")
            if rng.random() < 0.02:
                row["error"] = "ToolError: command exited 1"
        elif what == "answer":
            row.update(role="assistant", model=model, tool_calls=0, input_tokens=31_000, output_tokens=80)
            row.update(total_tokens=31_080, text=mine["text"][template["model"]].as_py())
        else:
            row["text"] = mine["text"][template["score"]].as_py()
        row["timestamp"] = start + timedelta(milliseconds=250 * i)
        row["working_start"] = 0.25 * i
        for c in cols:
            cols[c].append(row[c])
    for name, values in cols.items():
        field = t.schema.field(name)
        t = t.set_column(t.schema.get_field_index(name), field, pa.array(values, field.type))
    t = t.set_column(t.schema.get_field_index("seq"), t.schema.field("seq"), pa.array(range(n_events), pa.int64()))
    return pa.concat_tables([rest, t]).cast(events.schema)


def land_trajectories(lake: Lake, task: str, seed: int) -> tuple[str, str, int, int]:
    """Land the real log under (REPO, HEAD, ``task``), then grow one sample to EVENTS events.
    Returns the sample id, the events file (lake-relative), its sample rows and event rows."""
    import pyarrow.parquet as pq

    from lake import BatchKey, Window, land_batch
    from lake.batch import RunSettings
    from lake.ingest import parquet_bytes
    from lake.schema import BatchRecord

    log = trivial_log(LOG_SAMPLES)
    key = BatchKey(
        repo=REPO,
        commit=HEAD,
        task=task,
        spec="evals/bench.py",
        window=Window(0, LOG_SAMPLES),
        config_digest="x",
        backend="none",
        runtime_digest="x",
        settings=RunSettings(model="lakeprobe/probe-1", seed=seed, epochs=1),
    )
    record = land_batch(lake, key, log.read_bytes())
    events_rel = record.events_path
    if events_rel is None or record.samples_path is None:
        raise RuntimeError(f"{log}: the landed batch has no rows")
    events = pq.read_table(lake.fs.open(lake.path(events_rel), "rb"))
    sample_id = str(events["sample_id"][0].as_py())
    grown = grow_events(events, sample_id, EVENTS, seed)
    data = parquet_bytes(grown)
    lake.write_bytes(events_rel, data)
    # The record vouches for the file as it is now (the raw log stays the real one: nothing here
    # reads it, and the views leave out a batch whose log is missing).
    record = BatchRecord.model_validate(
        {
            **record.model_dump(),
            "events_sha256": hashlib.sha256(data).hexdigest(),
            "events_bytes": len(data),
            "event_rows": grown.num_rows,
        }
    )
    lake.write_bytes(lake.layout.batch_record(REPO, HEAD, task, key.window, record.batch), record.to_json_bytes())
    return sample_id, events_rel, record.sample_rows, grown.num_rows


# -- timing --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p95_ms: float


def _timings(times: list[float]) -> Timing:
    return Timing(float(np.median(times)), float(np.percentile(times, 95)))


def _time_pair(
    page: Callable[[], object], base: Callable[[], object], n: int, warmup: int = 2
) -> tuple[Timing, Timing]:
    """``n`` timed calls of each, interleaved (baseline, page, baseline, …) so that load from
    other work on the machine falls on both alike; ``warmup`` untimed calls of each first."""
    for _ in range(warmup):
        base()
        page()
    page_ms: list[float] = []
    base_ms: list[float] = []
    for _ in range(n):
        for fn, out in ((base, base_ms), (page, page_ms)):
            t0 = time.perf_counter()
            fn()
            out.append(1000 * (time.perf_counter() - t0))
    return _timings(page_ms), _timings(base_ms)


def _line(label: str, page: Timing, target_ms: float, base: Timing, which: str) -> str:
    ratio = page.median_ms / base.median_ms
    verdict = "meets" if page.median_ms <= target_ms else "MISSES"
    return (
        f"{label:40s} median {page.median_ms:6.1f} ms  p95 {page.p95_ms:6.1f} ms  target {target_ms:3.0f} ms  "
        f"= {ratio:.1f}x the baseline ({which} {base.median_ms:.1f} ms)  {verdict} the target"
    )


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench web_pages")
    parser.add_argument("--requests", type=int, default=20, help="timed requests per page (after 2 warm-up ones)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="5 requests per page, for a smoke run (same data)")
    args = parser.parse_args(argv)
    if args.quick:
        args.requests = 5

    import duckdb
    from starlette.testclient import TestClient

    from evalrunner_assets.documents.codec import parse_document
    from evalrunner_assets.documents.comparison import ComparisonDocument
    from evalrunner_assets.http.web import create_app
    from evalrunner_assets.report import links
    from lake import open_lake, verify_lake
    from lake.layout import LAYOUT

    with tempfile.TemporaryDirectory() as tmp:
        lake = open_lake(tmp)
        t0 = time.perf_counter()
        doc = build_comparison(lake, args.seed)
        rel = LAYOUT.comparison(REPO, PR, HEAD)
        lake.write_bytes(rel, doc.to_json())
        t_doc = time.perf_counter() - t0
        task = doc.task_order[0]
        t0 = time.perf_counter()
        sample_id, events_rel, sample_rows, event_rows = land_trajectories(lake, task, args.seed)
        t_traj = time.perf_counter() - t0
        verified = verify_lake(lake)
        if verified.problems or verified.ok != 1:
            raise SystemExit(f"the bench lake does not verify: {verified.problems}")
        windows = sum(len(t.path) for t in doc.tasks.values())
        print(
            f"built: comparison of {len(doc.tasks)} tasks, {doc.samples_run:,} samples "
            f"({sum(t.decision.pairs for t in doc.tasks.values()):,} pairs, {windows} looks in the window histories, "
            f"{len(doc.next_windows)} windows to run, {doc.status}; {len(lake.read_bytes(rel)) / 1e3:.0f} kB JSON) "
            f"in {t_doc:.1f} s"
        )
        labels = ", ".join(f"{k} {v}" for k, v in sorted(doc.final_verdict.counts.items()))
        print(f"       labels: {labels}")
        print(
            f"built: trajectory batch of {sample_rows} samples and {event_rows:,} events, "
            f"one sample ({sample_id}) with {EVENTS:,} of them, in {t_traj:.1f} s (lake verify: clean)"
        )

        app = create_app(lake)
        pr_path = links.pull_request_path(REPO, PR, HEAD)
        list_path = links.trajectories_path(REPO, HEAD, task)
        traj_path = links.trajectory_path(REPO, HEAD, task, sample_id, 1)
        events_url = lake.url(events_rel)

        def read_document() -> object:
            return parse_document(ComparisonDocument, lake.read_bytes(rel), rel)

        def count_events() -> int:
            con = duckdb.connect()
            try:
                row = con.execute(
                    "select count(*) from read_parquet(?) where sample_id = ? and epoch = 1", [events_url, sample_id]
                ).fetchone()
            finally:
                con.close()
            return int(row[0]) if row else 0

        if count_events() != EVENTS:
            raise SystemExit(f"the events file holds {count_events()} events of {sample_id}, not {EVENTS}")

        with TestClient(app) as client:

            def get(path: str) -> Callable[[], str]:
                def fetch() -> str:
                    response = client.get(path)
                    if response.status_code != 200:
                        raise SystemExit(f"GET {path}: {response.status_code}\n{response.text[:2000]}")
                    return response.text

                return fetch

            # Each page shows what it is benched for, before it is timed.
            checks = {
                "pr": (pr_path, r"<td>suite\d/task_\d\d</td>", TASKS),
                "run": (pr_path + "/run", r"<td>suite\d/task_\d\d</td>", TASKS),
                "budget": (pr_path + "/budget", r"<td>suite\d/task_\d\d</td>", TASKS),
                "list": (list_path, r'<a href="/trajectory/', sample_rows),
                "trajectory": (traj_path, r'<li class="event ', EVENTS),
            }
            sizes = []
            for page_name, (path, pattern, want) in checks.items():
                html = get(path)()
                found = len(re.findall(pattern, html))
                if found != want:
                    raise SystemExit(f"GET {path}: {found} rows /{pattern}/, expected {want}")
                sizes.append(f"{page_name} {len(html.encode()) / 1e3:,.0f} kB")
                if page_name == "run" and 'http-equiv="refresh"' not in html:
                    raise SystemExit(f"GET {path}: the run page of a running comparison does not reload itself")
            print(
                f"checked: PR, run (reloading) and budget pages show {TASKS} tasks; the list {sample_rows} trajectories; "
                f"the trajectory page {EVENTS:,} events (HTML: {', '.join(sizes)})"
            )

            n = args.requests
            print("baselines: [doc] read + parse the comparison document from the lake (what pages.comparison does);")
            print("           [duck] a fresh DuckDB connection and one count(*) over the events Parquet file")
            print(f"pages, {n} requests each, interleaved with {n} baseline calls (after 2 warm-up calls of each):")
            scale = f"({TASKS} tasks, {doc.samples_run:,} samples)"
            rows = [
                (f"pr page {scale}", pr_path, 300.0, "doc", read_document),
                (f"run page {scale}", pr_path + "/run", 50.0, "doc", read_document),
                (f"budget page {scale}", pr_path + "/budget", 300.0, "doc", read_document),
                (f"trajectory page ({EVENTS:,} events)", traj_path, 500.0, "duck", count_events),
                (f"trajectory list ({sample_rows} samples)", list_path, 500.0, "duck", count_events),
            ]
            missed = []
            for label, path, target, which, base_fn in rows:
                page, base = _time_pair(get(path), base_fn, n)
                print(_line(label, page, target, base, which), flush=True)
                if page.median_ms > target:
                    missed.append(label.split(" (")[0])
            print("targets: " + (f"missed by {', '.join(missed)}" if missed else "every page meets its target"))
