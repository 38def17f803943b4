"""The code location served by a real `dagster-webserver` on loopback: its GraphQL API shows the
pipeline as one lineage graph (eval_manifest → task_samples → comparison → pr_report), the
design card's nouns beside it (sample_scores, trajectories, baselines), with the data-quality
checks on task_samples."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

STARTUP_SECONDS = 120

ASSET_GRAPH_QUERY = """
query AssetGraph {
  assetNodes {
    assetKey { path }
    groupName
    description
    kinds
    owners { ... on TeamAssetOwner { team } ... on UserAssetOwner { email } }
    tags { key value }
    dependencyKeys { path }
    dependedByKeys { path }
    partitionDefinition { type }
    assetChecksOrError {
      __typename
      ... on AssetChecks { checks { name } }
    }
  }
}
"""

SENSORS_QUERY = """
query Sensors {
  repositoriesOrError {
    ... on RepositoryConnection {
      nodes { name sensors { name targets { pipelineName } } }
    }
  }
}
"""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def graphql(base: str, query: str) -> dict[str, Any]:
    req = urllib.request.Request(
        f"{base}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        body = json.loads(resp.read())
    assert "errors" not in body, body.get("errors")
    return body["data"]


@pytest.fixture(scope="module")
def webserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("webserver")
    (root / "dagster").mkdir()
    (root / "dagster" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(root / "dagster"), "EVALRUNNER_HOME": str(root / "home")}
    exe = Path(sys.executable).with_name("dagster-webserver")
    log = (root / "webserver.log").open("wb")
    proc = subprocess.Popen(
        [str(exe), "-m", "evalrunner_assets.definitions", "-h", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"dagster-webserver exited {proc.returncode}:\n{(root / 'webserver.log').read_text()[-3000:]}"
                )
            try:
                info = get(f"{base}/server_info")
                if info.get("dagster_webserver_version"):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"dagster-webserver did not answer /server_info within {STARTUP_SECONDS}s:\n"
                    f"{(root / 'webserver.log').read_text()[-3000:]}"
                )
            time.sleep(0.5)
        yield base
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        log.close()


@pytest.fixture(scope="module")
def asset_nodes(webserver: str) -> dict[str, dict[str, Any]]:
    # The code location loads in its own process after the server answers; wait for it.
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        nodes = graphql(webserver, ASSET_GRAPH_QUERY)["assetNodes"]
        if nodes or time.monotonic() > deadline:
            return {"/".join(n["assetKey"]["path"]): n for n in nodes}
        time.sleep(1)


def keys(refs: list[dict[str, Any]]) -> set[str]:
    return {"/".join(r["path"]) for r in refs}


def test_webserver_serves_the_pipeline_as_one_lineage_chain(asset_nodes: dict[str, dict[str, Any]]) -> None:
    chain = ["eval_manifest", "task_samples", "comparison", "pr_report"]
    assert set(chain) <= asset_nodes.keys()
    for upstream, downstream in zip(chain, chain[1:]):
        assert upstream in keys(asset_nodes[downstream]["dependencyKeys"]), (upstream, downstream)
        assert downstream in keys(asset_nodes[upstream]["dependedByKeys"]), (upstream, downstream)
    assert keys(asset_nodes["eval_manifest"]["dependencyKeys"]) == set()
    assert keys(asset_nodes["pr_report"]["dependedByKeys"]) == set()
    assert {asset_nodes[a]["groupName"] for a in chain} == {"evals"}
    assert all(asset_nodes[a]["partitionDefinition"] is not None for a in chain)
    assert asset_nodes["task_samples"]["partitionDefinition"]["type"] == "MULTIPARTITIONED"


def test_webserver_shows_the_card_nouns_with_their_owners_kinds_and_descriptions(
    asset_nodes: dict[str, dict[str, Any]],
) -> None:
    upstream = {
        "sample_scores": {"task_samples"},
        "trajectories": {"task_samples"},
        "baselines": {"task_samples"},
        "comparison": {"task_samples", "baselines"},
    }
    for noun, parents in upstream.items():
        assert keys(asset_nodes[noun]["dependencyKeys"]) == parents, noun
    for name, node in asset_nodes.items():
        assert node["description"] and node["kinds"], name
        assert node["owners"] == [{"team": "evals"}], name
        assert any(t["key"] == "evalrunner/noun" for t in node["tags"]), name
    for noun in ("sample_scores", "trajectories"):
        assert asset_nodes[noun]["partitionDefinition"]["type"] == "MULTIPARTITIONED"


def test_webserver_lists_the_checks_on_task_samples(asset_nodes: dict[str, dict[str, Any]]) -> None:
    checks = asset_nodes["task_samples"]["assetChecksOrError"]
    assert checks["__typename"] == "AssetChecks", checks
    assert {c["name"] for c in checks["checks"]} >= {"reproducibility_fields_present", "no_error_logs"}


def test_webserver_lists_the_sensors_and_their_jobs(webserver: str) -> None:
    repos = graphql(webserver, SENSORS_QUERY)["repositoriesOrError"]["nodes"]
    sensors = {s["name"]: {t["pipelineName"] for t in s["targets"]} for r in repos for s in r["sensors"]}
    assert sensors["sampling_sensor"] == {"comparison_job"}
    assert "pr_sensor" in sensors
