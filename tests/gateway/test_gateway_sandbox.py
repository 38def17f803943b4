"""Inspect's real ``openai/…`` provider in real bubblewrap sandboxes, reaching a stand-in
upstream (no model API is reachable here) only through the model gateway: the sandbox holds a
scoped token, never the key; the gateway's meter agrees with Inspect's own usage; a spent budget
ends a comparison as a budget stop; a model-graded scorer runs through the same gateway."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from evalrunner_assets.execution.inspect_runner import TaskRunConfig, WarmTaskRunner
from evalrunner_assets.execution.sandbox import RepoExport, SandboxRequest, SandboxStatus
from evalrunner_assets.gateway import GatewaySettings, ModelGateway, with_gateway
from evalrunner_assets.pipeline.windows import log_usage
from lake import Window
from lake.batch import RunSettings
from tests.helpers.model_graded_repo import FIXTURE, KEY, graded_repo
from tests.helpers.openai_standin import OpenAIStandIn
from tests.helpers.pipeline_fixtures import evalrunner_home

pytestmark = pytest.mark.slow


@pytest.fixture()
def upstream():
    with OpenAIStandIn() as up:
        yield up


@pytest.fixture()
def export(tmp_path) -> RepoExport:
    shutil.copytree(FIXTURE, tmp_path / "repo")
    return RepoExport(repo="acme/graded", commit="a" * 40, path=str(tmp_path / "repo"), tree_digest="")


def _gateway(up: OpenAIStandIn, **kw) -> ModelGateway:
    return ModelGateway(
        GatewaySettings(keys={"openai": KEY}, bases={"openai": up.openai_base, "anthropic": up.anthropic_base}, **kw)
    )


def _models(usage: dict) -> dict[str, tuple[int, int, int]]:
    return {m: (u["input_tokens"], u["output_tokens"], u["total_tokens"]) for m, u in usage["models"].items()}


def test_inspect_openai_provider_runs_a_window_through_the_gateway_and_usage_agrees(bwrap_backend, upstream, export):
    with _gateway(upstream) as gw:
        backend = with_gateway(bwrap_backend, gw)
        cfg = TaskRunConfig(
            repo="acme/graded",
            task="support/graded",
            spec="evals/graded.py@graded",
            settings=RunSettings(model="openai/gpt-4o"),
        )
        with WarmTaskRunner(backend, export, cfg) as runner:
            run = runner.run_window(Window(0, 4))
    assert run.ok, (run.failure_kind, run.failure_cause, run.stderr_tail)
    # Solver calls on the task's model, grader calls on the scorer's model: both metered, and
    # per model exactly what Inspect's log records.
    inspect_usage = log_usage(run.log_bytes)
    assert inspect_usage is not None
    assert _models(run.gateway_usage) == _models(inspect_usage)
    assert set(run.gateway_usage["models"]) == {"openai/gpt-4o", "openai/gpt-4o-mini"}
    assert run.gateway_usage["requests"] == 8
    # The stand-in saw only the real key; the sandbox's side never did.
    assert {r["authorization"] for r in upstream.state.requests} == {f"Bearer {KEY}"}
    for blob in (run.log_bytes, run.stderr_tail.encode()):
        assert KEY.encode() not in blob


PROBE = r"""
import json, os, sys, urllib.request
key_env = os.environ.get("OPENAI_API_KEY", "")
found = []
for root in ("/work/repo", "/work/out", "/work/home", "/tmp", "/run"):  # all but the read-only Python env
    for dirpath, dirnames, filenames in os.walk(root):
        for f in filenames:
            p = os.path.join(dirpath, f)
            try:
                with open(p, "rb") as fh:
                    data = fh.read(1 << 20)
            except OSError:
                continue
            found.append((p, data.decode("latin-1")))
for pid in [d for d in os.listdir("/proc") if d.isdigit()]:  # every process: the relay too
    for what in ("environ", "cmdline"):
        try:
            found.append((f"/proc/{pid}/{what}", open(f"/proc/{pid}/{what}", "rb").read().decode("latin-1")))
        except OSError:
            pass
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
                             data=json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}).encode(),
                             headers={"authorization": "Bearer " + key_env, "content-type": "application/json"})
answer = urllib.request.urlopen(req, timeout=30).read().decode()
try:
    urllib.request.urlopen(sys.argv[1], timeout=5)
    direct = "reachable"
except Exception as exc:
    direct = type(exc).__name__
