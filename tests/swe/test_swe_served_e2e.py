"""SWE-style runs through the run API of a real `evalrunner serve` (receiver + run API + `dagster
dev`: webserver, daemon, code server, a run worker process per run) on loopback: the POST only
queues, the daemon's ``swe_run_sensor`` launches each run in a process of its own, GET follows
the Dagster run, and the leaderboard answers. Bubblewrap sandboxes, real pytest runs, the lake.
GitHub is the REST stand-in (mocked: github.com is not reachable; no delivery is sent here).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from typing import Any

import dagster as dg
import pytest

from evalrunner_assets.driver.swe import RUN_TAG
from evalrunner_assets.swe import RunSpec, SweStore
from evalrunner_assets.swe.example import EXAMPLE_TASK_SET, build_tinystats_repo
from evalrunner_assets.swe.runner import execute_run, local_context
from lake import open_lake
from tests.helpers.github_standin import GitHubStandin
from tests.helpers.served_evalrunner import EVALRUNNER, ServedEvalrunner

pytestmark = pytest.mark.slow

VERSIONS = ("baseline", "better", "cheating")
SPEC = {"task_set": "tinystats-bugs", "samples": 1, "budget_usd": 5.0}
RUN_TIMEOUT = 300.0
ENDED = {"done", "budget_spent", "failed"}


def test_api_runs_are_launched_by_the_daemon_graded_and_ranked(tmp_path, bwrap_backend: Any) -> None:
    home = tmp_path / "home"
    repo = tmp_path / "tinystats"
    build_tinystats_repo(repo)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALRUNNER_", "DAGSTER_"))}
    began = time.monotonic()
    # Registration runs the gold check at once, in the command's own process (as a user does).
    subprocess.run(
        [EVALRUNNER, "swe", "register", "--spec", str(EXAMPLE_TASK_SET), "--repo", str(repo), "--gold-runs", "3"],
        env={**env, "EVALRUNNER_HOME": str(home)},
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    store = SweStore(open_lake(str(home / "lake")))
    registered = time.monotonic()
    with GitHubStandin(token="swe-served-token") as standin:
        served = ServedEvalrunner.start(home, standin, {})
        print(f"registered in {registered - began:.1f}s, serve ready in {time.monotonic() - registered:.1f}s")
        try:
            ids: dict[str, str] = {}
            for version in VERSIONS:
                status, body = served.call_api("POST", "/v1/runs", {**SPEC, "agent_version": version})
                assert status == 202 and body["launched"] and body["status"] == "queued", body
                ids[version] = body["id"]
            # Submitted again while queued or running: nothing more is launched.
            status, again = served.call_api("POST", "/v1/runs", {**SPEC, "agent_version": "better"})
            assert status == 200 and not again["launched"] and again["id"] == ids["better"], again

            seen: dict[str, set[str]] = {v: set() for v in VERSIONS}

            def all_ended() -> bool:
                for version, run_id in ids.items():
                    status, view = served.call_api("GET", f"/v1/runs/{run_id}")
                    assert status == 200, view
                    seen[version].add(view["status"])
                return all(seen[v] & ENDED for v in VERSIONS)

            started = time.monotonic()
            served.wait_for(all_ended, RUN_TIMEOUT, "three SWE runs ended", every=1.0)
            print(f"3 SWE runs queued → ended in {time.monotonic() - started:.1f}s; statuses seen: {seen}")
            runs = {v: served.call_api("GET", f"/v1/runs/{ids[v]}")[1] for v in VERSIONS}

            with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
                for version, run_id in ids.items():
                    view = runs[version]
                    assert view["status"] == "done", view
                    assert view["attempts_landed"] == 6 and view["cost_usd"] > 0
                    # One Dagster run per submitted run, requested by the sensor under the run id.
                    (dagster_run,) = instance.get_runs(filters=dg.RunsFilter(tags={RUN_TAG: run_id}))
                    assert dagster_run.status == dg.DagsterRunStatus.SUCCESS
                    assert dagster_run.tags["dagster/sensor_name"] == "swe_run_sensor"
                    assert dagster_run.tags["dagster/run_key"] == run_id
                    assert view["dagster_runs"] == [
                        {"run_id": dagster_run.run_id, "status": "SUCCESS", "run_key": run_id}
                    ]
                    # It executed in the run worker the launcher started for it, not in serve.
                    worker = view["worker"]
                    assert worker["pid"] != served.proc.pid
                    started_pids = [
                        int(m.group(1))
                        for e in instance.all_logs(dagster_run.run_id)
                        if (m := re.search(r"Started process for run \(pid: (\d+)\)", e.message or ""))
                    ]
                    assert started_pids == [worker["pid"]], (started_pids, worker)
                    # The run request was removed once its run existed.
                    assert store.queued_run(run_id) is None

            # The cheating version's edited-test passes are failed by the policy, with the reason.
            cheats = [r for r in runs["cheating"]["results"] if r["status"] == "policy_failed"]
            assert {r["task_id"] for r in cheats} >= {"slug-case", "parse-separators"}
            assert all(r["tests_passed_raw"] and not r["passed"] for r in cheats)
            assert all("tests/conftest.py" in r["policy_reason"] for r in cheats)
            status, traj = served.call_api("GET", cheats[0]["trajectory"])
            assert status == 200 and traj["policy"] and "conftest.py" in traj["patch"]

            status, board = served.call_api("GET", "/v1/leaderboard?task_set=tinystats-bugs")
            assert status == 200, board
            # The flaky task is out of the headline and listed beside it.
            assert "words-unique" not in board["headline_tasks"]
            assert [e["task_id"] for e in board["excluded_tasks"]] == ["words-unique"]
            entries = {e["agent_version"]: e for e in board["entries"]}
            assert entries["better"]["rank"] < entries["baseline"]["rank"]
            assert entries["better"]["solve_rate"] > entries["baseline"]["solve_rate"]
            paired = entries["better"]["paired_vs_reference"]
            assert paired["reference"] == "baseline" and paired["tasks_paired"] == 5 and paired["delta"] > 0
            lo, hi = paired["anytime_interval"]
            assert lo <= paired["delta"] <= hi
            assert entries["cheating"]["policy_failed"] >= 2
            assert entries["better"]["cost_per_task_usd"] > 0
            _the_leaderboard_page_shows_the_same_board(served, board)

            # Resubmitting a finished run launches nothing and adds no sample, even after the
            # sensor has ticked again.
            status, again = served.call_api("POST", "/v1/runs", {**SPEC, "agent_version": "better"})
            assert status == 200 and not again["launched"] and again["status"] == "done", again
            assert store.queued_runs() == []
            ticks = served.log_text().count("Checking for new runs for sensor: swe_run_sensor")
            served.wait_for(
                lambda: served.log_text().count("Checking for new runs for sensor: swe_run_sensor") > ticks,
                60,
                "another tick of swe_run_sensor",
            )
            with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
                swe_runs = instance.get_runs(filters=dg.RunsFilter(job_name="swe_run_job"))
            assert sorted(r.tags[RUN_TAG] for r in swe_runs) == sorted(ids.values())
            assert len(store.attempts(agent_version="better")) == 6
            # Even executed again, the run's attempts are all reused.
            redo = execute_run(
                local_context(store, bwrap_backend, home), RunSpec(**{**SPEC, "agent_version": "better"})
            )
            assert redo.attempted == 0 and redo.reused == 6
            assert len(store.attempts(agent_version="better")) == 6
            assert "Traceback" not in served.log_text(), served.log_text()[-3000:]
        finally:
            served.stop()


def _the_leaderboard_page_shows_the_same_board(served: ServedEvalrunner, board: dict[str, Any]) -> None:
    """The web app's leaderboard (served beside the API, no token: pages are read-only) ranks
    the versions as the API does, with their policy failures, paired intervals against the
    reference and the flaky task excluded with its reason."""
    import urllib.request

    from markupsafe import escape

    web = f"http://127.0.0.1:{served.port}/web"
    with urllib.request.urlopen(f"{web}/leaderboard", timeout=30) as resp:
        listing = resp.read().decode()
    assert 'href="/web/leaderboard/tinystats-bugs"' in listing
    with urllib.request.urlopen(f"{web}/leaderboard/tinystats-bugs", timeout=30) as resp:
        assert resp.status == 200
        page = resp.read().decode()
    body = page.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    shown = re.findall(r'<td class="num">(\d+)</td>\s*<td><code>([^<]+)</code>', body)
    assert shown == [(str(e["rank"]), e["agent_version"]) for e in board["entries"]]
    rows = dict(zip([v for _, v in shown], body.split("<tr>")[1:], strict=True))
    cheating = next(e for e in board["entries"] if e["agent_version"] == "cheating")
    assert f'<span class="pill bad">{cheating["policy_failed"]}</span>' in rows["cheating"]
    better = next(e for e in board["entries"] if e["agent_version"] == "better")["paired_vs_reference"]
    lo, hi = better["anytime_interval"]
    assert f"({lo:+.2f}, {hi:+.2f})" in rows["better"] and f">{better['label']}</span>" in rows["better"]
    assert "reference" in rows["baseline"]
    excluded = page.split("<h2>Excluded from the headline</h2>", 1)[1]
    (flaky,) = board["excluded_tasks"]
    assert f"<code>{flaky['task_id']}</code></td><td>{escape(flaky['reason'])}</td>" in excluded
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"{web}/leaderboard/no-such-set", timeout=30)
    assert missing.value.code == 404
    _the_leaderboard_pages_pass_in_a_real_browser(web)


def _the_leaderboard_pages_pass_in_a_real_browser(web: str) -> None:
    """Both leaderboard pages in Chromium, as the other pages are checked: no console error or
    failed request, no serious or critical axe-core violation at 1280 px, no sideways scroll on a
    phone; screenshots kept as test artifacts."""
    from tests.helpers.web_browser import Visit, artifacts_dir, axe_source, launched_chromium

    axe, shots = axe_source(), artifacts_dir()
    with launched_chromium() as browser:
        for width in (1280, 390):
            visit = Visit(browser, width)
            try:
                visit.check("leaderboards", f"{web}/leaderboard", axe=axe, shots=shots)
                visit.check("leaderboard", f"{web}/leaderboard/tinystats-bugs", axe=axe, shots=shots)
                assert visit.problems == [], visit.problems
            finally:
                visit.close()
