"""One engine at a time per comparison: the lease beside the comparison in the lake.

The CLI and the daemon drive the same engine over one lake; the lease keeps the sampling sensor
from starting a second engine on a comparison `evalrunner compare` is running, and a command
from running a comparison a live engine holds. Real lake files, a real Dagster instance and the
real sensor; holders are real processes (a `sleep`) so liveness is checked as in use."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest

from evalrunner_assets.pipeline import lease as lease_mod
from evalrunner_assets.pipeline.lease import ComparisonBusy, ComparisonLease, live_holder, read_lease
from evalrunner_assets.pipeline.spec import ComparisonRequest, open_comparison
from lake import LAYOUT, open_lake
from tests.helpers.git_repos import git

SHA_BASE, SHA_HEAD = "a" * 40, "b" * 40


def request() -> ComparisonRequest:
    return ComparisonRequest(
        repo="acme/agent",
        source="",
        pr="7",
        base_sha=SHA_BASE,
        head_sha=SHA_HEAD,
        base_ref="main",
        head_ref="feature",
        requested_at=datetime.now(UTC).isoformat(),
    )


@pytest.fixture
def holder():
    """A live process that is not this one (the owner of someone else's lease)."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


def plant(the_lake, req, *, pid: int, host: str | None = None, age_s: float = 0.0, owner: str = "evalrunner compare"):
    now = time.time() - age_s
    doc = {
        "token": "theirs",
        "owner": owner,
        "host": host or socket.gethostname(),
        "pid": pid,
        "started_at": now,
        "heartbeat_at": now,
    }
    the_lake.write_bytes(
        LAYOUT.comparison_artifact(req.repo, req.pr, req.head_sha, "lease.json"), json.dumps(doc).encode()
    )


def test_a_lease_is_held_while_running_refuses_a_second_engine_and_is_gone_after(tmp_path):
    the_lake, req = open_lake(str(tmp_path / "lake")), request()
    with ComparisonLease(the_lake, req, "evalrunner compare") as held:
        assert live_holder(the_lake, req) == held.lease
        with pytest.raises(ComparisonBusy) as busy:
            ComparisonLease(the_lake, req, "comparison_job run r1").acquire()
        assert "evalrunner compare (pid" in str(busy.value) and req.key in str(busy.value)
    assert read_lease(the_lake, req) is None


def test_a_dead_holder_on_this_host_is_taken_over_at_once(tmp_path):
    the_lake, req = open_lake(str(tmp_path / "lake")), request()
    gone = subprocess.Popen(["true"])
    gone.wait()
    plant(the_lake, req, pid=gone.pid)
    assert live_holder(the_lake, req) is None
    with ComparisonLease(the_lake, req, "evalrunner compare") as held:
        assert read_lease(the_lake, req) == held.lease


def test_another_hosts_lease_is_live_until_its_heartbeat_is_older_than_the_ttl(tmp_path):
    the_lake, req = open_lake(str(tmp_path / "lake")), request()
    plant(the_lake, req, pid=1, host="elsewhere", age_s=5)
    with pytest.raises(ComparisonBusy, match="on elsewhere"):
        ComparisonLease(the_lake, req, "evalrunner compare").acquire()
    plant(the_lake, req, pid=1, host="elsewhere", age_s=lease_mod.TTL_S + 1)
    with ComparisonLease(the_lake, req, "evalrunner compare"):
        assert read_lease(the_lake, req).host == socket.gethostname()


def test_the_holder_heartbeats_and_does_not_remove_a_lease_taken_over_from_it(tmp_path, monkeypatch):
    monkeypatch.setattr(lease_mod, "HEARTBEAT_S", 0.05)
    the_lake, req = open_lake(str(tmp_path / "lake")), request()
    held = ComparisonLease(the_lake, req, "evalrunner compare")
    held.acquire()
    first = read_lease(the_lake, req).heartbeat_at
    deadline = time.time() + 10
    while read_lease(the_lake, req).heartbeat_at == first and time.time() < deadline:
        time.sleep(0.02)
    assert read_lease(the_lake, req).heartbeat_at > first
    plant(the_lake, req, pid=1, host="elsewhere")  # taken over while this holder was thought gone
    time.sleep(0.2)
    held.release()
    assert read_lease(the_lake, req).token == "theirs"  # neither overwritten nor removed


def test_the_sampling_sensor_leaves_a_comparison_to_the_engine_holding_it(tmp_path, holder):
    from resources import LakeResource, SandboxResource
    from sensors.sampling import sampling_sensor

    the_lake, req = open_lake(str(tmp_path / "lake")), request()
    open_comparison(the_lake, req)
    resources = {
        "lake": LakeResource(root=str(tmp_path / "lake")),
        "sandbox": SandboxResource(backend_name="bubblewrap"),
    }
    with dg.instance_for_test() as instance:

        def requested() -> list[str]:
            result = sampling_sensor(dg.build_sensor_context(instance=instance, resources=resources))
            return [r.run_key or "" for r in result.run_requests or []]

        assert requested()  # open and undecided, no run: the sensor would start one
        plant(the_lake, req, pid=holder.pid)
        assert requested() == []  # `evalrunner compare` (a live process) is on it
        holder.kill()
        holder.wait()
        assert requested()  # the holder died: the comparison is picked up again


def test_a_waiting_engine_takes_the_lease_once_the_holder_is_gone(tmp_path, holder, monkeypatch):
    monkeypatch.setattr(lease_mod, "POLL_S", 0.05)
    the_lake, req = open_lake(str(tmp_path / "lake")), request()
    plant(the_lake, req, pid=holder.pid)
    told: list[str] = []
    waiter = ComparisonLease(the_lake, req, "evalrunner compare")
    thread = threading.Thread(target=lambda: waiter.acquire(wait=True, on_wait=lambda h: told.append(h.owner)))
    thread.start()
    time.sleep(0.5)
    assert thread.is_alive() and told == ["evalrunner compare"]  # told once, still waiting
    holder.kill()
    holder.wait()
    thread.join(timeout=10)
    assert not thread.is_alive() and read_lease(the_lake, req) == waiter.lease
    waiter.release()


@pytest.mark.slow
def test_a_second_compare_of_the_same_head_waits_for_the_holder_then_finishes(tmp_path: Path, holder):
    from evalrunner_assets.example_repo import build_example_repo

    repo = tmp_path / "repo"
    build_example_repo(repo, ["no-op-wording"])
    sha = lambda ref: git(repo, "rev-parse", ref)  # noqa: E731
    home = tmp_path / "home"
    env = {**os.environ, "EVALRUNNER_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")}
    the_lake = open_lake(str(home / "lake"))
    req = request().model_copy(
        update={"repo": "local/repo", "pr": "local", "base_sha": sha("main"), "head_sha": sha("no-op-wording")}
    )
    plant(the_lake, req, pid=holder.pid, owner="comparison_job run 1234")
    argv = [sys.executable, "-m", "evalrunner_assets.cli", "compare", "--repo", str(repo), "--base", "main"]
    proc = subprocess.Popen(
        argv + ["--head", "no-op-wording", "--cap", "16"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = ""
        deadline = time.monotonic() + 120
        while "waiting:" not in first and time.monotonic() < deadline:
            first = proc.stdout.readline()
            assert first or proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert "being run by comparison_job run 1234 (pid" in first
        time.sleep(2)
        assert proc.poll() is None  # still waiting while the holder lives
        holder.kill()
        holder.wait()
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "verdict" in out.lower() and "Traceback" not in err
    assert read_lease(the_lake, req) is None  # released at the end
