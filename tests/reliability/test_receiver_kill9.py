"""A receiver killed with kill -9 mid-write leaves a temp file in the inbox; the PR sensor's next
tick removes it (its writer's pid, carried in the name, is dead) and the delivery is evaluated
once GitHub redelivers it."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import dagster as dg
import pytest

from evalrunner_assets.github.inbox import INBOX_SOURCE
from lake.layout import LAYOUT
from resources import GitHubResource, LakeResource, RepoResource
from sensors.pr import pr_sensor
from tests.helpers.github_standin import free_port

from ._deliveries import SECRET, post, pull_request

pytestmark = pytest.mark.reliability

# The real receiver, with fsync stalled after the temp file's bytes are written: the moment
# between writing a delivery's temp file and renaming it, held open so the kill lands there.
RECEIVER = """
import os, signal, sys
from lake.storage import Lake
from evalrunner_assets.http.webhook import serve
_fsync = os.fsync
def stalled(fd):
    _fsync(fd)
    signal.pause()
os.fsync = stalled
serve("127.0.0.1", int(sys.argv[2]), lake=Lake(sys.argv[1]), secret=sys.argv[3], log_level="warning")
"""


def _wait_for(predicate, what: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _healthy(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/healthz")
        return conn.getresponse().status == 200
    except OSError:
        return False


def test_temp_file_of_a_receiver_killed_mid_write_is_swept_by_the_pr_sensor(tmp_path: Path, monkeypatch):
    for name in ("EVALRUNNER_GITHUB_TOKEN", "EVALRUNNER_GITHUB_TOKEN_FILE", "EVALRUNNER_GITHUB_APP_ID"):
        monkeypatch.delenv(name, raising=False)
    lake_root = tmp_path / "lake"
    claims = lake_root / LAYOUT.inbox_prefix(INBOX_SOURCE)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", RECEIVER, str(lake_root), str(port), SECRET.decode()],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_for(lambda: _healthy(port) or proc.poll() is not None, "the receiver to start")
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        body = json.dumps(pull_request(number=11, head_sha="4" * 40, base_sha="5" * 40)).encode()
        answers: list = []
        sender = threading.Thread(target=lambda: answers.append(_post_quietly(port, body)), daemon=True)
        sender.start()
        temp = _wait_for(
            lambda: [p for p in claims.glob(".*.tmp-*")] if claims.exists() else [], "the receiver's temp file"
        )
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        sender.join(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    (leftover,) = temp
    assert f".tmp-{proc.pid}-" in leftover.name and leftover.exists()
    assert answers == [None]  # the connection died with the receiver: GitHub will redeliver

    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        resources = {
            "lake": LakeResource(root=str(lake_root)),
            "github": GitHubResource(),
            "repos": RepoResource(cache_dir=str(tmp_path / "c"), export_dir=str(tmp_path / "e")),
        }
        result = pr_sensor(dg.build_sensor_context(instance=instance, resources=resources))
        assert not leftover.exists()
        assert not result.run_requests  # nothing was queued by the killed write
        assert not [p for p in (lake_root / "inbox").rglob("*") if ".tmp-" in p.name]


def _post_quietly(port: int, body: bytes):
    try:
        return post(port, body, "pull_request")
    except (OSError, http.client.HTTPException):
        return None
