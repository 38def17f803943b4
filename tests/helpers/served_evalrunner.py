"""`evalrunner serve` as a user runs it — the webhook receiver beside `dagster dev` (webserver,
daemon, code server, a run worker process per run) — on loopback, fed GitHub deliveries signed
as GitHub signs them, with GitHub itself the REST stand-in of ``github_standin`` (github.com is
not reachable here). Nothing calls a sensor by hand: the daemon ticks them and launches their runs.

Used by ``tests/sensors/test_daemon_e2e.py``, ``tests/swe/test_swe_served_e2e.py`` and ``bench/daemon_vs_cli.py``.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lake import Lake
from resources import RepoResource
from tests.helpers.github_standin import GitHubStandin, free_port
from tests.helpers.shared_files import shared_path
from tests.helpers.webhook_delivery import post_delivery, retarget

EVALRUNNER = str(Path(sys.executable).with_name("evalrunner"))
FIXTURES = shared_path("fixtures/github-webhooks")
SECRET = b"served-evalrunner-webhook-secret"
TOKEN = "served-evalrunner-github-token"
API_TOKEN = "served-evalrunner-api-token"  # bearer token of the SWE run API (/v1/...)
# The sensor daemon logs this on every tick once the code location is loaded.
SENSOR_TICKING = "Checking for new runs for sensor: pr_sensor"


# -- deliveries built from GitHub's own payload examples -----------------------------------------
def pull_request_delivery(action: str, *, repo: str, pr: int, head: str, base: str, head_ref: str) -> dict[str, Any]:
    """GitHub's ``pull_request.<action>`` example, for PR ``pr`` of ``repo`` at these SHAs."""
    raw = (FIXTURES / f"pull_request.{action}.json").read_text()
    old = json.loads(raw)
    raw = raw.replace(old["pull_request"]["head"]["sha"], head).replace(old["pull_request"]["base"]["sha"], base)
    payload = retarget(json.loads(raw), repo)
    payload["number"] = pr
    payload["pull_request"]["number"] = pr
    payload["pull_request"]["head"]["ref"], payload["pull_request"]["base"]["ref"] = head_ref, "main"
    return payload


def comment_delivery(body: str, *, repo: str, pr: int, association: str = "MEMBER") -> dict[str, Any]:
    """GitHub's ``issue_comment.created`` example as a comment on PR ``pr``."""
    payload = retarget(json.loads((FIXTURES / "issue_comment.created.json").read_text()), repo)
    payload["issue"]["number"] = pr
    payload["issue"]["pull_request"] = {"url": f"https://api.github.com/repos/{repo}/pulls/{pr}"}
    payload["comment"]["body"] = body
    payload["comment"]["author_association"] = association
    return payload


def changed_files(repo: Path, base: str, head: str) -> list[str]:
    out = subprocess.run(
        ["git", "diff", "--name-only", base, head], cwd=repo, check=True, capture_output=True, text=True
    ).stdout
    return out.split()


# -- the served process tree ---------------------------------------------------------------------
@dataclass
class ServedEvalrunner:
    """One ``evalrunner serve`` with its own home, reporting to ``standin``."""

    home: Path
    port: int
    dagster_port: int
    proc: subprocess.Popen
    log: Path
    standin: GitHubStandin

    @classmethod
    def start(
        cls, home: Path, standin: GitHubStandin, repos: dict[str, Path], *, ready_timeout: float = 300.0
    ) -> ServedEvalrunner:
        """Register where each repository is fetched from (``evalrunner repos add``'s record),
        start ``evalrunner serve`` and wait until its receiver answers and its sensors tick."""
        home.mkdir(parents=True, exist_ok=True)
        lake = Lake(str(home / "lake"))
        for name, path in repos.items():
            RepoResource(cache_dir=str(home / "repos")).register(lake, name, str(path))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALRUNNER_", "DAGSTER_"))}
        env.update(
            EVALRUNNER_HOME=str(home),
            EVALRUNNER_WEBHOOK_SECRET=SECRET.decode(),
            EVALRUNNER_WEBHOOK_REPOS=",".join(repos),
            EVALRUNNER_GITHUB_API_URL=standin.base_url,
            EVALRUNNER_GITHUB_TOKEN=standin.token or "",
            EVALRUNNER_API_TOKEN=API_TOKEN,
            PYTHONUNBUFFERED="1",
            PATH=f"{Path(EVALRUNNER).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        )
        port, dagster_port = free_port(), free_port()
        log = home / "serve.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [EVALRUNNER, "serve", "--port", str(port), "--dagster-port", str(dagster_port)]
                + ["--inspect-view-port", "0"],  # no viewer: these tests read no raw log in one
                env=env,
                # Not the home itself: its `lake/` directory would shadow the `lake` package for
                # the code server, which puts its working directory on the import path.
                cwd=home.parent,
                stdout=out,
                stderr=out,
                start_new_session=True,  # its whole process tree can be stopped at once
            )
        served = cls(home, port, dagster_port, proc, log, standin)
        try:
            served.wait_for(served.ready, ready_timeout, "ready")
        except BaseException:
            served.stop()
            raise
        return served

    def ready(self) -> bool:
        log = self.log_text()
        if "Error loading repository location" in log:
            raise AssertionError(f"the code location did not load:\n{log[-3000:]}")
        return SENSOR_TICKING in log and self.healthy()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def healthy(self) -> bool:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            conn.request("GET", "/healthz")
            return conn.getresponse().status == 200
        except OSError:
            return False

    def wait_for(self, condition: Callable[[], Any], timeout: float, what: str, every: float = 0.2) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if self.proc.poll() is not None:
                raise AssertionError(f"evalrunner serve exited {self.proc.returncode}: {self.log_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"not {what} after {timeout:.0f}s; serve log:\n{self.log_text()[-3000:]}")
            time.sleep(every)

    def deliver(self, event: str, payload: dict[str, Any], delivery: str | None = None) -> tuple[int, dict]:
        """POST a delivery signed as GitHub signs it; returns (status, answer)."""
        body = json.dumps(payload).encode()
        return post_delivery(
            self.port, SECRET, event, body, delivery, user_agent="GitHub-Hookshot/served-evalrunner", timeout=30
        )

    def call_api(self, method: str, path: str, body: Any = None, token: str | None = API_TOKEN) -> tuple[int, Any]:
        """One request to the run API on the receiver's port; (status, JSON answer)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read())
        finally:
            conn.close()

    def completed_check_run(self, repo: str, sha: str) -> dict[str, Any] | None:
        """The head's check run once completed (None while there is none, or it is not)."""
        runs = self.standin.check_runs_for(repo, sha)
        done = [r for r in runs if r["status"] == "completed"]
        return done[-1] if done else None

    def runs_for(self, comparison_key: str) -> list[Any]:
        """The Dagster runs of one comparison, as the instance records them."""
        import dagster as dg

        with dg.DagsterInstance.from_config(str(self.home / "dagster")) as instance:
            return list(instance.get_runs(filters=dg.RunsFilter(tags={"evalrunner/comparison": comparison_key})))

    def all_runs(self) -> list[Any]:
        import dagster as dg

        with dg.DagsterInstance.from_config(str(self.home / "dagster")) as instance:
            return list(instance.get_runs())

    def stop(self) -> None:
        """SIGTERM, as a service manager stops it (``dagster dev`` is stopped by serve itself);
        whatever is left of the process tree after that is killed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.proc.poll() is None:
            self.proc.wait(timeout=10)
