"""`evalrunner compare` against a model provider that is down, refuses the key, stumbles, or
runs out of budget: real bubblewrap sandboxes running Inspect's real ``openai/…`` provider,
reaching a stand-in upstream on loopback (no model API is reachable here) through the model
gateway. Each test checks the exit code, the check run and comment the lake holds (there are
no GitHub credentials), and how long and how many upstream calls it took to stop."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from evalrunner_assets.gateway._circuit import TRIP_FAILURES
from tests.helpers.model_graded_repo import KEY, graded_repo
from tests.helpers.openai_standin import OpenAIStandIn
from tests.helpers.pipeline_fixtures import evalrunner_home

pytestmark = pytest.mark.slow

WORKERS = 2
CONCURRENCY = 4  # the gateway's requests in flight per provider (EVALRUNNER_GATEWAY_CONCURRENCY)
# The bounds: a dead provider stops the comparison within a minute and 50 calls.
STOP_WITHIN_S = 60.0
STOP_WITHIN_CALLS = 50
PRICES = {"openai/gpt-4o": {"input": 2.5, "output": 10}, "openai/gpt-4o-mini": {"input": 0.15, "output": 0.6}}


@dataclass
class Compared:
    code: int
    output: str
    ended_at: float  # time.monotonic() when the command had exited
    lake: Path

    def artifact(self, suffix: str) -> Path:
        (path,) = [p for p in (self.lake / "comparisons").rglob(f"*{suffix}")]
        return path

    @property
    def doc(self) -> dict:
        docs = [p for p in (self.lake / "comparisons").rglob("*.json") if p.name.count(".") == 1]
        return json.loads(docs[0].read_text())

    @property
    def check_run(self) -> dict:
        return json.loads(self.artifact(".check_run.json").read_text())

    @property
    def comment(self) -> str:
        return self.artifact(".comment.md").read_text()


@pytest.fixture()
def upstream():
    with OpenAIStandIn() as up:
        yield up


def compare(tmp_path: Path, openai_base: str, *extra: str, prices: dict | None = None) -> Compared:
    """`evalrunner compare` as a user runs it (its own process), the key on the host only."""
    prices_file = tmp_path / "prices.json"
    prices_file.write_text(json.dumps(prices or PRICES))
    repo = graded_repo(tmp_path)
    with evalrunner_home(tmp_path / "home") as home:
        env = {
            **os.environ,
            "OPENAI_API_KEY": KEY,
            "OPENAI_BASE_URL": openai_base,
            "EVALRUNNER_PRICES": str(prices_file),
            "EVALRUNNER_GATEWAY_CONCURRENCY": str(CONCURRENCY),
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
                str(WORKERS),
                *extra,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        return Compared(proc.returncode, proc.stdout + proc.stderr, time.monotonic(), home.lake_root)


def assert_no_verdict(done: Compared, title_starts: str) -> dict:
    doc = done.doc
    assert doc["status"] == "stopped" and doc["verdict"] == "INCONCLUSIVE", doc.get("status")
    check = done.check_run
    assert check["status"] == "completed" and check["conclusion"] == "neutral", check
    assert check["title"].startswith(title_starts), check["title"]
    assert f"> **Could not evaluate:** {doc['stopped_reason']}" in done.comment
    assert doc["stopped_reason"] in check["summary"]
    assert not (done.lake / "failures").exists() or not list((done.lake / "failures").rglob("*.json"))
    assert KEY not in done.output
    for p in done.lake.rglob("*"):
        if p.is_file():
            assert KEY.encode() not in p.read_bytes(), p
    return doc


def test_a_provider_answering_500_to_every_call_is_an_outage_within_a_minute(tmp_path, upstream):
    # The provider answers the first windows' calls, then 500 to every call.
    served = 40  # the comparison needs 48: the first windows land, the last ones meet the outage
    upstream.fail_always(500, after=served)
    done = compare(tmp_path, upstream.openai_base)
    assert done.code == 3, done.output[-3000:]
    doc = assert_no_verdict(done, "could not evaluate: model provider openai is down")
    assert "evalrunner compare: stopped: model provider openai is down" in done.output
    breaker = doc["breaker"]
    assert breaker["kind"] == "model_provider_outage" and breaker["provider"] == "openai"
    assert set(breaker["failures"]) == {"500"} and breaker["failures"]["500"] >= 8
    assert "× 500" in done.check_run["title"]
    # What the provider answered before it went down landed (and is reused by a rerun).
    assert list((done.lake / "batches").rglob("*.json"))
    # Measured at the stand-in: from the first failed call to the command having exited.
    calls = upstream.state.requests
    assert {r["status"] for r in calls[:served]} == {200} and {r["status"] for r in calls[served:]} == {500}
    down = calls[served:]
    took = done.ended_at - down[0]["at"]
    print(f"500 from call {served + 1} on: stopped {took:.1f}s after the first failed call, {len(down)} calls since")
    assert took <= STOP_WITHIN_S, took
    assert len(down) <= STOP_WITHIN_CALLS, len(down)
    # The gateway counted every call (the count the refused-connection test relies on).
    assert doc["execution"]["gateway"]["upstream_calls"]["openai"] == len(calls) == breaker["upstream_calls"]


def test_a_provider_refusing_connections_is_an_outage_within_a_minute(tmp_path):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there: every connection is refused
    started = time.monotonic()
    done = compare(tmp_path, f"http://127.0.0.1:{port}/v1")
    assert done.code == 3, done.output[-3000:]
    doc = assert_no_verdict(done, "could not evaluate: model provider openai is down")
    breaker = doc["breaker"]
    assert set(breaker["failures"]) == {"ConnectError"}, breaker["failures"]
    assert "× ConnectError" in done.check_run["title"]
    # Nothing upstream to watch: the gateway's count (checked against the stand-in above) and
    # its clock from the first refused call to the trip, then the trip to the command's exit.
    assert breaker["upstream_calls"] <= STOP_WITHIN_CALLS
    from datetime import datetime

    opened = datetime.fromisoformat(breaker["opened_at"]).timestamp()
    took = breaker["window_s"] + (time.time() - (time.monotonic() - done.ended_at)) - opened
    print(f"refused: stopped {took:.1f}s after the first refused call, {breaker['upstream_calls']} upstream calls")
    assert took <= STOP_WITHIN_S, took
    assert done.ended_at - started <= 240  # the whole command, sandbox start-up included


def test_a_provider_refusing_the_key_stops_at_once_naming_the_variable(tmp_path, upstream):
    upstream.fail_always(401)
    done = compare(tmp_path, upstream.openai_base)
    assert done.code == 2, done.output[-3000:]
    doc = assert_no_verdict(done, "could not evaluate: model provider openai refused the key in OPENAI_API_KEY")
    assert "evalrunner compare: stopped: model provider openai refused the key in OPENAI_API_KEY: HTTP 401" in (
        done.output
    )
    assert "set OPENAI_API_KEY to a valid key for openai" in done.output  # the hint line
    assert doc["breaker"]["kind"] == "model_provider_auth"
    calls = upstream.state.requests
    # One refusal opens the circuit; only calls already in flight at that moment went out.
    assert 1 <= len(calls) <= CONCURRENCY, len(calls)
    took = done.ended_at - calls[0]["at"]
    print(f"401: stopped {took:.1f}s after the first refusal, {len(calls)} upstream calls")
    assert took <= STOP_WITHIN_S, took


def test_a_few_500s_and_429s_are_retried_and_the_comparison_completes(tmp_path, upstream):
    # Fewer failures than the circuit's trip count: whether they come in flight together or
    # one probe after another (sandboxes starting late on a busy machine), they are a blip. Nine
    # failures one after another span the probes' 0.5, 1, 2, 4, 4 … s for 20 s: that is the
    # documented outage (test_model_gateway checks the rule itself).
    upstream.fail_next(3, 500)
    upstream.fail_next(2, 429, retry_after="1")
    upstream.fail_next(2, 503)
    assert 3 + 2 + 2 < TRIP_FAILURES
    done = compare(tmp_path, upstream.openai_base)
    assert done.code == 0, done.output[-3000:]
    doc = done.doc
    assert doc["status"] == "complete" and "breaker" not in doc
    assert doc["verdict"] in ("UNCHANGED", "INCONCLUSIVE"), doc["verdict"]
    assert all(t["head"]["samples"] == 8 and t["base"]["samples"] == 8 for t in doc["tasks"].values())
    check = done.check_run
    assert check["status"] == "completed" and not check["title"].startswith("could not evaluate")
    assert "Could not evaluate" not in done.comment
    gw = doc["execution"]["gateway"]
    assert gw["retries"] == 7 and gw["upstream_errors"] == 0
    statuses = [r["status"] for r in upstream.state.requests]
    assert statuses[:7] == [500] * 3 + [429] * 2 + [503] * 2 and set(statuses[7:]) == {200}
    # Every sample ran on its own answer: the retries did not reach Inspect (no errored sample).
    assert all(t["head"]["errors"] == 0 and t["base"]["errors"] == 0 for t in doc["tasks"].values())
    assert gw["upstream_calls"]["openai"] == len(statuses)
    print(f"transient: {gw['retries']} retries, {gw['retry_wait_s']}s waited in all, {len(statuses)} upstream calls")


def test_a_spent_budget_overshoots_by_at_most_the_calls_in_flight_and_one_spend_is_shown(tmp_path, upstream):
    # Expensive calls ($1 per token), so the budget is crossed within the first windows.
    prices = {"openai/gpt-4o": {"input": 1e6, "output": 1e6}, "openai/gpt-4o-mini": {"input": 1e6, "output": 1e6}}
    budget = 150.0
    done = compare(tmp_path, upstream.openai_base, "--budget-usd", str(budget), prices=prices)
    assert done.code == 0, done.output[-3000:]
    doc = done.doc
    assert doc["status"] == "budget_spent", doc["status"]
    gw = doc["execution"]["gateway"]
    spent = gw["spent_usd"]
    assert spent >= budget
    # The bound: once the spend reaches the budget no call starts, so what is over is at most
    # the calls in flight then: one per concurrency slot, each at most the dearest call.
    answered = sorted((r for r in upstream.state.requests if r["status"] == 200), key=lambda r: r["done_at"])
    cost = [float(sum(r["tokens"])) for r in answered]  # $1 per token, input or output
    assert sum(cost) == pytest.approx(spent)  # the gateway metered every answered call
    dearest = max(cost)
    assert spent - budget <= CONCURRENCY * dearest, (spent, budget, dearest)
    # Calls that reached the provider after the call that crossed the budget had ended were
    # admitted before it was charged: at most one per other concurrency slot.
    total, crossed_at = 0.0, None
    for r, c in zip(answered, cost, strict=True):
        total += c
        if total >= budget:
            crossed_at = r["done_at"]
            break
    assert crossed_at is not None
    late = [r for r in upstream.state.requests if r["at"] > crossed_at]
    print(
        f"budget ${budget:g}: spent ${spent:g} (dearest call ${dearest:g}), "
        f"{len(late)} call(s) reached the provider after the crossing one ended"
    )
    assert len(late) <= CONCURRENCY - 1, len(late)
    # One number everywhere: document, comment, check run (summary), terminal.
    from evalrunner_assets.report.markdown import format_usd

    shown = format_usd(spent)
    assert doc["spend_usd"] == pytest.approx(spent) and doc["spend_known"] is True
    assert f"({shown})" in doc["stopped_reason"]
    assert f"spend {shown}" in done.comment and f"> **Budget spent:** {doc['stopped_reason']}" in done.comment
    check = done.check_run
    assert check["conclusion"] == "neutral" and f"spend {shown}" in check["summary"]
    assert f"spend {shown}" in done.output and doc["stopped_reason"] in done.output
    assert "unknown" not in next(line for line in done.output.splitlines() if "spend" in line and "samples" in line)
