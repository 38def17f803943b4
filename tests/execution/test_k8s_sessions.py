"""Warm sandbox sessions on Kubernetes, against the loopback STAND-IN of the Kubernetes API
(tests/helpers/k8s_standin.py; not a cluster). The wrapper's ``serve`` and ``call`` roles, the exec
stream with stdin, the inbox/control hand-off between the two containers and the signature
checks all run for real; what only a node enforces (read-only mounts, uids, limits) does not."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from evalrunner_assets.execution.kubernetes import (  # noqa: E402
    KubernetesBackend,
    KubernetesSandboxConfig,
    KubernetesSandboxError,
)
from evalrunner_assets.execution.sandbox import Channel, RepoExport, SandboxRequest, SandboxStatus  # noqa: E402
from tests.helpers.k8s_standin import KubernetesStandIn  # noqa: E402

IMAGE = "registry.example/evalrunner-sandbox@sha256:" + "1" * 64

# A minimal JSON-lines worker: one reply line per request line; "write" leaves a file in the
# output directory, "exit"/"hang"/"noise" misbehave on purpose.
WORKER = r"""
import json, os, sys, time
out = os.environ["EVALRUNNER_OUT"]
for line in sys.stdin:
    req = json.loads(line)
    op = req["op"]
    if op == "write":
        open(os.path.join(out, req["name"]), "w").write(req["text"])
    elif op == "exit":
        print("dying", file=sys.stderr, flush=True)
        sys.exit(9)
    elif op == "hang":
        time.sleep(3600)
    print(json.dumps({"ok": True, "op": op, "pid": os.getpid(), "files": sorted(os.listdir(out))}), flush=True)
