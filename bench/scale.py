"""Scale model: a day of 1,000 PRs x 20 tasks on the Kubernetes run launcher (docs/scale.md).

Measured in this run, on this machine:
  * pairs per task: the library's own sequential rule (``bench.stats.crossings`` at T = 20,
    the pipeline's window schedule, cap 256) on simulated tasks, for a stated mix of effects;
  * one decision step's CPU (``stats.decide_task`` at 64 pairs);
  * lake listing: ``Lake.listdir`` of a local prefix of N files, and the pre-compare sweep
    (``engine.sweep_lake``) on a local lake shaped like ``lake/layout.py`` -- the whole-lake walk
    it did before the temp-writer index against the indexed sweep it does now (the ratio line).
Assumed (each with its source in ``PARAMS``/docs/scale.md): arrival profile, calls and tokens
per sample, model latency, pod start times, provider rate limits, prices per vCPU-hour.

Then a seeded fluid simulation (30 s steps) of the day: PR sensor ticks, the Dagster run queue
(``max_concurrent_runs``), per comparison run pods (``max_concurrent_pods``) and gateway slots
(``EVALRUNNER_GATEWAY_CONCURRENCY``), the namespace pod quota, a cluster-wide standby pool of
started pods, and one provider's requests/min and tokens/min shared by every run. Outputs:
time from push to verdict (the SLO), which resource saturates first, a standby-pool sizing
table and a day's cost.

    .venv/bin/python -m bench scale [--quick]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

# -- parameters ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """One deployment. Defaults are the shipped ones (sources in the comments)."""

    name: str = "shipped defaults"
    max_runs: int = 20  # deploy/dagster.yaml run_coordinator max_concurrent_runs
    pods_per_run: int = 8  # sandbox_settings.MAX_CONCURRENT_PODS default
    gateway_per_run: int = 8  # gateway ModelGateway.max_concurrency default
    pod_quota: int = 400  # assumed namespace ResourceQuota (pods)
    standby: int = 0  # cluster-wide started pods waiting for a session (0: none today)
    provider_rpm: float = 10_000  # assumed provider tier (requests/min)
    provider_tpm: float = 2_000_000  # assumed provider tier (tokens/min)


@dataclass(frozen=True)
class Load:
    prs_per_day: int = 1000
    tasks: int = 20
    base_reuse: float = 0.3  # assumed: share of PRs whose base windows another PR landed already
    calls_per_sample: float = 6.0  # assumed agent: model calls per sample
    call_latency_s: float = 4.0  # assumed: one model call, end to end
    tokens_in: float = 3000.0  # assumed per call (prompt incl. history)
    tokens_out: float = 300.0  # assumed per call
    run_start_s: float = 45.0  # assumed: K8sRunLauncher Job pod start (deploy start_timeout 300 bounds it)
    learn_s: float = 60.0  # assumed: manifests of both commits (environments cached)
    report_s: float = 10.0  # assumed: comparison document, comment, check run
    cold_start_s: float = 30.0  # assumed: schedule, init container, export delivery (image cached)
    standby_start_s: float = 5.0  # assumed: export delivery into a started pod
    window_overhead_s: float = 5.0  # assumed: landing a window (parquet, record) between rounds
    pr_tick_s: float = 5.0  # sensors/pr.py minimum_interval_seconds
    deliveries_per_pr: float = 5.0  # assumed: webhook deliveries per PR head (push, checks, comments)
    vcpu_per_pod: float = 0.5  # kubernetes config cpu_request "500m"
    usd_per_vcpu_hour: float = 0.04  # assumed on-demand vCPU-hour, memory included
    usd_in_per_mtok: float = 2.5  # pricing.py's example entry (openai/gpt-4o), as a PriceTable
    usd_out_per_mtok: float = 10.0


SCHEDULE_CAP = 256


# -- measured: the statistics ------------------------------------------------------------------


def pairs_distribution(paths: int, seed: int, margin: float = 0.05) -> tuple[np.ndarray, dict[str, float]]:
    """Pairs the sequential rule runs per task (window ends, T = 20), sampled from a mix: 70%
    no effect, 20% |delta| = 0.1, 10% |delta| = 0.2 (assumed); binary tasks, half with the
    near-deterministic pass rates (Beta(.05,.05)), half Beta(.5,.5). Returns the pooled sample
    and the mean per cell."""
    from bench import stats as bs
    from evalrunner_assets.stats import StatsParams
    from evalrunner_assets.stats._decide import task_design

    params = StatsParams(cap=SCHEDULE_CAP, margin=margin)
    designs = {"T=20": task_design(params, 20)}
    ends = bs.window_ends(SCHEDULE_CAP)
    rng = np.random.default_rng(seed)
    mix = ((0.0, 0.7), (0.1, 0.1), (-0.1, 0.1), (0.2, 0.05), (-0.2, 0.05))
    pooled: list[np.ndarray] = []
    means: dict[str, float] = {}
    for gname, gen in (("near-det", bs.binary(0.05, 0.05)), ("Beta(.5,.5)", bs.binary(0.5, 0.5))):
        for delta, share in mix:
            n = max(4, int(paths * share))
            d = gen(rng, delta, n, SCHEDULE_CAP)
            code, at = bs.sequential_labels(bs.crossings(d, params, designs)["T=20"], params)
            run = np.where(code != bs.seq.CONTINUE, bs.pairs_run(at, ends), SCHEDULE_CAP)
            pooled.append(run)
            means[f"{gname} delta={delta:+.1f}"] = float(run.mean())
    return np.concatenate(pooled), means


def decision_step_ms() -> float:
    from evalrunner_assets.stats import Pairing, StatsParams, decide_task

    rng = np.random.default_rng(3)
    pairing = Pairing.from_scores(rng.binomial(1, 0.5, 64).astype(float).tolist(), rng.binomial(1, 0.5, 64).tolist())
    params = StatsParams(cap=SCHEDULE_CAP)
    decide_task(pairing, params, 20)
    times = []
    for _ in range(5):
        t0 = time.process_time()
        decide_task(pairing, params, 20)
        times.append(time.process_time() - t0)
    return 1e3 * min(times)


def window_sizes(pairs: int) -> list[int]:
    from evalrunner_assets.stats import window_schedule

    return [b - a for a, b in window_schedule(SCHEDULE_CAP) if b <= pairs] or [8]


# -- measured: lake listing ---------------------------------------------------------------------


@dataclass(frozen=True)
class ListingCosts:
    listdir_us_per_entry: float
    walk_us_per_file: float
    walk_ms: float
    index_ms: float
    files: int


def _median_ms(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * sorted(times)[len(times) // 2]


def measure_listing(comparisons: int, listdir_sizes: tuple[int, ...]) -> ListingCosts:
    """A local lake of ``comparisons`` comparisons' files (per the layout: request, document,
    artifacts; per window samples, events, record, log, gateway usage), swept both ways."""
    from evalrunner_assets.pipeline.engine import sweep_lake
    from evalrunner_assets.pipeline.scheduler import sweep_orphaned_temp_files
    from lake import LAYOUT, Window, open_lake

    tmp = Path(tempfile.mkdtemp(prefix="evalrunner-scale-"))
    try:
        lake = open_lake(str(tmp / "lake"))
        rels: list[str] = []
        for c in range(comparisons):
            repo, head = "acme/agent", f"{c:040x}"
            rels += [LAYOUT.comparison_artifact(repo, c, head, n) for n in ("request.json", "md", "check.json")]
            rels.append(LAYOUT.comparison(repo, c, head))
            for task in ("t0", "t1"):
                for w in (Window(0, 8), Window(8, 16)):
                    batch = uuid.uuid4().hex[:16]
                    rels += [LAYOUT.table_file(table, repo, head, task, w, batch) for table in ("samples", "events")]
                    rels.append(LAYOUT.batch_record(repo, head, task, w, batch))
                    rels.append(LAYOUT.gateway_usage(repo, head, task, w, batch))
        for rel in rels:  # plain writes: the sweep is measured, not landing (no fsync per file)
            path = Path(lake.path(rel))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"{}")
        files = len(rels)
        sweep_lake(lake)  # the lake's first sweep: the one walk, and the marker
        root = os.path.abspath(lake.root)
        walk_ms = _median_ms(lambda: sweep_orphaned_temp_files(root, [""]), 3)
        index_ms = _median_ms(lambda: sweep_lake(lake), 3)
        per_entry = []
        for n in listdir_sizes:
            d = tmp / f"flat{n}"
            d.mkdir()
            for i in range(n):
                (d / f"{i:012d}-{uuid.uuid4().hex}.json").write_bytes(b"{}")
            flat = open_lake(str(tmp))
            ms = _median_ms(lambda: list(flat.listdir(f"flat{n}")), 3)  # noqa: B023
            per_entry.append(1e3 * ms / n)
        return ListingCosts(
            listdir_us_per_entry=max(per_entry),
            walk_us_per_file=1e3 * walk_ms / files,
            walk_ms=walk_ms,
            index_ms=index_ms,
            files=files,
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


GCS_PAGE = 1000  # objects per list page (GCS JSON API maximum)
GCS_PAGE_S = 0.06  # assumed latency of one list page from inside the region


# -- the day ----------------------------------------------------------------------------------


def diurnal_weights() -> np.ndarray:
    """Hourly arrival weights (mean 1): a European and a larger American working day (assumed)."""
    h = np.arange(24) + 0.5
    w = 0.25 + 0.9 * np.exp(-(((h - 10) / 2.5) ** 2)) + 1.3 * np.exp(-(((h - 16.5) / 3) ** 2))
    return w / w.mean()


def arrivals(n: int, rng: random.Random) -> list[float]:
    w = diurnal_weights()
    cum = np.cumsum(w) / w.sum()
    out = []
    for _ in range(n):
        u = rng.random()
        hour = int(np.searchsorted(cum, u))
        out.append(3600.0 * (hour + rng.random()))
    return sorted(out)


@dataclass
class _Run:
    pr: int
    arrived: float
    calls: float  # model calls left
    critical_s: float  # the longest task's chain of rounds left, at full speed
    starts: int  # sessions to start (one per commit and task: warm windows follow)
    pre_s: float  # fixed work before the windows (run start, learn, sweep, session starts)
    post_s: float  # after them (the report)
    samples: int
    windows: int
    pod_s: float = 0.0


@dataclass
class DayResult:
    verdict_s: list[float]  # push -> verdict per PR that got one
    queued_s: list[float]  # push -> run started
    unfinished: int
    util: dict[str, float]  # peak-hour mean utilisation per resource
    pod_hours: float
    standby_hours: float
    samples: int
    windows: int
    calls: float
    cold: int
    warm: int


def simulate_day(
    cfg: Config, load: Load, pairs: np.ndarray, seed: int, *, sweep_s: float = 0.0, dt: float = 30.0
) -> DayResult:
    rng = random.Random(seed)
    times = arrivals(load.prs_per_day, rng)
    queue: list[_Run] = []
    running: list[_Run] = []
    verdict, queued = [], []
    nxt = 0
    t = 0.0
    standby = float(cfg.standby)
    cold = warm = 0
    pod_s = standby_s = calls_done = 0.0
    samples_total = windows_total = 0
    peak = {"run slots": 0.0, "pods": 0.0, "gateway slots": 0.0, "provider rpm": 0.0, "provider tpm": 0.0}
    peak_n = 0
    tok = load.tokens_in + load.tokens_out
    horizon = 2 * 86400.0  # a day of arrivals, then a day to drain
    while t < horizon and (nxt < len(times) or queue or running):
        # The PR sensor sees a delivery at its next tick.
        while nxt < len(times) and times[nxt] + load.pr_tick_s <= t:
            arrived = times[nxt]
            calls = crit = 0.0
            samples = windows = 0
            head_only = rng.random() < load.base_reuse
            for _ in range(load.tasks):
                p = int(pairs[rng.randrange(len(pairs))])
                sizes = window_sizes(p)
                arms = 1 if head_only else 2
                samples += arms * sum(sizes)
                windows += arms * len(sizes)
                calls += arms * sum(sizes) * load.calls_per_sample
                # A window's samples run at once; its calls follow one another per sample.
                chain = len(sizes) * (load.calls_per_sample * load.call_latency_s + load.window_overhead_s)
                crit = max(crit, chain)
            starts = load.tasks * (1 if head_only else 2)
            pre = load.run_start_s + load.learn_s + sweep_s
            queue.append(_Run(nxt, arrived, calls, crit, starts, pre, load.report_s, samples, windows))
            nxt += 1
        while queue and len(running) < cfg.max_runs:
            run = queue.pop(0)
            queued.append(t - run.arrived)
            # Session starts: a standby pod if one is left, a cold start otherwise, P at a time.
            hits = min(run.starts, int(standby))
            standby -= hits
            warm += hits
            cold += run.starts - hits
            start_s = (hits * load.standby_start_s + (run.starts - hits) * load.cold_start_s) / cfg.pods_per_run
            run.pre_s += start_s
            running.append(run)
        # Pods: each run keeps up to its cap busy while it has windows; the quota caps the sum.
        want_pods = sum(cfg.pods_per_run for r in running if r.calls > 0)
        pod_share = min(1.0, cfg.pod_quota / want_pods) if want_pods else 1.0
        # Calls in flight: a run's gateway slots, or fewer when its pods hold fewer samples.
        inflight = {id(r): min(cfg.gateway_per_run, cfg.pods_per_run * pod_share * 8) for r in running if r.calls > 0}
        demand_rpm = sum(inflight.values()) * 60.0 / load.call_latency_s
        f = 1.0
        if demand_rpm > 0:
            f = min(1.0, cfg.provider_rpm / demand_rpm, cfg.provider_tpm / (demand_rpm * tok))
        done_now: list[_Run] = []
        for r in running:
            busy_pods = cfg.pods_per_run * pod_share if r.calls > 0 else 1.0
            pod_s += busy_pods * dt
            r.pod_s += busy_pods * dt
            step = dt
            used = min(step, r.pre_s)
            r.pre_s -= used
            step -= used
            if step > 0 and (r.calls > 0 or r.critical_s > 0):
                rate = inflight.get(id(r), 0.0) / load.call_latency_s * f
                moved = min(r.calls, rate * step)
                r.calls -= moved
                calls_done += moved
                r.critical_s = max(0.0, r.critical_s - step * f)
                step = 0.0  # a step's remainder after the last window is not carried over
            elif step > 0:
                r.post_s -= step
                if r.post_s <= 0:
                    done_now.append(r)
        for r in done_now:
            running.remove(r)
            verdict.append(t + dt - r.arrived)
            samples_total += r.samples
            windows_total += r.windows
        # The standby pool refills in the background, a cold start per pod.
        if cfg.standby:
            standby = min(float(cfg.standby), standby + cfg.standby * dt / load.cold_start_s)
            standby_s += standby * dt
        hour = int(t // 3600)
        if hour in _peak_hours():
            peak["run slots"] += len(running) / cfg.max_runs
            peak["pods"] += min(1.0, want_pods / cfg.pod_quota)
            peak["gateway slots"] += (
                (sum(inflight.values()) / (cfg.gateway_per_run * len(inflight))) if inflight else 0.0
            )
            peak["provider rpm"] += demand_rpm * f / cfg.provider_rpm
            peak["provider tpm"] += demand_rpm * f * tok / cfg.provider_tpm
            peak_n += 1
        t += dt
    unfinished = len(times) - len(verdict)
    return DayResult(
        verdict,
        queued,
        unfinished,
        {k: v / max(peak_n, 1) for k, v in peak.items()},
        pod_s / 3600,
        standby_s / 3600,
        samples_total,
        windows_total,
        calls_done,
        cold,
        warm,
    )


def _peak_hours() -> set[int]:
    w = diurnal_weights()
    return {int(h) for h in np.argsort(w)[-4:]}


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return math.nan
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def fmt_h(s: float) -> str:
    if math.isnan(s):
        return "     -"
    return f"{s / 60:5.0f}m" if s < 3 * 3600 else f"{s / 3600:5.1f}h"


# -- capacity (closed form, per resource) --------------------------------------------------


def capacities(cfg: Config, load: Load, mean_calls: float) -> dict[str, float]:
    """PRs/day each resource can carry at full utilisation (a run holds its slot for its whole
    comparison, and its calls go at most ``gateway_per_run`` at a time)."""
    per_call = load.call_latency_s
    tok = load.tokens_in + load.tokens_out
    in_flight = min(cfg.gateway_per_run, cfg.pods_per_run * 8)
    run_s = (
        mean_calls / (in_flight / per_call)
        + load.run_start_s
        + load.learn_s
        + load.report_s
        + 2 * load.tasks * load.cold_start_s / cfg.pods_per_run
    )
    return {
        "run slots": cfg.max_runs * 86400 / run_s,
        "provider rpm": cfg.provider_rpm / 60 * 86400 / mean_calls,
        "provider tpm": cfg.provider_tpm / 60 / tok * 86400 / mean_calls,
        "pod quota": cfg.pod_quota / cfg.pods_per_run * 86400 / run_s,
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench scale", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller measurements and fewer simulated cases")
    parser.add_argument("--seed", type=int, default=20261207)
    args = parser.parse_args(argv)
    quick = args.quick
    load = Load()
    started = time.perf_counter()

    # 1. The statistics: pairs per task, measured with the library's rule.
    pairs, means = pairs_distribution(120 if quick else 1000, args.seed)
    dec_ms = decision_step_ms()
    per_pr_samples = load.tasks * float(np.mean([sum(window_sizes(int(p))) for p in pairs]))
    print(f"pairs per task (library rule, T=20, cap {SCHEDULE_CAP}, {pairs.size} simulated tasks; mix in docs):")
    for k, v in means.items():
        print(f"  {k:<22} mean pairs {v:6.1f}")
    print(
        f"  pooled: mean {pairs.mean():.0f}, median {np.median(pairs):.0f}, at cap {np.mean(pairs >= SCHEDULE_CAP):.0%}"
        f" -> {per_pr_samples:,.0f} samples per arm per PR over {load.tasks} tasks"
    )
    if not quick:
        wide, wide_means = pairs_distribution(400, args.seed + 1, margin=0.10)
        print(
            f"  (margin 0.10 instead of 0.05: pooled mean {wide.mean():.0f} pairs, at cap {np.mean(wide >= 256):.0%})"
        )
    print(f"one decision step (decide_task, 64 pairs, T=20): {dec_ms:.1f} ms CPU")

    # 2. Lake listing, measured.
    lc = measure_listing(60 if quick else 400, (2000,) if quick else (10_000, 50_000))
    print(
        f"Lake.listdir (local): {lc.listdir_us_per_entry:.1f} us per entry; "
        f"whole-lake walk: {lc.walk_us_per_file:.1f} us per file"
    )
    print(
        f"pre-compare sweep at {lc.files:,} files: walk {lc.walk_ms:.1f} ms, index {lc.index_ms:.2f} ms, "
        f"ratio {lc.walk_ms / max(lc.index_ms, 1e-3):.2f}x"
    )

    # Lake growth: files per PR from the layout (4 per window, 4 per comparison, raw logs).
    windows_per_pr = load.tasks * float(np.mean([len(window_sizes(int(p))) for p in pairs])) * (2 - load.base_reuse)
    files_per_pr = 5 * windows_per_pr + 8
    deliveries_day = load.prs_per_day * load.deliveries_per_pr
    print("\nlisting paths over 90 days of history (1,000 PRs/day):")
    print(f"  {'path':<52}{'entries day 1':>14}{'day 90':>14}{'cost day 90':>14}  bounded by")
    lake_90 = 90 * load.prs_per_day * files_per_pr
    rows = [
        (
            "pre-compare sweep, local lake (before: walk all)",
            load.prs_per_day * files_per_pr,
            lake_90,
            lake_90 * lc.walk_us_per_file / 1e6,
            "nothing: history",
        ),
        ("pre-compare sweep, local lake (now: index)", 0, 0, lc.index_ms / 1e3, "writes in flight"),
        ("pre-compare sweep, gs:// lake", 0, 0, 0.0, "skipped (one PUT)"),
        (
            "PR sensor: inbox queue listing, gs:// (per tick)",
            deliveries_day / 144,
            deliveries_day / 144 * 2.4,
            math.ceil(deliveries_day / 144 * 2.4 / GCS_PAGE) * GCS_PAGE_S,
            "10 min window",
        ),
        (
            "PR sensor: claims + done listing, gs:// (per 10 min)",
            2 * deliveries_day,
            2 * 14 * deliveries_day,
            math.ceil(2 * 14 * deliveries_day / GCS_PAGE) * GCS_PAGE_S,
            "14-day retention",
        ),
        (
            "sampling sensor: index/open-comparisons (per tick)",
            0,
            0,
            0.0,
            "open comparisons",
        ),
    ]
    for path, d1, d90, cost, bound in rows:
        print(f"  {path:<52}{d1:>14,.0f}{d90:>14,.0f}{cost:>13.2f}s  {bound}")
    walk_day90 = lake_90 * lc.walk_us_per_file / 1e6
    print(
        f"  the walk at day 90 would run {walk_day90:,.0f} s before every comparison, "
        f"{walk_day90 * load.prs_per_day / 3600:,.0f} CPU-hours a day (page cache permitting)"
    )

    # 3. The day, simulated.
    shipped = Config()
    sized = Config(
        name="sized for 1,000 PRs/day",
        max_runs=250,
        pods_per_run=16,
        gateway_per_run=64,
        pod_quota=4000,
        standby=64,
        provider_rpm=100_000,
        provider_tpm=400_000_000,
    )
    mean_calls = per_pr_samples * (2 - load.base_reuse) * load.calls_per_sample
    print(
        f"\nper PR: {per_pr_samples * (2 - load.base_reuse):,.0f} samples, {mean_calls:,.0f} model calls, "
        f"{mean_calls * (load.tokens_in + load.tokens_out) / 1e6:,.0f} M tokens (assumed agent: "
        f"{load.calls_per_sample:g} calls x {load.tokens_in + load.tokens_out:,.0f} tokens per sample)"
    )
    print("capacity per resource, PRs/day (each alone the limit; the smallest saturates first):")
    for cfg in (shipped, sized):
        caps = capacities(cfg, load, mean_calls)
        first = min(caps, key=lambda k: caps[k])
        print(f"  {cfg.name}: " + ", ".join(f"{k} {v:,.0f}" for k, v in caps.items()) + f"  -> first: {first}")
    peak_rate = load.prs_per_day / 86400 * float(diurnal_weights().max())
    print(
        f"  1,000 PRs/day asks at the peak hour for {peak_rate * mean_calls * 60:,.0f} requests/min and "
        f"{peak_rate * mean_calls * 60 * (load.tokens_in + load.tokens_out) / 1e6:,.0f} M tokens/min of the provider"
    )

    dt = 60.0 if quick else 30.0
    loads = (50, 1000) if quick else (25, 50, 100, 250, 500, 1000)
    print(f"\nsimulated day (seed {args.seed}, {dt:.0f} s steps): push -> verdict, by load")
    print(
        f"  {'config':<26}{'PRs/day':>8}{'p50':>8}{'p95':>8}{'queue p95':>10}{'no verdict':>11}"
        f"   peak-hour utilisation (runs, pods, gateway, rpm, tpm)"
    )
    results: dict[tuple[str, int], DayResult] = {}
    for cfg in (shipped, sized):
        for n in loads:
            res = simulate_day(cfg, replace(load, prs_per_day=n), pairs, args.seed, dt=dt)
            results[(cfg.name, n)] = res
            u = res.util
            print(
                f"  {cfg.name:<26}{n:>8}{fmt_h(pct(res.verdict_s, 0.5)):>8}{fmt_h(pct(res.verdict_s, 0.95)):>8}"
                f"{fmt_h(pct(res.queued_s, 0.95)):>10}{res.unfinished:>11}   "
                + " ".join(
                    f"{u[k]:4.0%}" for k in ("run slots", "pods", "gateway slots", "provider rpm", "provider tpm")
                )
            )

    # Partitions, by Little's law on the simulated time open (plus the 1 h retention, docs/partitions.md).
    res = results[(sized.name, 1000)]
    open_s = float(np.mean(res.verdict_s)) + 3600.0
    peak_per_s = 1000 / 86400 * float(diurnal_weights().max())
    comparisons_keys = peak_per_s * open_s
    print(
        f"\npartitions at the peak hour, sized config: comparisons {comparisons_keys:,.0f}, commits <= "
        f"{2 * comparisons_keys:,.0f}, task_samples (commits x {load.tasks} tasks) <= "
        f"{2 * comparisons_keys * load.tasks:,.0f} of Dagster's advised ~100,000 per asset; "
        f"{1000 * (2 - load.base_reuse):,.0f} commit keys added a day"
    )

    # 4. Standby pool sizing at 1,000 PRs/day on the sized config.
    print("\nstandby pool (started pods waiting for a session) at 1,000 PRs/day, sized config:")
    print(f"  {'pool':>6}{'p95 verdict':>13}{'p95 queue':>11}{'cold starts':>13}{'warm':>8}{'idle $/day':>12}")
    for pool in (0, 16, 64) if quick else (0, 8, 16, 32, 64, 128, 256):
        res = simulate_day(replace(sized, standby=pool), load, pairs, args.seed, dt=dt)
        idle_usd = res.standby_hours * load.vcpu_per_pod * load.usd_per_vcpu_hour
        print(
            f"  {pool:>6}{fmt_h(pct(res.verdict_s, 0.95)):>13}{fmt_h(pct(res.queued_s, 0.95)):>11}"
            f"{res.cold:>13,}{res.warm:>8,}{idle_usd:>12.2f}"
        )

    # 5. A day's cost at 1,000 PRs on the sized config.
    from evalrunner_assets.pricing import PriceTable

    res = results[(sized.name, 1000)]
    prices = PriceTable({"openai/gpt-4o": (load.usd_in_per_mtok, load.usd_out_per_mtok)})
    tokens_in = res.calls * load.tokens_in
    tokens_out = res.calls * load.tokens_out
    model_usd = prices.cost({"model": "openai/gpt-4o", "input_tokens": tokens_in, "output_tokens": tokens_out}) or 0.0
    pod_usd = (res.pod_hours + res.standby_hours) * load.vcpu_per_pod * load.usd_per_vcpu_hour
    print(
        f"\na day's cost, 1,000 PRs, sized config: {res.samples:,} samples, {res.windows:,} windows, "
        f"{res.calls / 1e6:,.1f} M calls; model ${model_usd:,.0f} "
        f"({tokens_in / 1e9:,.1f} G in + {tokens_out / 1e9:,.1f} G out at ${load.usd_in_per_mtok}/${load.usd_out_per_mtok} per Mtok), "
        f"pods ${pod_usd:,.0f} ({res.pod_hours + res.standby_hours:,.0f} pod-hours x {load.vcpu_per_pod} vCPU "
        f"at ${load.usd_per_vcpu_hour}/vCPU-h)"
    )
    print(f"done in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
