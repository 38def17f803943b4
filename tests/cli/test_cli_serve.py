"""`evalrunner serve --webhook-only` as a real subprocess on loopback: health, deliveries, SIGTERM."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from evalrunner_assets.github.inbox import read_inbox
from evalrunner_assets.http.webhook import sign
from lake.storage import Lake
from tests.helpers.github_standin import free_port
from tests.helpers.shared_files import shared_path

EVALRUNNER = str(Path(sys.executable).with_name("evalrunner"))
FIXTURES = shared_path("fixtures/github-webhooks")
SECRET = "serve-test-secret"
START_TIMEOUT = 60


@dataclass
class Served:
    proc: subprocess.Popen
    port: int
    home: Path
    stderr: Path


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALRUNNER_", "DAGSTER_"))}
    env.update(EVALRUNNER_HOME=str(home), PYTHONUNBUFFERED="1", **extra)
    return env


def _start(tmp_path: Path, *args: str, cwd: Path | None = None, **env: str) -> Served:
    home, port = tmp_path / "home", free_port()
    stderr = tmp_path / "serve.stderr"
    proc = subprocess.Popen(
        [EVALRUNNER, "serve", "--webhook-only", "--host", "127.0.0.1", "--port", str(port), *args],
        env=_env(home, **env),
        cwd=cwd or tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=stderr.open("wb"),
    )
    served = Served(proc, port, home, stderr)
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"evalrunner serve exited {proc.returncode}: {stderr.read_text()[-2000:]}")
        try:
            if _get(served, "/healthz")[0] == 200:
                return served
        except OSError:
            pass
        if time.monotonic() > deadline:
            _stop(served)
            raise AssertionError(f"evalrunner serve did not answer /healthz in {START_TIMEOUT}s")
        time.sleep(0.1)


def _stop(served: Served) -> None:
    if served.proc.poll() is None:
        served.proc.kill()
        served.proc.wait(timeout=10)


@pytest.fixture
def serving(tmp_path) -> Iterator[Callable[..., Served]]:
    started: list[Served] = []

    def start(*args: str, cwd: Path | None = None, **env: str) -> Served:
        served = _start(tmp_path, *args, cwd=cwd, **env)
        started.append(served)
        return served

    yield start
    for served in started:
        _stop(served)


def _get(served: Served, path: str) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=5)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def _post(served: Served, body: bytes, event: str, delivery: str, signature: str | None = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json", "X-GitHub-Event": event, "X-GitHub-Delivery": delivery}
    if signature is not None:
        headers["X-Hub-Signature-256"] = signature
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
    try:
        conn.request("POST", "/webhooks/github", body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def _pull_request_body() -> bytes:
    return (FIXTURES / "pull_request.opened.json").read_bytes()


def _queued_ids(lake_root: Path) -> list[str]:
    entries, _ = read_inbox(Lake(str(lake_root)))
    return [e.delivery_id for e in entries]


@pytest.mark.slow
def test_serve_answers_healthz(serving):
    served = serving("--insecure")
    assert _get(served, "/healthz") == (200, {"status": "ok"})


@pytest.mark.slow
def test_insecure_serve_queues_an_unsigned_delivery_into_the_configured_lake(serving, tmp_path):
    lake_root = tmp_path / "lake"
    served = serving("--insecure", EVALRUNNER_LAKE=str(lake_root))
    delivery = str(uuid.uuid4())
    status, answer = _post(served, _pull_request_body(), "pull_request", delivery)
    assert (status, answer["status"], answer["kind"]) == (202, "queued", "pull_request")
    assert _queued_ids(lake_root) == [delivery]
    status, answer = _post(served, _pull_request_body(), "pull_request", delivery)
    assert (status, answer["status"]) == (200, "duplicate")
    assert _queued_ids(lake_root) == [delivery]


@pytest.mark.slow
def test_serve_with_a_secret_rejects_unsigned_deliveries_and_queues_signed_ones(serving, tmp_path):
    lake_root = tmp_path / "lake"
    served = serving(EVALRUNNER_LAKE=str(lake_root), EVALRUNNER_WEBHOOK_SECRET=SECRET)
    body = _pull_request_body()
    assert _post(served, body, "pull_request", str(uuid.uuid4()))[0] == 401
    assert _post(served, body, "pull_request", str(uuid.uuid4()), signature=sign(b"wrong", body))[0] == 401
    assert _queued_ids(lake_root) == []
    delivery = str(uuid.uuid4())
    status, answer = _post(served, body, "pull_request", delivery, signature=sign(SECRET.encode(), body))
    assert (status, answer["status"]) == (202, "queued")
    assert _queued_ids(lake_root) == [delivery]
    assert SECRET not in served.stderr.read_text()


@pytest.mark.slow
def test_serve_queues_deliveries_where_the_sensors_read_them_under_evalrunner_home(serving, tmp_path):
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    served = serving("--insecure", cwd=elsewhere)
    delivery = str(uuid.uuid4())
    assert _post(served, _pull_request_body(), "pull_request", delivery)[0] == 202
    assert _queued_ids(served.home / "lake") == [delivery]


@pytest.mark.slow
def test_serve_stops_gracefully_on_sigterm(serving):
    served = serving("--insecure")
    served.proc.send_signal(signal.SIGTERM)
    returncode = served.proc.wait(timeout=15)
    # uvicorn shuts down, then re-raises the signal it caught; the CLI turns that into an exit
    # with status 128 + SIGTERM after its own cleanup (stopping `dagster dev` when it started one).
    assert returncode in (0, 128 + signal.SIGTERM)
    assert "Finished server process" in served.stderr.read_text()
    with pytest.raises(OSError):
        _get(served, "/healthz")


@pytest.mark.slow
def test_serve_without_a_secret_refuses_to_start_unless_insecure(tmp_path):
    proc = subprocess.run(
        [EVALRUNNER, "serve", "--webhook-only", "--port", str(free_port())],
        env=_env(tmp_path / "home"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "EVALRUNNER_WEBHOOK_SECRET" in proc.stderr


@pytest.mark.slow
def test_insecure_serve_refuses_a_non_loopback_host(tmp_path):
    proc = subprocess.run(
        [EVALRUNNER, "serve", "--webhook-only", "--insecure", "--host", "0.0.0.0", "--port", str(free_port())],
        env=_env(tmp_path / "home"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "loopback" in proc.stderr


@pytest.mark.slow
def test_serve_with_dagster_logs_no_telemetry_banner_supersession_or_beta_warnings(tmp_path):
    home, port, dagster_port = tmp_path / "home", free_port(), free_port()
    stderr = tmp_path / "serve.log"  # stdout and stderr: Dagster logs to both
    env = _env(home, EVALRUNNER_WEBHOOK_SECRET=SECRET)
    env["PATH"] = f"{Path(EVALRUNNER).parent}{os.pathsep}{env.get('PATH', '')}"  # `dagster` of this venv
    proc = subprocess.Popen(
        [EVALRUNNER, "serve", "--port", str(port), "--dagster-port", str(dagster_port)],
        env=env,
        cwd=tmp_path,
        stdout=(out := stderr.open("wb")),
        stderr=out,
        start_new_session=True,
    )
    try:
        # The code location is loaded (where beta warnings would be logged) once a sensor ticks.
        deadline = time.monotonic() + 300
        while "Checking for new runs for sensor" not in stderr.read_text(errors="replace"):
            assert proc.poll() is None, stderr.read_text()[-3000:]
            assert time.monotonic() < deadline, f"no sensor tick in 300s: {stderr.read_text()[-3000:]}"
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    log = stderr.read_text(errors="replace")
    for noise in ("Telemetry", "telemetry", "superseded", "dg dev", "BetaWarning", "PreviewWarning"):
        assert noise not in log, f"{noise!r} in the serve log:\n{log[-3000:]}"
    assert "enabled: false" in (home / "dagster" / "dagster.yaml").read_text()


def test_repos_add_records_where_a_repository_is_fetched_from(tmp_path, monkeypatch, make_repo):
    from evalrunner_assets.cli import main
    from resources import RepoResource

    repo_path, _ = make_repo({"README.md": "x"})
    monkeypatch.setenv("EVALRUNNER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("EVALRUNNER_LAKE", raising=False)
    assert main(["repos", "add", "acme/agent", str(repo_path)]) == 0
    assert main(["repos", "add", "acme/other", "https://git.example/acme/other.git"]) == 0
    lake = Lake(str(tmp_path / "home" / "lake"))
    resource = RepoResource(cache_dir=str(tmp_path / "cache"))
    assert resource.source(lake, "acme/agent").source == str(repo_path)
    assert resource.source(lake, "acme/other").source == "https://git.example/acme/other.git"
    # Names GitHub would not send, and a path that is no repository, are refused.
    assert main(["repos", "add", "../x", str(repo_path)]) == 2
    assert main(["repos", "add", "acme/third", str(tmp_path / "missing")]) == 2
