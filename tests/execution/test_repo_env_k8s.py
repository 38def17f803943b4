"""The Kubernetes build step of a repository environment.

- Generated Job, claim and egress policy against the Kubernetes schemas and PSA 'restricted'.
- The Job's own command run for real in bubblewrap (the pod would run the same command).
- The backend building, recording and reusing environments against the STAND-IN Kubernetes API
  (tests/helpers/k8s_standin.py; no cluster here, so the cluster is mocked, as the test names say): the
  stand-in's kubelet runs the build Job's pod as local processes -- the real pod wrapper, the
  real ``_env_build`` and ``uv`` installing from a loopback package index -- and the claim is a
  directory that outlives the pods. What it cannot show: read-only mounts, storage classes.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import kubernetes_validate
import pytest

from evalrunner_assets.execution.channel import UnixForwarder
from evalrunner_assets.execution.environment import EnvironmentBuildError, EnvironmentStore, detect_environment
from evalrunner_assets.execution.kubernetes import (
    ENV_BUILT_ANNOTATION,
    NETWORK_LABEL,
    SANDBOX_CONTAINER,
    KubernetesBackend,
    KubernetesSandboxConfig,
    KubernetesSandboxError,
    build_sandbox_pod,
)
from evalrunner_assets.execution.kubernetes.env import (
    build_environment_job,
    environment_claim,
    package_index_network_policy,
)
from evalrunner_assets.execution.sandbox import RepoExport, SandboxRequest, SandboxStatus, WritableMount
from evalrunner_assets.pipeline.facts import TaskFacts, task_environment
from tests.helpers.k8s_checks import K8S_VERSION, config, psa_restricted_violations
from tests.helpers.k8s_standin import KubernetesStandIn
from tests.helpers.package_index_standin import PackageIndex, make_wheel

IMAGE = "registry.example/evalrunner-sandbox@sha256:" + "1" * 64


def _export(tmp_path: Path) -> RepoExport:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "requirements.txt").write_text("tinydep==1.0\n")
    return RepoExport("acme/agent", "a" * 40, str(root), "d" * 64)


def test_build_job_claim_and_policy_validate_and_the_job_meets_psa_restricted(tmp_path):
    export = _export(tmp_path)
    spec = detect_environment(export.path)
    job = build_environment_job(
        spec, export, config(), index="https://pypi.org/simple", index_proxy="http://10.64.0.20:3128"
    )
    claim = environment_claim(spec, config())
    policy = package_index_network_policy(config(), proxy_cidr="10.64.0.20/32", proxy_port=3128)
    for doc in (job, claim, policy):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    pod = job["spec"]["template"]
    assert psa_restricted_violations(pod["spec"]) == []
    assert pod["metadata"]["labels"][NETWORK_LABEL] == "package-index"
    assert policy["spec"]["podSelector"]["matchLabels"] == {NETWORK_LABEL: "package-index"}
    sandbox = next(c for c in pod["spec"]["containers"] if c["name"] == SANDBOX_CONTAINER)
    mounts = {m["mountPath"]: m for m in sandbox["volumeMounts"]}
    assert mounts["/envs"]["readOnly"] is False  # the build creates /envs/<digest> on the claim
    assert {"name": "env", "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}} in pod["spec"]["volumes"]
    assert mounts["/work/repo"]["readOnly"] is True
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert job["spec"]["backoffLimit"] == 0


@pytest.mark.slow
def test_the_build_jobs_command_builds_the_environment_in_a_sandbox(bwrap_backend, tmp_path):
    idx = PackageIndex(tmp_path / "index")
    (tmp_path / "wheels").mkdir()
    idx.add(make_wheel(tmp_path / "wheels", "tinydep", "1.0", {"tinydep/__init__.py": "ANSWER = 41\n"}))
    try:
        export = _export(tmp_path)
        spec = detect_environment(export.path)
        job = build_environment_job(spec, export, config(), index=idx.url)
        sandbox = next(c for c in job["spec"]["template"]["spec"]["containers"] if c["name"] == SANDBOX_CONTAINER)
        args = sandbox["args"]
        argv = tuple(args[args.index("--") + 1 :])
        env = dict(a.split("=", 1) for a in args[args.index("--env") + 1 : args.index("--") : 2] if "=" in a)
        volume = tmp_path / "volume"
        volume.mkdir()
        with UnixForwarder("127.0.0.1", idx.port) as fwd:
            result = bwrap_backend.run(
                SandboxRequest(
                    argv=argv,
                    export=export,
                    env=env,
                    channels=(fwd.channel(idx.port),),
                    writable=(WritableMount(str(volume), f"/envs/{spec.digest}"),),
                    repo_writable=False,
                )
            )
        assert result.status is SandboxStatus.OK, result.stderr_tail[-2000:]
        assert (volume / ".evalrunner-env.json").is_file()
        probe = bwrap_backend.run(
            SandboxRequest(
                argv=("python", "-c", "import tinydep, inspect_ai; print(tinydep.ANSWER + 1)"),
                export=export,
                python_env=str(volume),
            )
        )
        assert probe.status is SandboxStatus.OK, probe.stderr_tail
        assert probe.stdout.strip() == b"42"
        assert not [
            p for p in (volume / "lib").rglob("*.dist-info") if (p / "INSTALLER").read_text().startswith("evalrunner")
        ]
    finally:
        idx.close()


def test_a_sandbox_pod_mounts_its_environment_read_only_and_refuses_a_local_directory(tmp_path):
    export = _export(tmp_path)
    digest = "ab" * 12
    pod = build_sandbox_pod(
        SandboxRequest(argv=("python", "-c", "0"), export=export, python_env=f"/envs/{digest}"),
        config(),
        sandbox_id="x",
    )
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    assert {
        "name": "env",
        "persistentVolumeClaim": {"claimName": f"evalrunner-env-{digest}", "readOnly": True},
    } in pod["spec"]["volumes"]
    sandbox = next(c for c in pod["spec"]["containers"] if c["name"] == SANDBOX_CONTAINER)
    assert {"name": "env", "mountPath": f"/envs/{digest}", "subPath": digest, "readOnly": True} in sandbox[
        "volumeMounts"
    ]
    assert sandbox["args"][sandbox["args"].index("--python-env") + 1] == f"/envs/{digest}"
    collector = next(c for c in pod["spec"]["containers"] if c["name"] != SANDBOX_CONTAINER)
    assert all(m["name"] != "env" for m in collector["volumeMounts"])
    with pytest.raises(KubernetesSandboxError, match="python_env '/home/me/envs/abc' is not a Kubernetes environment"):
        build_sandbox_pod(
            SandboxRequest(argv=("python",), export=export, python_env="/home/me/envs/abc"), config(), sandbox_id="x"
        )


# --- the backend against the stand-in API ---------------------------------------------------


@pytest.fixture
def index(tmp_path):
    idx = PackageIndex(tmp_path / "index")
    (tmp_path / "wheels").mkdir()
    idx.add(make_wheel(tmp_path / "wheels", "tinydep", "1.0", {"tinydep/__init__.py": "ANSWER = 41\n"}))
    yield idx
    idx.close()


def _controller(standin: KubernetesStandIn, tmp_path: Path) -> KubernetesBackend:
    """One controller process's backend (each has its own in-process cache)."""
    kubeconfig = standin.write_kubeconfig(tmp_path / "kubeconfig")
    return KubernetesBackend(
        KubernetesSandboxConfig(image=IMAGE, kubeconfig=str(kubeconfig), poll_interval_seconds=0.05)
    )


