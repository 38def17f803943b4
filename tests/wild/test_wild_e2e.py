"""End to end on the example: a failure trace of the support agent is redacted and opened as a
PR on the stand-in GitHub; `evalrunner compare` judges the PR's head (its new eval listed as
added); after the merge the cohort series shows the new cohort annotated "1 eval added", not a
regression; the lake holds none of the trace's personal values."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from evalrunner_assets.example_repo import build_example_repo
from tests.helpers.github_standin import GitHubStandin
from tests.helpers.wild_trace import PLANTED, TRACE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
REPO = "example/support-agent"


def _evalrunner(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("evalrunner", path=os.path.dirname(sys.executable)) or "evalrunner"
    return subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=600)


def test_a_wild_failure_becomes_a_pr_a_judged_new_eval_and_a_cohort_added_point(tmp_path):
    repo = build_example_repo(tmp_path / "repo", variants=()).path
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(bare)], check=True)
    trace = tmp_path / "trace.jsonl"
    trace.write_text(json.dumps(TRACE) + "\n")
    env = {**os.environ, "EVALRUNNER_HOME": str(tmp_path / "home"), "EVALRUNNER_GITHUB_TOKEN": "wild-token"}
    standin = GitHubStandin(token="wild-token")
    standin.add_repo(REPO, git_dir=bare)
    with standin:
        env["EVALRUNNER_GITHUB_API_URL"] = standin.base_url
        done = _evalrunner(env, "wild", "import", str(trace), "--repo", str(repo), "--repo-id", REPO, "--yes",
                           "--cohort", "customer-reported/2026-Q4", "--name", "duplicate_charge",
                           "--expect-contains", "refund")  # fmt: skip
        assert done.returncode == 0, done.stderr
        [pull] = standin.pulls_on(REPO)
    assert not any(v in done.stdout + done.stderr + pull["body"] for v in PLANTED)
    # The PR's head, fetched as a CI checkout would, judged against main.
    subprocess.run(["git", "-C", str(repo), "fetch", "-q", str(bare), f"{pull['head']['ref']}:wild-pr"], check=True)
    compared = _evalrunner(
        env, "compare", "--repo", str(repo), "--repo-id", REPO, "--base", "main", "--head", "wild-pr"
    )
    assert compared.returncode == 0, compared.stderr
    assert "new: wild/duplicate_charge" in compared.stdout
    # Merged: main's cohort series gets the new cohort, annotated, and no regression.
    subprocess.run(["git", "-C", str(repo), "merge", "-q", "--ff-only", "wild-pr"], check=True)
    backfilled = _evalrunner(env, "backfill", "--repo", str(repo), "--repo-id", REPO, "--last", "2")
    assert backfilled.returncode == 0, backfilled.stderr
    rows = _evalrunner(env, "sql", "select name, status, flagged from cohort_series where scope = 'cohort' "
                       "and position = (select max(position) from cohort_series)",
                       "--format", "json")  # fmt: skip
    assert rows.returncode == 0, rows.stderr
    got = {r["name"]: (r["status"], r["flagged"]) for r in json.loads(rows.stdout)}
    assert got["customer-reported.2026-q4"] == ("1 eval added", False)
    assert got["default"] == ("no regression", False)
    checked = 0
    for path in (tmp_path / "home").rglob("*"):
        if path.is_file():
            text = _readable(path)
            checked += "duplicate_charge" in text
            assert not any(v in text for v in PLANTED), path
    assert checked  # the eval's own records were among the files read


def _readable(path: Path) -> str:
    """A file's text: Inspect's .eval logs and Parquet rows decoded."""
    if path.suffix == ".eval":  # a compressed archive: read through Inspect
        from inspect_ai.log import read_eval_log

        return read_eval_log(str(path)).model_dump_json()
    if path.suffix == ".parquet":
        return json.dumps(pq.read_table(path).to_pylist(), default=str)
    return path.read_bytes().decode("utf-8", "replace")
