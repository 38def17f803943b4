"""Retention of repository environment claims on Kubernetes, against the STAND-IN Kubernetes API
(tests/helpers/k8s_standin.py; no cluster here, so the cluster is mocked, as the test names say).

- A pod that mounts an environment stamps the claim's last use with a merge patch, at most once
  per interval per digest.
- The sweep (``KubernetesBackend.prune_environments``) deletes only claims unused past the
  retention that no pod mounts and whose build Job does not exist; a dry run deletes nothing; a
  claim stamped after it was listed survives (the delete's resourceVersion precondition).
- The sampling sensor runs the sweep, rate-limited; ``evalrunner envs prune`` prints what it
  deletes and why.
- A pruned environment is built again on its next use, whatever the lake's record says.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import pytest

from evalrunner_assets.execution.kubernetes import (
    ENV_BUILT_ANNOTATION,
    ENV_LAST_USED_ANNOTATION,
    KubernetesBackend,
    KubernetesSandboxConfig,
    build_sandbox_pod,
    env_claim_name,
    env_job_name,
    parse_stamp,
    utc_stamp,
)
from evalrunner_assets.execution.sandbox import RepoExport, SandboxRequest, SandboxStatus
from tests.helpers.k8s_standin import KubernetesStandIn

IMAGE = "registry.example/evalrunner-sandbox@sha256:" + "1" * 64
NS = "evalrunner-sandbox"
DAY = 86400.0


@pytest.fixture
def repo(tmp_path) -> RepoExport:
    root = tmp_path / "export"
    root.mkdir()
    (root / "task.txt").write_text("x\n")
    return RepoExport(repo="acme/agent", commit="c" * 40, path=str(root), tree_digest="t" * 64)


def controller(standin: KubernetesStandIn, tmp_path: Path, **kw) -> KubernetesBackend:
    kubeconfig = standin.write_kubeconfig(tmp_path / "kubeconfig")
    return KubernetesBackend(
        KubernetesSandboxConfig(image=IMAGE, kubeconfig=str(kubeconfig), poll_interval_seconds=0.05, **kw)
    )


def make_claim(backend: KubernetesBackend, digest: str, *, built: bool = True, last_used: float | None = None) -> str:
    """A claim as a build leaves it (the record annotation), created through the API."""
    from evalrunner_assets.execution.kubernetes.env import environment_claim

    claim = environment_claim(SimpleNamespace(digest=digest), backend.config)
    annotations = {}
    if built:
        annotations[ENV_BUILT_ANNOTATION] = json.dumps({"digest": digest, "packages": ["tinydep==1.0"]})
    if last_used is not None:
        annotations[ENV_LAST_USED_ANNOTATION] = utc_stamp(last_used)
    claim["metadata"]["annotations"] = annotations
    backend._core().create_namespaced_persistent_volume_claim(NS, claim)
    return env_claim_name(digest)


def claim_requests(standin: KubernetesStandIn, method: str, digest: str) -> int:
    path = f"/api/v1/namespaces/{NS}/persistentvolumeclaims/{env_claim_name(digest)}"
    return sum(1 for m, p in standin.requests if m == method and p == path)


def window(repo: RepoExport, digest: str) -> SandboxRequest:
    return SandboxRequest(argv=("python", "-c", "print('ok')"), export=repo, python_env=f"/envs/{digest}")


def test_a_pod_that_mounts_an_environment_stamps_its_claim_at_most_once_per_interval_standin_api(
    standin, tmp_path, repo
):
    digest = "ab" * 12
    backend = controller(standin, tmp_path)
    make_claim(backend, digest)
    before = time.time()
    for _ in range(2):
        result = backend.run(window(repo, digest))
        assert result.status is SandboxStatus.OK, result.detail
    annotations = standin.claims[(NS, env_claim_name(digest))]["metadata"]["annotations"]
    stamped = parse_stamp(annotations[ENV_LAST_USED_ANNOTATION])
    assert stamped is not None and before - 1 <= stamped <= time.time() + 1
    assert ENV_BUILT_ANNOTATION in annotations  # a merge patch: the record stays
    assert claim_requests(standin, "PATCH", digest) == 1  # two pods, one stamp (interval: an hour)

    # A controller whose interval has passed stamps again.
    eager = controller(standin, tmp_path, env_last_used_interval_seconds=0.01)
    for _ in range(2):
        time.sleep(0.02)
        assert eager.run(window(repo, digest)).status is SandboxStatus.OK
    assert claim_requests(standin, "PATCH", digest) == 3


def live_pod_mounting(backend: KubernetesBackend, repo: RepoExport, digest: str) -> str:
    """A sandbox pod that mounts the claim and stays up (its init container waits for delivery)."""
    pod = build_sandbox_pod(window(repo, digest), backend.config, sandbox_id="keeper", pod_name="evalrunner-sbx-keeper")
    backend._core().create_namespaced_pod(NS, pod)
    return pod["metadata"]["name"]


def build_job(digest: str) -> dict:
    """A Job by the build Job's name (a build under way); its pod just waits."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": env_job_name(digest), "namespace": NS},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": "build"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "build", "image": IMAGE, "command": ["python", "-c", "import time; time.sleep(60)"]}
                    ],
                },
            },
        },
    }


