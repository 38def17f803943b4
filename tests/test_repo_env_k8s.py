"""The Kubernetes build step of a repository environment: generated Job, claim and egress
policy against the Kubernetes schemas and PSA 'restricted' (no cluster here), and the Job's own
command run for real in bubblewrap (the pod would run the same command)."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
from _package_index import PackageIndex, make_wheel
from test_k8s_manifests import K8S_VERSION, config, psa_restricted_violations

from evalrunner_assets.execution.channel import UnixForwarder
from evalrunner_assets.execution.environment import detect_environment
from evalrunner_assets.execution.kubernetes import NETWORK_LABEL, SANDBOX_CONTAINER
from evalrunner_assets.execution.kubernetes_env import (
    build_environment_job,
    environment_claim,
    package_index_network_policy,
)
from evalrunner_assets.execution.sandbox import RepoExport, SandboxRequest, SandboxStatus, WritableMount


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
    assert mounts[f"/envs/{spec.digest}"]["readOnly"] is False
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
