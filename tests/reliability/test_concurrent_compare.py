"""Several `evalrunner compare` processes on one home and lake at once: the same request twice on
a fresh home (both create the Dagster instance), and four at once with two heads on one base.
Every process ends with the verdict an isolated run gives, no failure record is written, and no
window or sample row lands twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from evalrunner_assets.example_repo import build_example_repo

pytestmark = [pytest.mark.slow, pytest.mark.reliability]

CAP = "16"  # one window per task and arm: enough to race on every window, quick on 2 cores
EVALRUNNER = str(Path(sys.executable).with_name("evalrunner"))
HEADS = ("improve-runbook", "regress-escalation")


def start(home: Path, repo: Path, head: str) -> subprocess.Popen:
    env = {**os.environ, "EVALRUNNER_HOME": str(home)}
    env.pop("DAGSTER_HOME", None)
    env.pop("EVALRUNNER_LAKE", None)
    # What is compared here is the verdict each run reaches, not whether it blocks a merge.
    argv = [EVALRUNNER, "compare", "--repo", str(repo), "--base", "main", "--head", head, "--cap", CAP, "--pr", head]
    argv += ["--fail-on", "never"]
    return subprocess.Popen(
        argv,
        cwd=home.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def run_all(runs: list[tuple[Path, str]], repo: Path, timeout: float = 900) -> list[subprocess.CompletedProcess]:
    procs = [start(home, repo, head) for home, head in runs]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


def document(home: Path, head_sha_prefix: str = "") -> dict:
    docs = [p for p in (home / "lake" / "comparisons").rglob("*.json") if p.name.count(".") == 1]
    docs = [p for p in docs if p.name.startswith(head_sha_prefix)]
    assert len(docs) == 1, docs
    return json.loads(docs[0].read_text())


def outcome(doc: dict) -> dict:
    return {
        "verdict": doc["verdict"],
        "samples_run": doc["samples_run"],
        "labels": {t: d["decision"]["label"] for t, d in doc["tasks"].items()},
        "batches": {t: d["batches"] for t, d in doc["tasks"].items()},
        "deltas": {t: d["decision"].get("delta") for t, d in doc["tasks"].items()},
    }


def check_lake(home: Path) -> None:
    lake = home / "lake"
    assert not list((lake / "failures").rglob("*.json")), "a failure record was written"
    assert not list((lake / "failures-retired").rglob("*.json")), "a failure record was written and retired"
    records = [json.loads(p.read_text()) for p in (lake / "batches").rglob("*.json")]
    assert records and all(r["status"] == "ok" for r in records)
    windows = Counter((r["commit"], r["task"], r["window"]) for r in records)
    assert all(n == 1 for n in windows.values()), windows
    env = {**os.environ, "EVALRUNNER_LAKE": str(lake)}
    rows = subprocess.run(
        [
            EVALRUNNER,
            "sql",
            'select count(*) as n, count(distinct ("commit", task, sample_id, epoch)) as d from samples',
            "--format",
            "json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rows.returncode == 0, rows.stderr
    (counts,) = json.loads(rows.stdout)
    assert counts["n"] == counts["d"] == sum(r["sample_rows"] for r in records)
    verify = subprocess.run([EVALRUNNER, "lake", "verify"], env=env, capture_output=True, text=True, timeout=120)
    assert verify.returncode == 0, verify.stdout
    assert not [p for p in lake.rglob("*") if ".tmp-" in p.name]


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("example") / "repo"
    build_example_repo(repo, list(HEADS))
    return repo


@pytest.fixture(scope="module")
def isolated(tmp_path_factory: pytest.TempPathFactory, example: Path) -> dict[str, dict]:
    """Each head compared alone, in its own home (the two homes run side by side)."""
    homes = {head: tmp_path_factory.mktemp(f"isolated-{head}") / "home" for head in HEADS}
    for home in homes.values():
        home.mkdir()
    done = run_all([(homes[h], h) for h in HEADS], example)
    for proc in done:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return {head: outcome(document(homes[head])) for head in HEADS}


def test_two_identical_compares_on_a_fresh_home_both_finish_with_the_isolated_verdict(
    tmp_path: Path, example: Path, isolated: dict[str, dict]
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    head = HEADS[0]
    done = run_all([(home, head), (home, head)], example)
    for proc in done:
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "already exists" not in proc.stderr and "already committed" not in proc.stderr
    assert outcome(document(home)) == isolated[head]
    check_lake(home)


def test_four_compares_with_two_heads_on_one_base_match_their_isolated_runs(
    tmp_path: Path, example: Path, isolated: dict[str, dict]
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    done = run_all([(home, h) for h in HEADS + HEADS], example)
    for proc in done:
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for head in HEADS:
        docs = [p for p in (home / "lake" / "comparisons").rglob(f"{head}/*.json") if p.name.count(".") == 1]
        assert len(docs) == 1, docs
        assert outcome(json.loads(docs[0].read_text())) == isolated[head]
    check_lake(home)