def test_the_sweep_deletes_old_unmounted_claims_and_keeps_mounted_fresh_and_building_ones_standin_api(
    standin, tmp_path, repo
):
    import kubernetes

    backend = controller(standin, tmp_path)
    later = time.time() + 30 * DAY  # the sweep runs 30 days from now (retention: 14 days)
    old, mounted, fresh, building, never_built, unstamped = (f"{i:02x}" * 12 for i in range(1, 7))
    make_claim(backend, old, last_used=later - 20 * DAY)
    make_claim(backend, mounted, last_used=later - 20 * DAY)
    make_claim(backend, fresh, last_used=later - 1 * DAY)
    make_claim(backend, building, last_used=later - 20 * DAY)
    make_claim(backend, never_built, built=False)  # a failed build's claim, created now (30 days before)
    make_claim(backend, unstamped)  # built before last use was stamped
    pod = live_pod_mounting(backend, repo, mounted)
    kubernetes.client.BatchV1Api(backend._core().api_client).create_namespaced_job(NS, build_job(building))
    assert standin.wait_for_pod()

    dry = {d.digest: d for d in backend.prune_environments(dry_run=True, now=later)}
    assert {k for k, d in dry.items() if d.action == "would delete"} == {old, never_built}
    assert [m for m, _ in standin.requests if m in ("DELETE", "PATCH")] == []  # a dry run writes nothing
    assert len(standin.claims) == 6

    decisions = {d.digest: d for d in backend.prune_environments(now=later)}
    assert {k for k, d in decisions.items() if d.deleted} == {old, never_built}
    assert {name for _, name in standin.claims} == {env_claim_name(d) for d in (mounted, fresh, building, unstamped)}
    assert decisions[old].reason == "last used 20.0 days ago (retention 14.0 days); no pod mounts it"
    assert decisions[never_built].reason.startswith("never built; created 30.0 days ago")
    assert decisions[mounted].action == "kept" and f"mounted by pod {pod}" in decisions[mounted].reason
    assert decisions[building].action == "kept" and f"build Job {env_job_name(building)} exists" in (
        decisions[building].reason
    )
    assert decisions[fresh].reason == "last used 1.0 days ago (retention 14.0 days)"
    assert decisions[unstamped].reason == "no last use recorded: its retention counts from now"
    stamp = standin.claims[(NS, env_claim_name(unstamped))]["metadata"]["annotations"][ENV_LAST_USED_ANNOTATION]
    assert stamp == utc_stamp(later)

    # Retention 0: nothing is read or deleted.
    keep_all = controller(standin, tmp_path, env_retain_days=0)
    assert keep_all.prune_environments(now=later + 365 * DAY) == [] and len(standin.claims) == 4