def _commit(tmp_path: Path, name: str, requirements: str, commit: str) -> RepoExport:
    root = tmp_path / name
    (root / "evals").mkdir(parents=True)
    (root / "requirements.txt").write_text(requirements)
    (root / "evals" / "task.txt").write_text(f"{name}\n")
    return RepoExport("acme/agent", commit, str(root), commit[:1] * 64)


@pytest.mark.slow
def test_environment_is_built_once_per_digest_by_a_job_and_reused_across_commits_and_controllers_standin_api(
    standin, index, tmp_path
):
    first = _commit(tmp_path, "c1", "tinydep==1.0\n", "1" * 40)
    second = _commit(tmp_path, "c2", "tinydep==1.0\n", "2" * 40)  # same dependencies, another commit
    spec = detect_environment(first)
    assert detect_environment(second).digest == spec.digest
    controllers = [_controller(standin, tmp_path), _controller(standin, tmp_path)]
    stores = [EnvironmentStore(tmp_path / f"local-envs-{i}", index=index.url) for i in range(2)]
    results: dict[int, object] = {}

    def ensure(i: int) -> None:
        try:
            results[i] = stores[i].ensure(controllers[i], (first, second)[i], spec)
        except Exception as exc:  # reported below
            results[i] = exc

    # Two controllers need the same environment at once: one Job builds it, the other waits.
    threads = [threading.Thread(target=ensure, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    built = [results[0], results[1]]
    assert all(not isinstance(b, Exception) for b in built), built
    assert len(standin.jobs_created) == 1
    assert sorted(b.reused for b in built) == [False, True]
    fresh = next(b for b in built if not b.reused)
    assert fresh.path == f"/envs/{spec.digest}" and "tinydep==1.0" in fresh.packages
    assert {b.packages for b in built} == {fresh.packages}
    assert sum(s.builds for s in stores) == 1
    # The Job and its pod are gone; the claim stays, carrying the build's record.
    assert standin.jobs == {} and not [p for p in standin.pods if p[1].startswith("evalrunner-env-")]
    claim = standin.claims[("evalrunner-sandbox", f"evalrunner-env-{spec.digest}")]
    record = json.loads(claim["metadata"]["annotations"][ENV_BUILT_ANNOTATION])
    assert record["digest"] == spec.digest and record["built_from"] in (
        "acme/agent@" + "1" * 40,
        "acme/agent@" + "2" * 40,
    )
    job = standin.jobs_created[0]
    assert job["spec"]["template"]["metadata"]["labels"][NETWORK_LABEL] == "package-index"
    assert sum(c.sandbox_counts()["env_build_pods"] for c in controllers) == 1

    # A sample window of the second commit: its pod mounts the claim and imports the dependency.
    result = controllers[1].run(
        SandboxRequest(
            argv=("python", "-c", "import tinydep, inspect_ai; print(tinydep.ANSWER + 1)"),
            export=second,
            python_env=fresh.path,
        )
    )
    assert result.status is SandboxStatus.OK, (result.detail, result.stderr_tail)
    assert result.stdout.strip() == b"42"

    # A third controller (a new run pod) finds the record on the claim: no build, no Job. The
    # task's windows get the environment through the same path as locally (task_environment).
    third = _controller(standin, tmp_path)
    facts = TaskFacts(
        task="evals/task.py",
        spec="evals/task.py",
        workdir=".",
        cohort="",
        paths=(),
        inspect_task="task",
        sample_ids=("1",),
        config_digest="x",
        env_digest=spec.digest,
        env_source="requirements.txt",
    )
    assert task_environment(third, second, facts, EnvironmentStore(tmp_path / "local-envs-3", index=index.url)) == (
        f"/envs/{spec.digest}"
    )
    assert len(standin.jobs_created) == 1 and third.sandbox_counts()["env_build_pods"] == 0
    # Another digest (a changed requirement) is another build.
    changed = _commit(tmp_path, "c3", "tinydep==1.0\n# changed\n", "3" * 40)
    again = EnvironmentStore(tmp_path / "local-envs-4", index=index.url).ensure(
        third, changed, detect_environment(changed)
    )
    assert not again.reused and again.digest != spec.digest and len(standin.jobs_created) == 2


@pytest.mark.slow
def test_a_failed_build_on_kubernetes_names_the_package_records_nothing_and_is_retried_standin_api(
    standin, index, tmp_path
):
    export = _commit(tmp_path, "c1", "nosuchpkg==1.0\n", "1" * 40)
    spec = detect_environment(export)
    backend = _controller(standin, tmp_path)
    store = EnvironmentStore(tmp_path / "local-envs", index=index.url)
    with pytest.raises(EnvironmentBuildError, match="nosuchpkg") as failed:
        store.ensure(backend, export, spec)
    assert not failed.value.infrastructure  # the repository's requirement, not the cluster
    claim = standin.claims[("evalrunner-sandbox", f"evalrunner-env-{spec.digest}")]
    assert ENV_BUILT_ANNOTATION not in (claim["metadata"].get("annotations") or {})
    assert standin.jobs == {} and store.builds == 0
    with pytest.raises(EnvironmentBuildError, match="nosuchpkg"):
        store.ensure(backend, export, spec)  # nothing was recorded: it is tried again
    assert len(standin.jobs_created) == 2


def test_a_build_whose_record_is_not_this_environments_is_refused(tmp_path):
    from evalrunner_assets.execution.kubernetes.backend import _checked_record

    spec = detect_environment(_commit(tmp_path, "c1", "tinydep==1.0\n", "1" * 40))
    good = {"digest": spec.digest, "packages": ["tinydep==1.0"]}
    assert _checked_record(spec, json.dumps(good).encode()) == good
    for bad in (
        None,
        b"not json",
        json.dumps({**good, "digest": "0" * 24}).encode(),
        json.dumps({**good, "packages": [1]}).encode(),
    ):
        with pytest.raises(EnvironmentBuildError, match=spec.source):
            _checked_record(spec, bad)


@pytest.mark.slow
def test_a_commit_with_dependencies_is_learnt_and_its_window_runs_with_them_on_kubernetes_standin_api(
    standin, index, tmp_path, monkeypatch
):
    """The pipeline's own path: learning the commit builds its environments (one Job each) before
    ``.evals/list`` runs, which imports the dependency; then a sample window's pod mounts the
    environment its manifest names and Inspect imports it there. Nothing is built on this machine."""
    from evalrunner_assets.execution.environment import spec_for_file
    from evalrunner_assets.execution.inspect_runner import TaskRunConfig, run_window_cold
    from evalrunner_assets.pipeline.facts import learn_commit
    from lake import Window, open_lake
    from lake.batch import RunSettings
    from tests.helpers.tinydep_evals import LIST, TASK

    monkeypatch.setenv("EVALRUNNER_ENVS", str(tmp_path / "local-envs"))
    monkeypatch.setenv("EVALRUNNER_PACKAGE_INDEX", index.url)
    root = tmp_path / "repo"
    for rel, text in {
        "requirements.txt": "tinydep==1.0\n",
        ".evals/list": LIST,
        "evals/requirements.txt": "tinydep==1.0  # what the tasks need\n",
        "evals/t.py": TASK,
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / ".evals/list").chmod(0o755)
    export = RepoExport("acme/agent", "0" * 40, str(root), "")
    backend = _controller(standin, tmp_path)
    the_lake = open_lake(str(tmp_path / "lake"))

    facts = learn_commit(the_lake, backend, export, model="mockllm/model")
    task = facts.tasks["t/answer"]
    assert task.failure is None and task.sample_ids == ("s0", "s1", "s2")
    named = spec_for_file(export, "evals/requirements.txt")
    assert task.env_digest == named.digest and facts.environment["source"] == "evals/requirements.txt"
    assert {j["metadata"]["name"] for j in standin.jobs_created} == {
        f"evalrunner-env-{named.digest}",
        f"evalrunner-env-{detect_environment(export).digest}",
    }
    assert the_lake.exists(f"envs/{named.digest}/environment.json")
    assert not (tmp_path / "local-envs").exists()  # built on the cluster only

    cfg = TaskRunConfig(
        repo="acme/agent",
        task="t/answer",
        spec="evals/t.py@answer",
        settings=RunSettings(model="simagent/support"),
        env_digest=task.env_digest,
        python_env=task_environment(backend, export, task),
    )
    run = run_window_cold(backend, export, cfg, Window(0, 2))
    assert run.ok, run.failure_cause
    assert len(standin.jobs_created) == 2  # the window found the environment built
    window_pod = standin.created[-1]
    assert {
        "name": "env",
        "persistentVolumeClaim": {"claimName": f"evalrunner-env-{named.digest}", "readOnly": True},
    } in window_pod["spec"]["volumes"]


def test_a_backend_wrapped_by_another_still_builds_its_environments_on_the_cluster():
    from evalrunner_assets.execution.environment import remote_builder

    class Wrapper:  # the shape of the model gateway's GatewayBackend: it runs through .inner
        def __init__(self, inner):
            self.inner, self.name = inner, inner.name

    backend = KubernetesBackend(KubernetesSandboxConfig(image=IMAGE))
    assert remote_builder(Wrapper(Wrapper(backend))) == backend.ensure_environment
    assert remote_builder(Wrapper(type("Local", (), {"name": "bubblewrap"})())) is None
