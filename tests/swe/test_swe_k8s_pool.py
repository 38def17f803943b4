"""The Kubernetes warm pool of workspace pods, and SWE runs through it with the task set's
repository environment.

The cluster is the loopback STAND-IN of the Kubernetes API (tests/helpers/k8s_standin.py; the
Kubernetes cluster is mocked, as the test names say): its kubelet runs each container as a
local process and does not enforce read-only mounts, so those are checked on the pod specs the
controller sent. Pods, deliveries, execs, the environment's build Job, pytest runs, patches and
the lake are real."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import anyio
import pytest

from evalrunner_assets.execution.environment import spec_for_file  # noqa: E402
from evalrunner_assets.execution.kubernetes import ROLE_LABEL  # noqa: E402
from evalrunner_assets.execution.kubernetes.workspace_pool import KubernetesWorkspacePool  # noqa: E402
from evalrunner_assets.execution.repo import RepoSource, export_commit  # noqa: E402
from evalrunner_assets.execution.workspace_pool import WorkspaceQueueTimeout  # noqa: E402
from evalrunner_assets.swe import RunSpec, SweStore  # noqa: E402
from evalrunner_assets.swe.example import build_tinystats_repo  # noqa: E402
from evalrunner_assets.swe.runner import (  # noqa: E402
    environment_digest,
    execute_run,
    local_context,
    register_task_set,
    run_gold_check,
)
from evalrunner_assets.swe.sandboxes import open_tool_sandbox  # noqa: E402
from lake import open_lake  # noqa: E402
from tests.helpers.swe_example_subset import write_subset_task_set  # noqa: E402

SUBSET = ("mean-divisor", "median-even")


@pytest.fixture(scope="module")
def tinystats(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("tinystats")
    build_tinystats_repo(root / "repo")
    return root / "repo", write_subset_task_set(root / "set", SUBSET)


def _live_workspace_pods(standin) -> set[str]:
    with standin.lock:
        pods = list(standin.pods.values())
    return {p.name for p in pods if p.manifest["metadata"]["labels"].get(ROLE_LABEL) == "workspace"}


class _PodCounter:
    """Samples how many workspace pods exist in the stand-in, to check the pool's bound."""

    def __init__(self, standin) -> None:
        self.standin, self.most = standin, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            self.most = max(self.most, len(_live_workspace_pods(self.standin)))
            time.sleep(0.01)

    def close(self) -> int:
        self.stop.set()
        self.thread.join()
        return self.most


