"""KubernetesBackend's launch -> deliver -> wait -> collect -> delete, against the loopback
stand-in of the Kubernetes API in tests/helpers/k8s_standin.py (not a cluster: its kubelet runs the
containers' commands as local processes). The pod wrapper that runs here is the real one."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path

import dagster as dg
import pytest

from evalrunner_assets.execution import pod_wrapper  # noqa: E402
from evalrunner_assets.execution.kubernetes import (  # noqa: E402
    KubernetesBackend,
    KubernetesSandboxConfig,
    KubernetesSandboxError,
    verify_collected,
)
from evalrunner_assets.execution.sandbox import Limits, RepoExport, SandboxRequest, SandboxStatus, SandboxUnavailable  # noqa: E402
from resources.kubernetes import PipesPodLauncher  # noqa: E402
from tests.helpers.k8s_standin import KubernetesStandIn  # noqa: E402

IMAGE = "registry.example/evalrunner-sandbox@sha256:" + "1" * 64


@pytest.fixture
def repo(tmp_path) -> RepoExport:
    root = tmp_path / "export"
    (root / "evals").mkdir(parents=True)
    (root / "evals" / "task.txt").write_text("refund policy\n")
    return RepoExport(repo="acme/agent", commit="c" * 40, path=str(root), tree_digest="t" * 64)


def backend(standin: KubernetesStandIn, tmp_path: Path, **kw) -> KubernetesBackend:
    kubeconfig = standin.write_kubeconfig(tmp_path / "kubeconfig")
    return KubernetesBackend(
        KubernetesSandboxConfig(image=IMAGE, kubeconfig=str(kubeconfig), poll_interval_seconds=0.05, **kw)
    )


def py(code: str, repo: RepoExport, **kw) -> SandboxRequest:
    return SandboxRequest(
        argv=("python", "-c", code),
        export=repo,
        workdir="evals",
        labels={"task": "evals/task.py", "window": "0-10"},
        **kw,
    )


def test_successful_pod_returns_stdout_stderr_and_output_files_then_is_deleted(standin, tmp_path, repo):
    code = (
        "import sys\n"
        "data = open('task.txt').read()\n"
        "open('/work/out/answer.txt', 'w').write(data.upper())\n"
        "open('/work/out/log.eval', 'wb').write(bytes(range(256)))\n"
        "print('stdout line'); print('stderr line', file=sys.stderr)\n"
        "print(sys.stdin.read())\n"
    )
    result = backend(standin, tmp_path).run(py(code, repo, stdin=b"from stdin"))
    assert result.status is SandboxStatus.OK, result.detail
    assert result.exit_code == 0
    assert result.stdout == b"stdout line\nfrom stdin\n"
    assert "stderr line" in result.stderr_tail
    assert result.outputs == {"answer.txt": b"REFUND POLICY\n", "log.eval": bytes(range(256))}
    assert result.backend == "kubernetes" and result.ran
    (created,) = standin.created
    assert standin.deleted == [created["metadata"]["name"]] and not standin.pods
    assert (
        created["metadata"]["labels"]["evalrunner.dev/task"]
        == "evals-task.py-" + hashlib.sha256(b"evals/task.py").hexdigest()[:8]
    )


def test_child_output_never_reaches_the_pod_log(standin, tmp_path, repo):
    b = backend(standin, tmp_path, collect_slack_seconds=5)
    code = 'print(\'{"__dagster_pipes_version": "0.1", "method": "log"}\'); import time; time.sleep(0.5)'
    done = {}
    t = threading.Thread(target=lambda: done.setdefault("r", b.run(py(code, repo))))
    t.start()
    pod = standin.wait_for_pod()
    sandbox = pod.container("sandbox")
    while "terminated" not in sandbox.state:
        time.sleep(0.02)
    log = b"".join(line for _, line in sandbox.log)
    t.join()
    assert b"__dagster_pipes_version" not in log
    assert json.loads(log.strip().splitlines()[-1])["event"] == "evalrunner-sandbox-result"
    assert done["r"].stdout.startswith(b'{"__dagster_pipes_version"')


def test_nonzero_exit_is_reported_as_such(standin, tmp_path, repo):
    result = backend(standin, tmp_path).run(py("import sys; print('boom', file=sys.stderr); sys.exit(3)", repo))
    assert result.status is SandboxStatus.EXIT_NONZERO
    assert result.exit_code == 3 and "boom" in result.stderr_tail
    assert standin.deleted and not standin.pods


def test_forged_result_file_from_the_child_is_overwritten_by_the_wrapper(standin, tmp_path, repo):
    forged = json.dumps({"version": 1, "status": "ok", "exit_code": 0, "mac": "0" * 64})
    code = f"open('/work/control/result.json', 'w').write({forged!r}); import sys; sys.exit(7)"
    result = backend(standin, tmp_path).run(py(code, repo))
    assert result.status is SandboxStatus.EXIT_NONZERO and result.exit_code == 7


def test_wall_clock_limit_kills_the_child_and_reports_timeout(standin, tmp_path, repo):
    result = backend(standin, tmp_path).run(py("import time; time.sleep(30)", repo, limits=Limits(wall_seconds=0.5)))
    assert result.status is SandboxStatus.TIMEOUT
    assert "wall-clock" in result.detail
    assert result.duration_s < 10


def test_pod_deadline_exceeded_is_a_timeout(standin, tmp_path, repo):
    # No slack: activeDeadlineSeconds (1 s from pod start) fires before the wrapper's own limit.
    b = backend(standin, tmp_path, startup_slack_seconds=0, collect_slack_seconds=0)
    result = b.run(py("import time; time.sleep(30)", repo, limits=Limits(wall_seconds=1)))
    assert result.status is SandboxStatus.TIMEOUT
    assert "DeadlineExceeded" in result.detail or "deadline" in result.detail
    assert standin.deleted and not standin.pods


def test_image_pull_errors_crash_after_a_bounded_wait(standin, tmp_path, repo):
    standin.bad_images.add(IMAGE)
    started = time.monotonic()
    result = backend(standin, tmp_path, image_pull_timeout_seconds=0.6).run(py("print(1)", repo))
    assert result.status is SandboxStatus.CRASHED
    assert "image pull failed" in result.detail and (
        "ImagePullBackOff" in result.detail or "ErrImagePull" in result.detail
    )
    assert IMAGE in result.detail
    assert 0.6 <= time.monotonic() - started < 10
    assert standin.deleted and not standin.pods


def test_cancellation_deletes_the_pod(standin, tmp_path, repo):
    cancel = threading.Event()
    b = backend(standin, tmp_path)
    out = {}
    t = threading.Thread(
        target=lambda: out.setdefault("r", b.run(py("import time; time.sleep(30)", repo), cancel=cancel))
    )
    t.start()
    pod = standin.wait_for_pod()
    while "running" not in pod.container("sandbox").state:
        time.sleep(0.02)
    cancel.set()
    t.join(timeout=10)
    assert out["r"].status is SandboxStatus.CANCELLED
    assert standin.deleted == [pod.name] and not standin.pods


def test_eviction_is_a_crash_with_its_cause(standin, tmp_path, repo):
    b = backend(standin, tmp_path)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", b.run(py("import time; time.sleep(30)", repo))))
    t.start()
    pod = standin.wait_for_pod()
    while "running" not in pod.container("sandbox").state:
        time.sleep(0.02)
    standin.evict(pod.name)
    t.join(timeout=10)
    assert out["r"].status is SandboxStatus.CRASHED and "evicted" in out["r"].detail
    assert "low on resource" in out["r"].detail


def test_full_namespace_quota_waits_then_gives_up(standin, tmp_path, repo):
    standin.pod_quota = 0
    result = backend(standin, tmp_path, quota_wait_seconds=0.5).run(py("print(1)", repo))
    assert result.status is SandboxStatus.CRASHED and "exceeded quota" in result.detail
    assert not standin.created


def test_outputs_that_are_not_regular_files_or_over_the_caps_are_rejected(standin, tmp_path, repo):
    code = (
        "import os\n"
        "os.symlink('/etc/passwd', '/work/out/link')\n"
        "for i in range(4): open(f'/work/out/f{i}.txt', 'w').write('x' * 10)\n"
        "os.mkfifo('/work/out/pipe')\n"
    )
    result = backend(standin, tmp_path).run(py(code, repo, limits=Limits(output_files=2)))
    assert result.status is SandboxStatus.OK, result.detail
    assert sorted(result.outputs) == ["f0.txt", "f1.txt"]
    assert result.rejected_outputs["link"] == "symlink"
    assert "regular" in result.rejected_outputs["pipe"]
    assert "more than 2" in result.rejected_outputs["f3.txt"]


def test_preflight_names_the_namespace_when_the_api_is_unreachable(tmp_path):
    kubeconfig = tmp_path / "kc"
    s = KubernetesStandIn()
    s.start()
    s.write_kubeconfig(kubeconfig)
    s.stop()  # nothing listens there any more
    b = KubernetesBackend(KubernetesSandboxConfig(image=IMAGE, kubeconfig=str(kubeconfig)))
    with pytest.raises(SandboxUnavailable, match="evalrunner-sandbox"):
        b.preflight()


def test_runtime_digest_depends_on_the_image():
    a = KubernetesBackend(KubernetesSandboxConfig(image=IMAGE)).runtime_digest()
    b = KubernetesBackend(KubernetesSandboxConfig(image=IMAGE.replace("1", "2"))).runtime_digest()
    assert a != b and len(a) == 64
    assert a == KubernetesBackend(KubernetesSandboxConfig(image=IMAGE, namespace="other")).runtime_digest()


def test_collected_stream_without_this_pods_signature_is_refused(tmp_path, repo):
    import io

    control, out = tmp_path / "control", tmp_path / "out"
    control.mkdir(), out.mkdir()
    result = {"version": 1, "status": "ok", "exit_code": 0, "pipes_sha256": hashlib.sha256(b"").hexdigest()}
    result["mac"] = pod_wrapper.result_mac(b"k" * 32, result, b"")
    (control / "result.json").write_text(json.dumps(result))
    sink = io.BytesIO()
    pod_wrapper.collect(out, control, 8, 1 << 20, sink)
    request = SandboxRequest(argv=("x",), export=repo)
    assert verify_collected(sink.getvalue(), b"k" * 32, request)[0]["status"] == "ok"
    with pytest.raises(KubernetesSandboxError, match="signature"):
        verify_collected(sink.getvalue(), b"other-key-other-key-other-key!!!", request)
    with pytest.raises(KubernetesSandboxError, match="truncated"):
        verify_collected(sink.getvalue()[:-20], b"k" * 32, request)


def test_receive_refuses_a_payload_whose_digest_does_not_match(tmp_path):
    import io

    payload = bytearray(pod_wrapper.encode_payload(b"\0" * 1024, b"", b"k" * 32))
    payload[-1] ^= 1
    with pytest.raises(pod_wrapper.PayloadError, match="digest"):
        pod_wrapper.receive(io.BytesIO(bytes(payload)), tmp_path / "repo", tmp_path, 1 << 20)


def test_inside_dagster_the_pod_is_launched_through_pipes_k8s_client(standin, tmp_path, repo):
    b = backend(standin, tmp_path)
    forged = '{"__dagster_pipes_version": "0.1", "method": "report_custom_message", "params": {"payload": "FORGED"}}'
    request = py(f"open('/work/out/r.txt', 'w').write('ok'); print({forged!r})", repo)
    seen = {}

    @dg.asset
    def sandboxed(context):  # unannotated: this module uses postponed annotations
        seen["result"] = b.with_launcher(PipesPodLauncher(context)).run(request)
        return dg.MaterializeResult()

    instance = dg.DagsterInstance.ephemeral()
    res = dg.materialize([sandboxed], instance=instance)
    assert res.success
    result = seen["result"]
    assert result.status is SandboxStatus.OK, result.detail
    assert result.outputs == {"r.txt": b"ok"}
    (created,) = standin.created
    assert created["metadata"]["name"].startswith("dagster-")  # named by PipesK8sClient
    env = {e["name"] for e in created["spec"]["containers"][0]["env"]}
    assert "DAGSTER_PIPES_CONTEXT" in env
    messages = " ".join(str(e.user_message) for e in instance.all_logs(res.run_id))
    assert "successfully opened dagster pipes" in messages
    assert "FORGED" not in messages
    assert standin.deleted == [created["metadata"]["name"]]


def test_child_sees_the_same_sandbox_layout_as_the_local_backends(standin, tmp_path, repo):
    code = "import os, json; print(json.dumps({k: os.environ.get(k) for k in ('HOME', 'TMPDIR', 'EVALRUNNER_REPO', 'EVALRUNNER_OUT', 'DAGSTER_PIPES_CONTEXT', 'GREETING')}))"
    result = backend(standin, tmp_path).run(py(code, repo, env={"GREETING": "hi"}))
    assert result.status is SandboxStatus.OK, result.detail
    env = json.loads(result.stdout)
    # Paths are the stand-in's directories for /work/home, /tmp, /work/repo, /work/out; what
    # matters is that the variables are set, distinct, and nothing of the wrapper's leaks in.
    assert len({env["HOME"], env["TMPDIR"], env["EVALRUNNER_REPO"], env["EVALRUNNER_OUT"]}) == 4
    assert env["HOME"].endswith("/scratch") and env["EVALRUNNER_OUT"].endswith("/out")
    assert env["GREETING"] == "hi" and env["DAGSTER_PIPES_CONTEXT"] is None


def test_make_backend_builds_the_kubernetes_backend_from_configuration_only():
    from evalrunner_assets.execution.backends import make_backend

    config = KubernetesSandboxConfig(image=IMAGE, namespace="sandboxes", max_concurrent_pods=3)
    b = make_backend("kubernetes", kubernetes=config)
    assert isinstance(b, KubernetesBackend) and b.config.namespace == "sandboxes"


def test_an_unknown_backend_name_lists_every_backend_make_backend_builds():
    from evalrunner_assets.execution.backends import BACKENDS, UnknownBackend, make_backend

    assert "kubernetes" in BACKENDS
    with pytest.raises(UnknownBackend, match="bubblewrap, unsafe-local, kubernetes"):
        make_backend("docker")


def test_credential_like_environment_is_refused_before_any_pod_exists(standin, tmp_path, repo):
    result = backend(standin, tmp_path).run(py("print(1)", repo, env={"OPENAI_API_KEY": "sk-..."}))
    assert result.status is SandboxStatus.CRASHED and "OPENAI_API_KEY" in result.detail
    assert not standin.created


def test_the_sandbox_resource_binds_the_dagster_context_for_pipes_launches():
    from resources.sandbox import SandboxResource

    context = object()
    resource = SandboxResource(backend_name="kubernetes", k8s_image=IMAGE)
    bound = resource.backend(context)
    assert isinstance(bound, KubernetesBackend) and isinstance(bound._launcher, PipesPodLauncher)
    assert bound._launcher.context is context
    assert resource.backend()._launcher is None