print(json.dumps({"env": dict(os.environ), "files": found, "answer": answer, "direct": direct}))
"""


def test_the_sandbox_holds_a_scoped_token_and_no_key_anywhere(bwrap_backend, upstream, export):
    with _gateway(upstream) as gw:
        backend = with_gateway(bwrap_backend, gw)
        result = backend.run(
            SandboxRequest(
                argv=("python", "-c", PROBE, upstream.openai_base + "/chat/completions"),
                export=export,
                labels={"window": "w000000-000001"},
            )
        )
        leftover_scopes = list(gw._scopes)
    assert result.status is SandboxStatus.OK, result.stderr_tail
    seen = json.loads(result.stdout)
    env = seen["env"]
    assert env["OPENAI_API_KEY"].startswith("evgw-") and env["OPENAI_BASE_URL"].startswith("http://127.0.0.1:")
    assert KEY not in result.stdout.decode() and KEY not in result.stderr_tail
    assert any(p.endswith("/environ") for p, _ in seen["files"])  # the probe did read what it could see
    assert any(p.startswith("/work/repo/") for p, _ in seen["files"])
    assert "ANSWER: HI" in seen["answer"]
    assert seen["direct"] != "reachable"  # the upstream itself is not reachable from the sandbox
    assert result.gateway_usage["requests"] == 1
    assert leftover_scopes == []  # the run's scope (token, socket) ended with it
    # A user-provided env may still not carry credential-like names.
    from evalrunner_assets.execution._local import SandboxRequestError

    with pytest.raises(SandboxRequestError, match="looks like a credential"):
        bwrap_backend.run(SandboxRequest(argv=("true",), export=export, env={"OPENAI_API_KEY": "x"}))
    with pytest.raises(SandboxRequestError, match="not one the model gateway sets"):
        bwrap_backend.run(SandboxRequest(argv=("true",), export=export, gateway_env={"AWS_SECRET_ACCESS_KEY": "x"}))


# --- end to end: `evalrunner compare` ----------------------------------------------------------


def _compare(tmp_path: Path, upstream: OpenAIStandIn, *extra: str) -> tuple[int, str, Path]:
    """`evalrunner compare` as a user runs it (its own process), with the key on the host only."""
    import os
    import subprocess

    prices = tmp_path / "prices.json"
    prices.write_text(
        json.dumps(
            {"openai/gpt-4o": {"input": 2.5, "output": 10}, "openai/gpt-4o-mini": {"input": 0.15, "output": 0.6}}
        )
    )
    repo = graded_repo(tmp_path)
    with evalrunner_home(tmp_path / "home") as home:
        env = {
            **os.environ,
            "OPENAI_API_KEY": KEY,
            "OPENAI_BASE_URL": upstream.openai_base,
            "EVALRUNNER_PRICES": str(prices),
        }
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "evalrunner_assets.cli",
                "compare",
                "--repo",
                str(repo),
                "--repo-id",
                "acme/graded",
                "--base",
                "main",
                "--head",
                "head",
                "--pr",
                "7",
                "--model",
                "openai/gpt-4o",
                "--workers",
                "2",
                *extra,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        return proc.returncode, proc.stdout + proc.stderr, home.lake_root


def _lake_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


def test_compare_with_an_openai_model_runs_through_the_gateway(tmp_path, upstream):
    code, output, lake_root = _compare(tmp_path, upstream)
    assert code == 0, output
    docs = [p for p in (lake_root / "comparisons").rglob("*.json") if p.name.count(".") == 1]
    doc = json.loads(docs[0].read_text())
    assert doc["verdict"] in ("UNCHANGED", "INCONCLUSIVE"), doc["verdict"]
    gw = doc["execution"]["gateway"]
    assert gw["budget_refusals"] == 0 and gw["requests"] > 0
    assert set(gw["models"]) == {"openai/gpt-4o", "openai/gpt-4o-mini"}  # the grader's calls too
    # One gateway record per landed window, agreeing with Inspect's usage in the landed log.
    records = sorted((lake_root / "gateway").rglob("*.json"))
    batches = sorted((lake_root / "batches").rglob("*.json"))
    assert len(records) == len(batches) > 0
    for rec_path in records:
        rec = json.loads(rec_path.read_text())
        assert rec["window_status"] == "ok" and rec["usage"]["requests"] > 0
        (log_path,) = list((lake_root / "raw").rglob(f"*{rec['batch']}*.eval"))
        assert _models(rec["usage"]) == _models(log_usage(log_path.read_bytes())), rec_path
    # The graded task's scorer said C on every sample: the grader model really answered.
    import duckdb

    rows = duckdb.sql(
        f"select task, min(score), max(score), count(*) from "
        f"read_parquet('{lake_root}/tables/samples/**/*.parquet', hive_partitioning=false) "
        f"group by task order by task"
    ).fetchall()
    assert {r[0]: (r[1], r[2]) for r in rows} == {"support/answers": (1.0, 1.0), "support/graded": (1.0, 1.0)}
    # The key is nowhere in the lake, nor in what the command printed.
    for p in _lake_files(lake_root):
        assert KEY.encode() not in p.read_bytes(), p
    assert KEY not in output


def test_a_spent_dollar_budget_ends_the_comparison_as_a_budget_stop(tmp_path, upstream):
    code, output, lake_root = _compare(tmp_path, upstream, "--budget-usd", "0.0001")
    assert code == 0, output
    docs = [p for p in (lake_root / "comparisons").rglob("*.json") if p.name.count(".") == 1]
    doc = json.loads(docs[0].read_text())
    assert doc["status"] == "budget_spent", doc.get("status")
    assert "model budget of $0.0001 was spent" in doc["stopped_reason"]
    assert doc["verdict"] == "INCONCLUSIVE"
    assert "budget" in output and "spent" in output
    assert "breaker" not in doc  # not an outage
    assert not (lake_root / "failures").exists() or not list((lake_root / "failures").rglob("*.json"))
    assert KEY not in output
    windows = doc["execution"]["windows"]
    if windows.get("budget_stopped", 0) == 0:
        # Every call of the first windows (one per worker) was admitted before the first one was
        # priced: they land, and no window starts once the budget is spent.
        assert windows.get("landed", 0) <= 2, windows
        assert "0 window(s) stopped, nothing more was run" in doc["stopped_reason"]
        return
    assert doc["execution"]["gateway"]["budget_refusals"] >= 1
    stopped = [json.loads(p.read_text()) for p in (lake_root / "gateway").rglob("*.json")]
    assert any(r["failure_kind"] == "budget_spent" and r["usage"]["budget_refusals"] > 0 for r in stopped)


def test_a_429_storm_and_server_errors_are_absorbed_by_the_gateway_and_the_window_succeeds(
    bwrap_backend, upstream, export
):
    upstream.fail_next(3, 429, retry_after="1")
    upstream.fail_next(2, 503)
    # Five retries per request: even if one request meets every fault, the gateway absorbs them.
    with _gateway(upstream, max_retries=5, backoff_base_s=0.05) as gw:
        backend = with_gateway(bwrap_backend, gw)
        cfg = TaskRunConfig(
            repo="acme/graded",
            task="support/answers",
            spec="evals/graded.py@answers",
            settings=RunSettings(model="openai/gpt-4o"),
        )
        with WarmTaskRunner(backend, export, cfg) as runner:
            run = runner.run_window(Window(0, 4))
    assert run.ok, (run.failure_kind, run.failure_cause, run.stderr_tail)
    assert run.gateway_usage["retries"] == 5
    assert run.gateway_usage["retry_wait_s"] >= 3.0  # the three Retry-After: 1 were honoured
    assert run.gateway_usage["upstream_errors"] == 0 and run.gateway_usage["requests"] == 4
    assert [r["status"] for r in upstream.state.requests].count(200) == 4
    assert _models(run.gateway_usage) == _models(log_usage(run.log_bytes))


def test_inspect_anthropic_provider_streams_through_the_gateway_and_usage_agrees(bwrap_backend, upstream, export):
    ant_key = "sk-ant-standin-REAL-KEY-5d1e"
    with ModelGateway(
        GatewaySettings(
            keys={"anthropic": ant_key}, bases={"openai": upstream.openai_base, "anthropic": upstream.anthropic_base}
        )
    ) as gw:
        cfg = TaskRunConfig(
            repo="acme/graded",
            task="support/answers",
            spec="evals/graded.py@answers",
            settings=RunSettings(model="anthropic/claude-sonnet-4-0"),
        )
        with WarmTaskRunner(with_gateway(bwrap_backend, gw), export, cfg) as runner:
            run = runner.run_window(Window(0, 2))
    assert run.ok, (run.failure_kind, run.failure_cause, run.stderr_tail)
    assert {r["x-api-key"] for r in upstream.state.requests} == {ant_key}
    assert _models(run.gateway_usage) == _models(log_usage(run.log_bytes))
    assert run.gateway_usage["total_tokens"] > 0
    assert ant_key.encode() not in run.log_bytes