"""


@pytest.fixture
def repo(tmp_path) -> RepoExport:
    root = tmp_path / "export"
    root.mkdir()
    (root / "worker.py").write_text(WORKER)
    return RepoExport(repo="acme/agent", commit="c" * 40, path=str(root), tree_digest="t" * 64)


def backend(standin: KubernetesStandIn, tmp_path: Path, **kw) -> KubernetesBackend:
    kubeconfig = standin.write_kubeconfig(tmp_path / "kubeconfig")
    return KubernetesBackend(
        KubernetesSandboxConfig(image=IMAGE, kubeconfig=str(kubeconfig), poll_interval_seconds=0.05, **kw)
    )


def worker_request(repo: RepoExport, **kw) -> SandboxRequest:
    return SandboxRequest(argv=("python", "worker.py"), export=repo, labels={"task": "t", "step": "warm"}, **kw)


def _gone_within(pid: int, seconds: float) -> bool:
    """True once ``pid`` is no running process (absent, or a zombie awaiting its parent)."""
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_successive_calls_reuse_one_pod_and_each_sees_only_its_own_outputs(standin, tmp_path, repo):
    import json

    b = backend(standin, tmp_path)
    session = b.open_session(worker_request(repo))
    replies = []
    for i in range(3):
        r = session.call({"op": "write", "name": f"w{i}.txt", "text": f"window {i}"}, timeout=30)
        assert r.status is SandboxStatus.OK, r.detail
        assert r.outputs == {f"w{i}.txt": f"window {i}".encode()}  # the previous window's file is gone
        replies.append(json.loads(r.stdout))
    assert len({rep["pid"] for rep in replies}) == 1  # one worker process served every call
    assert [rep["files"] for rep in replies] == [["w0.txt"], ["w1.txt"], ["w2.txt"]]
    (created,) = standin.created
    assert created["metadata"]["labels"]["evalrunner.dev/role"] == "session"
    assert [c for _, c, _ in standin.execs] == ["collector"] * 3
    assert b.sandbox_counts() == {"cold_pods": 0, "session_pods": 1, "session_calls": 3, "env_build_pods": 0}
    session.close()
    assert standin.deleted == [created["metadata"]["name"]] and not standin.pods
    assert _gone_within(replies[0]["pid"], 10.0)  # the exec'd worker went with its pod
    closed = session.call({"op": "ping"}, timeout=5)
    assert closed.status is SandboxStatus.CRASHED and "closed" in closed.detail


def test_a_worker_that_exits_before_replying_crashes_the_session_and_its_pod_goes(standin, tmp_path, repo):
    b = backend(standin, tmp_path)
    session = b.open_session(worker_request(repo))
    assert session.call({"op": "ping"}, timeout=30).status is SandboxStatus.OK
    r = session.call({"op": "exit"}, timeout=30)
    assert r.status is SandboxStatus.CRASHED
    assert "exited with code 9" in r.detail and "dying" in r.stderr_tail
    assert not standin.pods  # deleted at once, not at close
    assert session.call({"op": "ping"}, timeout=5).status is SandboxStatus.CRASHED


def test_a_call_without_a_reply_in_time_is_a_timeout_and_deletes_the_pod(standin, tmp_path, repo):
    b = backend(standin, tmp_path, collect_slack_seconds=30)
    session = b.open_session(worker_request(repo))
    import json

    worker = json.loads(session.call({"op": "ping"}, timeout=30).stdout)["pid"]
    r = session.call({"op": "hang"}, timeout=1)
    assert r.status is SandboxStatus.TIMEOUT and "no reply within 1s" in r.detail
    assert not standin.pods
    # The worker runs in a session of its own; a deleted pod takes it along, as on a node.
    assert _gone_within(worker, 10.0)


@pytest.mark.slow
def test_cancelling_a_call_deletes_the_session_pod(standin, tmp_path, repo):
    b = backend(standin, tmp_path)
    session = b.open_session(worker_request(repo))
    cancel = threading.Event()
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", session.call({"op": "hang"}, timeout=600, cancel=cancel)))
    t.start()
    while not standin.execs:
        threading.Event().wait(0.02)
    cancel.set()
    t.join(timeout=30)
    assert out["r"].status is SandboxStatus.CANCELLED
    assert not standin.pods


def test_a_session_whose_image_cannot_be_pulled_fails_to_open_with_the_cause(standin, tmp_path, repo):
    standin.bad_images.add(IMAGE)
    with pytest.raises(KubernetesSandboxError, match="image pull failed"):
        backend(standin, tmp_path, image_pull_timeout_seconds=0.5).open_session(worker_request(repo))
    assert standin.deleted and not standin.pods


def test_sessions_refuse_channels_like_single_runs(standin, tmp_path, repo):
    request = worker_request(repo, channels=(Channel(socket_path=str(tmp_path / "gw.sock"), port=8787),))
    with pytest.raises(KubernetesSandboxError, match="channels .* not supported by the kubernetes backend"):
        backend(standin, tmp_path).open_session(request)
    assert not standin.created


@pytest.mark.slow
def test_warm_pool_runs_successive_inspect_windows_in_one_pod_and_retain_kills_it(standin, tmp_path):
    """The real Inspect worker (``_inspect_worker serve``) in a session pod, driven by the warm
    pool the comparison driver uses: two windows of one (commit, task), one pod."""
    from evalrunner_assets.execution.warm_pool import WarmPool
    from lake.layout import Window
    from tests.helpers.git_repos import commit_files
    from tests.helpers.tiny_tasks import TASKS, cfg

    root = tmp_path / "tiny"
    from evalrunner_assets.execution.repo import RepoSource

    sha = commit_files(root / "repo", {"evals/tasks.py": TASKS, "agent.yaml": "name: tiny\n"})
    export = RepoSource("acme/tiny", str(root / "repo")).export(sha, root / "export")
    b = backend(standin, tmp_path)
    pool = WarmPool(max_sessions=2)
    assert pool.supports(b)
    c = cfg("tiny")
    runs = []
    for w in (Window(0, 4), Window(4, 8)):
        with pool.session(b, export, c) as runner:
            runs.append(runner.run_window(w))
    assert all(r.ok for r in runs), [r.failure_cause for r in runs]
    assert [len(r.sample_ids) for r in runs] == [4, 4] and set(runs[0].sample_ids).isdisjoint(runs[1].sample_ids)
    assert len(standin.created) == 1 and pool.started == 1
    assert b.sandbox_counts()["cold_pods"] == 0 and b.sandbox_counts()["session_pods"] == 1
    assert pool.retain([]) == 1  # the task was decided: its session goes
    pool.close_all()  # waits for the background close
    assert not standin.pods


@pytest.mark.slow
def test_a_comparison_on_kubernetes_runs_warm_session_pods_and_reports_the_pod_counts(standin, tmp_path):
    """The comparison driver with the kubernetes backend (stand-in API): each (commit, task)
    gets one session pod that lists its ids and runs all its windows; the comparison document's
    execution section says how many pods of each kind it started."""
    import dagster as dg

    from evalrunner_assets.driver.comparison import run_comparison
    from evalrunner_assets.example_repo import build_example_repo
    from resources import GitHubResource, LakeResource, RepoResource, SandboxResource
    from tests.helpers.pipeline_fixtures import evalrunner_home, request_for

    example = build_example_repo(tmp_path / "support-agent")
    kubeconfig = standin.write_kubeconfig(tmp_path / "kubeconfig")
    with (
        evalrunner_home(tmp_path / "home") as home,
        dg.DagsterInstance.local_temp(tempdir=str(tmp_path / "home" / "dagster")) as instance,
    ):
        resources = {
            "lake": LakeResource(root=str(home.lake_root)),
            "sandbox": SandboxResource(
                backend_name="kubernetes", k8s_image=IMAGE, k8s_kubeconfig=str(kubeconfig), max_workers=2
            ),
            "repos": RepoResource(cache_dir=str(home.root / "repos"), export_dir=str(home.root / "exports")),
            "github": GitHubResource(),
        }
        request = request_for(example, "improve-runbook", "7", max_tasks=1, cap=48, min_pairs=4)
        result = run_comparison(request, instance=instance, resources=resources)
    execution = result.execution
    sandboxes = execution["sandboxes"]
    print(f"\nexecution: {execution}")
    session_pods = [c for c in standin.created if c["metadata"]["labels"]["evalrunner.dev/role"] == "session"]
    per_commit_task = [
        (c["metadata"]["annotations"]["evalrunner.dev/commit"], c["metadata"]["annotations"]["evalrunner.dev/task"])
        for c in session_pods
    ]
    assert len(per_commit_task) == len(set(per_commit_task))  # never a second pod for one (commit, task)
    assert {commit for commit, _ in per_commit_task} == {request.base_sha, request.head_sha}
    landed = execution["windows"]["landed"]
    assert landed >= 4  # at least two windows per arm, all in the pods that listed the ids
    assert sandboxes == {
        "cold_pods": len(standin.created) - len(session_pods),  # the .evals/list runs
        "session_pods": len(session_pods),
        "session_calls": 2 * len(session_pods) + landed,  # ping + ids per pod, one call per window
        "env_build_pods": 0,  # the example repository declares no dependencies
    }
    assert not standin.pods  # every pod deleted when the comparison ended
