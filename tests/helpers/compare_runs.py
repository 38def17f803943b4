"""`evalrunner compare` as a subprocess on the example repository (base ``main``, head
``improve-runbook``) with its own ``EVALRUNNER_HOME``, and what it leaves in that home's lake:
shared by the tests that kill, interrupt or simply run it (resume, cancel, the broken gate,
the breaker, the Inspect examples, the web pages)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.signals import default_sigint

CAP = "32"  # two 16-pair windows per task and arm: enough steps to kill between, quick to run
EVALRUNNER = str(Path(sys.executable).with_name("evalrunner"))


def compare_argv(repo: Path, *extra: str) -> list[str]:
    return [
        EVALRUNNER,
        "compare",
        "--repo",
        str(repo),
        "--base",
        "main",
        "--head",
        "improve-runbook",
        "--cap",
        CAP,
        *extra,
    ]


def start_compare(home: Path, repo: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "EVALRUNNER_HOME": str(home)}
    env.pop("DAGSTER_HOME", None)
    return subprocess.Popen(
        compare_argv(repo, *extra),
        cwd=home.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=default_sigint,  # tests/pipeline/test_cancel.py interrupts it
    )


def run_compare(home: Path, repo: Path, *extra: str, timeout: float = 200) -> subprocess.CompletedProcess:
    proc = start_compare(home, repo, *extra)
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def lake(home: Path) -> Path:
    return home / "lake"


def batch_records(home: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((lake(home) / "batches").rglob("*.json"))]


def comparison_doc(home: Path) -> dict:
    docs = [p for p in (lake(home) / "comparisons").rglob("*.json") if p.name.count(".") == 1]
    assert len(docs) == 1, docs
    return json.loads(docs[0].read_text())


def bwraps_of(home: Path) -> list[int]:
    """Live bubblewrap processes whose command line mounts something of this test's home."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == b"bwrap" and any(str(home).encode() in a for a in argv):
            out.append(int(pid))
    return out