def test_workspace_pod_pool_reuses_prepared_pods_within_its_bound_and_reports_queue_age_standin_api(
    standin, standin_backend, tinystats, tmp_path
):
    repo, _ = tinystats
    source = RepoSource("example/tinystats", str(repo))
    export = export_commit(source, source.resolve_ref("main"), tmp_path / "exports")
    pool = KubernetesWorkspacePool(standin_backend, max_ready=2, max_leased=1)
    counter = _PodCounter(standin)
    try:
        # Preparing stops at the bound.
        assert pool.prepare(export, "env-a", 3) == 2
        prepared = _live_workspace_pods(standin)
        assert len(prepared) == 2 and pool.stats()["ready"] == 2

        async def readme(env) -> str:
            result = await env.exec(["cat", "README.md"])
            assert result.success, result.stderr
            return result.stdout

        # A lease takes a prepared pod (its replacement is started meanwhile).
        with open_tool_sandbox(standin_backend, pool, export, "env-a") as sandbox:
            assert sandbox.sandbox_id in prepared
            assert "tinystats" in anyio.run(readme, sandbox.env)
            held = sandbox.sandbox_id
            # One lease at a time (max_leased=1): a second waits in the queue, and its age is reported.
            got: dict[str, object] = {}

            def second() -> None:
                with pool.lease(export, "env-a") as leased:
                    got["pod"], got["warm"], got["waited"] = (
                        leased.workspace.pod_name,
                        leased.warm,
                        leased.waited_s,
                    )

            waiter = threading.Thread(target=second)
            waiter.start()
            deadline = time.monotonic() + 30
            while pool.stats()["waiting"] == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.5)
            stats = pool.stats()
            assert stats["waiting"] == 1 and stats["leased"] == 1 and stats["queue_age_s"] >= 0.4, stats
            with pytest.raises(WorkspaceQueueTimeout, match="within 0 s"):
                with pool.lease(export, "env-a", timeout=0.2):
                    pass
        waiter.join(timeout=60)
        assert got["warm"] is True and got["pod"] in prepared and got["pod"] != held
        assert float(got["waited"]) >= 0.4 and pool.stats()["max_wait_s"] >= 0.4
        # Leased pods are deleted on release, never returned.
        assert {held, got["pod"]} <= set(standin.deleted)
        # The replacements started when the leases took their pods: one is ready now.
        deadline = time.monotonic() + 60
        while pool.stats()["preparing"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool.stats()["ready"] >= 1
        # Another environment digest is another key: a cold start.
        with pool.lease(export, "env-b") as leased:
            assert leased.warm is False
        # A ready pod that died meanwhile is deleted instead of leased.
        while pool.stats()["preparing"] and time.monotonic() < deadline:
            time.sleep(0.05)
        ready_a = [r.workspace.pod_name for key, r in pool._order if key[0] == "env-a"]
        assert ready_a
        for name in ready_a:
            standin.evict(name)
        with pool.lease(export, "env-a") as leased:
            assert leased.warm is False and leased.workspace.pod_name not in ready_a
        stats = pool.stats()
        assert stats["discarded"] == len(ready_a)
        assert stats["warm_hits"] == 2 and stats["cold_starts"] == 2, stats
    finally:
        pool.close()
        most = counter.close()
    # The bound held throughout: ready (and preparing) plus leased pods.
    assert 2 <= most <= pool.max_ready + pool.max_leased
    # Close deleted every pod the pool made; none is left.
    made = {p["metadata"]["name"] for p in standin.created if p["metadata"]["labels"].get(ROLE_LABEL) == "workspace"}
    assert made <= set(standin.deleted)
    assert not _live_workspace_pods(standin)
    assert pool.stats()["ready"] == 0


@pytest.mark.slow  # a whole SWE run end to end on the pod pool
def test_swe_run_on_the_pod_pool_mounts_the_environment_claim_read_only_in_every_pod_standin_api(
    standin, standin_backend, tinystats, tmp_path
):
    repo, spec_file = tinystats
    store = SweStore(open_lake(str(tmp_path / "lake")))
    ctx = local_context(store, standin_backend, tmp_path / "home")  # what the assets and the CLI use
    assert isinstance(ctx.pool, KubernetesWorkspacePool)
    counter = _PodCounter(standin)
    try:
        ts, _ = register_task_set(ctx, spec_file, str(repo))
        out = execute_run(ctx, RunSpec(agent_version="better", task_set=ts.name, budget_usd=5.0), workers=2)
        assert out.status == "done" and out.statuses == {"passed": len(SUBSET)}, out.to_dict()
        gold = run_gold_check(ctx, ts.name)
        assert {t: v["status"] for t, v in gold["tasks"].items()} == dict.fromkeys(SUBSET, "ok"), gold
        stats = ctx.pool.stats()
    finally:
        ctx.close()
        most = counter.close()

    # The digest every row records is the declared environment's on the Kubernetes runtime.
    env_spec = spec_for_file(ctx.export(ts, ts.tasks[0]), "requirements.txt")
    rows = store.attempts()
    assert {r["env_digest"] for r in rows} == {environment_digest(standin_backend, env_spec)}
    assert environment_digest(standin_backend, env_spec) != environment_digest(standin_backend)
    # Attempts, graders and gold runs leased pods of one key (commit, environment): after the
    # first, the pool had one prepared for most leases.
    leases = len(SUBSET) * 2 + len(SUBSET) * gold["runs"]
    assert stats["warm_hits"] + stats["cold_starts"] == leases
    assert stats["warm_hits"] >= leases // 2, stats
    assert most <= ctx.pool.max_ready + ctx.pool.max_leased
    # Every workspace pod (leased or prepared) mounts the environment's claim read-only.
    pods = [p for p in standin.created if p["metadata"]["labels"].get(ROLE_LABEL) == "workspace"]
    leased = {r["sandbox_id"] for r in rows} | {
        store.trajectory("better", r["task_id"], 0)["grade"]["sandbox_id"] for r in rows
    }
    assert leased <= {p["metadata"]["name"] for p in pods}
    for pod in pods:
        claim = {"claimName": f"evalrunner-env-{env_spec.digest}", "readOnly": True}
        assert {"name": "env", "persistentVolumeClaim": claim} in pod["spec"]["volumes"]
        sandbox = next(c for c in pod["spec"]["containers"] if c["name"] == "sandbox")
        assert [m for m in sandbox["volumeMounts"] if m["name"] == "env"] == [
            {"name": "env", "mountPath": f"/envs/{env_spec.digest}", "subPath": env_spec.digest, "readOnly": True}
        ]
    # Closed: every pod deleted.
    assert {p["metadata"]["name"] for p in pods} <= set(standin.deleted)
    assert not _live_workspace_pods(standin)
