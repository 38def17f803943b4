"""Every benchmark in bench/ still runs: `python -m bench <name> --quick` exits 0 and prints the
line its figure is read from, with a measured number in it. Figures are not asserted (benchmarks
are not timed tests); a bench that crashes or measures nothing fails here instead of rotting."""

from __future__ import annotations

import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import bench

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]

# The line each bench's figure is read from (a ratio measured in the same run, or for the
# statistics bench its summary row). A number of 0 there means the bench measured nothing.
RATIO_LINES: dict[str, str] = {
    "compare_overhead": r"ratio compare / bare, median of 1:\s+(\d+\.\d+)x",
    "daemon_vs_cli": r"round 1: CLI \S+s, daemon \S+s, ratio (\d+\.\d+)x",
    # The candidate may never go over (a ratio of 0): the baseline's overshoot is the measurement.
    "gateway_budget": r"^\s+\d+\s+(\d+) calls\s+\d+ calls\s+\d+\s+(?:\d+\.\d+|–)$",
    "gateway_overhead": r"ratio \(candidate / baseline\)\s+p50\s+(\d+\.\d+)x",
    "ingest": r"land_batch via the direct reader, parsed in \d+ worker processes:.*ratio (\d+\.\d+)x",
    "miner": r"miner \(SQL features \+ matrix \+ tests\)\s+\S+ ms\s+= (\d+\.\d+)x the baseline",
    "repo_env": r"candidate sandboxed build\s+:\s+\S+ s\s+ratio\s+(\d+\.\d+)x",
    # The pre-compare sweep: the whole-lake walk it replaced over the temp-writer index.
    "scale": r"pre-compare sweep at [\d,]+ files: walk \S+ ms, index \S+ ms, ratio (\d+\.\d+)x",
    "series_backfill": r"fixed n = 200\s+: samples\s+\d+ \((\d+\.\d+)× the sequential\)",
    "sql_pairing": r"^ratio (\d+\.\d+)x",
    "stats": r"^sequential: worst per-direction false rate (\d+\.\d+)%",
    "swe_pool": r"ratio (\d+\.\d+)x",
    "web_pages": r"pr page .* = (\d+\.\d+)x the baseline",
    # Recall is the figure here; 0 would mean nothing planted was removed.
    "wild_redaction": r"^structured identifiers: recall (\d+\.\d+)",
}
# Measured quantities that are 0 only when the bench measured nothing.
NONZERO = {"sql_pairing": r"results agree: ([\d,]+) pairs"}


def bench_names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(bench.__path__) if not m.name.startswith("_"))


def test_every_bench_says_which_line_its_figure_is_on() -> None:
    assert sorted(RATIO_LINES) == bench_names(), "add the new bench's figure line to RATIO_LINES"


@pytest.mark.parametrize("name", bench_names())
def test_bench_quick_mode_runs_and_prints_its_figure(name: str) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(
        [sys.executable, "-m", "bench", name, "--quick"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    tail = f"\n--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"bench {name} --quick exited {proc.returncode}{tail}"
    found = re.search(RATIO_LINES[name], proc.stdout, re.MULTILINE)
    assert found is not None, f"bench {name} --quick printed no figure line /{RATIO_LINES[name]}/{tail}"
    if name == "stats":
        return  # a false rate of 0% is a valid figure
    assert float(found.group(1)) > 0, f"bench {name} --quick measured nothing: {found.group(0)!r}{tail}"
    if name in NONZERO:
        counted = re.search(NONZERO[name], proc.stdout)
        assert counted is not None and int(counted.group(1).replace(",", "")) > 0, f"bench {name}: {tail}"