def test_a_claim_stamped_after_the_sweep_listed_it_is_not_deleted_standin_api(standin, tmp_path, repo):
    """The race the delete precondition closes: a controller stamps the claim (it is about to
    mount it) between the sweep's listing and its delete."""
    from evalrunner_assets.execution.kubernetes.env_retention import _decide_candidate

    backend = controller(standin, tmp_path)
    digest = "ef" * 12
    make_claim(backend, digest, last_used=time.time() - 20 * DAY)
    core = backend._core()
    (listed,) = core.list_namespaced_persistent_volume_claim(NS).items
    assert backend.run(window(repo, digest)).status is SandboxStatus.OK  # stamps it
    import kubernetes

    batch = kubernetes.client.BatchV1Api(core.api_client)
    decision = _decide_candidate(core, batch, NS, listed, digest, "", "last used 20.0 days ago", None, False)
    assert (decision.action, decision.reason) == ("kept", "changed since it was listed (used meanwhile)")
    assert (NS, env_claim_name(digest)) in standin.claims


def test_a_controller_refuses_a_window_whose_environment_claim_was_pruned_standin_api(standin, tmp_path, repo):
    backend = controller(standin, tmp_path)
    result = backend.run(window(repo, "12" * 12))
    assert result.status is SandboxStatus.CRASHED
    assert f"its volume claim '{env_claim_name('12' * 12)}' is gone" in result.detail
    assert not standin.created  # no pod left pending on a missing claim


def test_the_sampling_sensor_sweeps_environment_claims_at_most_every_ten_minutes_standin_api(
    standin, tmp_path, monkeypatch
):
    from resources import LakeResource, SandboxResource
    from sensors import sampling

    monkeypatch.setattr(sampling, "_last_env_sweep", {})
    sandbox = SandboxResource(
        backend_name="kubernetes", k8s_image=IMAGE, k8s_kubeconfig=str(standin.write_kubeconfig(tmp_path / "kc"))
    )
    helper = controller(standin, tmp_path)
    first, second = "34" * 12, "56" * 12
    make_claim(helper, first, last_used=time.time() - 15 * DAY)
    resources = {"lake": LakeResource(root=str(tmp_path / "lake")), "sandbox": sandbox}
    with dg.instance_for_test() as instance:
        sampling.sampling_sensor(dg.build_sensor_context(instance=instance, resources=resources))
        assert (NS, env_claim_name(first)) not in standin.claims
        make_claim(helper, second, last_used=time.time() - 15 * DAY)
        sampling.sampling_sensor(dg.build_sensor_context(instance=instance, resources=resources))
        assert (NS, env_claim_name(second)) in standin.claims  # the next sweep is 10 minutes away
        monkeypatch.setattr(sampling, "_last_env_sweep", {})
        sampling.sampling_sensor(dg.build_sensor_context(instance=instance, resources=resources))
        assert (NS, env_claim_name(second)) not in standin.claims


def test_envs_prune_prints_what_it_deletes_and_why_and_a_dry_run_deletes_nothing_standin_api(
    standin, tmp_path, capsys, monkeypatch
):
    from evalrunner_assets.cli import main

    for var in ("EVALRUNNER_SANDBOX_NAMESPACE", "EVALRUNNER_SANDBOX_ENV_RETAIN_DAYS", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(var, raising=False)
    kubeconfig = str(standin.write_kubeconfig(tmp_path / "kc"))
    helper = controller(standin, tmp_path)
    old, fresh = "78" * 12, "9a" * 12
    make_claim(helper, old, last_used=time.time() - 20 * DAY)
    make_claim(helper, fresh, last_used=time.time() - 2 * DAY)

    assert main(["envs", "prune", "--dry-run", "--kubeconfig", kubeconfig]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["would", "delete", env_claim_name(old), "last", "used", "20.0", "days", "ago"] + [
        "(retention",
        "14.0",
        "days);",
        "no",
        "pod",
        "mounts",
        "it",
    ]
    assert out[1].startswith(f"kept         {env_claim_name(fresh)}  last used 2.0 days ago")
    assert out[2] == f"2 environment claim(s) in {NS}: 1 would be deleted (dry run: nothing was), retention 14 days"
    assert len(standin.claims) == 2

    assert main(["envs", "prune", "--kubeconfig", kubeconfig, "--retain-days", "3"]) == 0
    out = capsys.readouterr().out
    assert f"deleted      {env_claim_name(old)}  last used 20.0 days ago (retention 3.0 days)" in out
    assert "1 deleted, retention 3 days" in out
    assert {name for _, name in standin.claims} == {env_claim_name(fresh)}

    # A retention shorter than twice the stamping interval could delete a claim in use: refused.
    assert main(["envs", "prune", "--kubeconfig", kubeconfig, "--retain-days", "0.05"]) == 2
    assert "env_retain_days=0.05 is shorter than twice" in capsys.readouterr().err


@pytest.mark.slow
def test_a_pruned_environment_is_built_again_on_its_next_use_despite_its_lake_record_standin_api(
    standin, tmp_path, repo
):
    """Built, unused past the retention, pruned: the controller that built it (and remembered it)
    refuses its next window, naming the claim, and its next ``ensure_environment`` builds it
    again; the lake's ``envs/<digest>/environment.json`` never stands in for the claim."""
    from evalrunner_assets.execution.environment import EnvironmentStore, detect_environment
    from lake import open_lake
    from tests.helpers.package_index_standin import PackageIndex, make_wheel

    idx = PackageIndex(tmp_path / "index")
    (tmp_path / "wheels").mkdir()
    idx.add(make_wheel(tmp_path / "wheels", "tinydep", "1.0", {"tinydep/__init__.py": "ANSWER = 41\n"}))
    try:
        root = tmp_path / "c1"
        root.mkdir()
        (root / "requirements.txt").write_text("tinydep==1.0\n")
        export = RepoExport("acme/agent", "1" * 40, str(root), "1" * 64)
        spec = detect_environment(export)
        the_lake = open_lake(str(tmp_path / "lake"))
        builder = controller(standin, tmp_path, env_last_used_interval_seconds=2.0)
        built = EnvironmentStore(tmp_path / "local-1", index=idx.url, lake=the_lake).ensure(builder, export, spec)
        assert not built.reused and len(standin.jobs_created) == 1
        record = f"envs/{spec.digest}/environment.json"
        assert the_lake.exists(record)
        probe = SandboxRequest(
            argv=("python", "-c", "import tinydep; print(tinydep.ANSWER + 1)"), export=export, python_env=built.path
        )
        assert builder.run(probe).stdout.strip() == b"42"

        decisions = controller(standin, tmp_path).prune_environments(now=time.time() + 15 * DAY)
        assert [(d.digest, d.action) for d in decisions] == [(spec.digest, "deleted")]
        assert the_lake.exists(record)  # the lake keeps the record of the past build

        time.sleep(2.1)  # past the builder's interval: it stamps the claim again
        refused = builder.run(probe)
        assert refused.status is SandboxStatus.CRASHED and "is gone" in refused.detail
        again = EnvironmentStore(tmp_path / "local-1", index=idx.url, lake=the_lake).ensure(builder, export, spec)
        assert not again.reused and len(standin.jobs_created) == 2
        # Within its interval the builder trusts what it found; past it, it reads the claim again.
        reads = claim_requests(standin, "GET", spec.digest)
        assert builder.ensure_environment(export, spec, index=idx.url)[0].reused
        assert claim_requests(standin, "GET", spec.digest) == reads
        assert builder.run(probe).stdout.strip() == b"42"
        time.sleep(2.1)
        assert builder.ensure_environment(export, spec, index=idx.url)[0].reused
        assert claim_requests(standin, "GET", spec.digest) == reads + 1
        # Another controller now finds it built: no third Job.
        other = EnvironmentStore(tmp_path / "local-2", index=idx.url).ensure(
            controller(standin, tmp_path), export, spec
        )
        assert other.reused and len(standin.jobs_created) == 2
    finally:
        idx.close()
