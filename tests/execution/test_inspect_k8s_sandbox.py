"""The Kubernetes SandboxEnvironment provider (``sandbox="evalrunner-k8s"``), resolved by name
through Inspect's registry and driven by real in-process Inspect evals, against the loopback
STAND-IN of the Kubernetes API (tests/helpers/k8s_standin.py; not a cluster: its kubelet runs each
container as a local process and does not enforce what only a node enforces -- read-only
mounts, uids, seccomp, limits, network policy). The pod exec path, the delivery of the
workspace, the wrapper's timeout and process cleanup, and the pod lifecycle all run for real."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import inspect_ai
import pytest
from inspect_ai import Task
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import Score, Target, accuracy, scorer
from inspect_ai.solver import Generate, TaskState, solver, use_tools
from inspect_ai.tool import Tool, tool
from inspect_ai.util import sandbox

from evalrunner_assets.execution.kubernetes import (  # noqa: E402
    ROLE_LABEL,
    KubernetesBackend,
    KubernetesSandboxConfig,
    build_sandbox_pod,
)
from evalrunner_assets.execution.kubernetes import inspect_sandbox as inspect_k8s_sandbox  # noqa: E402
from evalrunner_assets.execution.kubernetes.inspect_sandbox import KubernetesInspectSandboxConfig  # noqa: E402
from evalrunner_assets.execution.kubernetes.workspace import (  # noqa: E402
    ControllerIdentity,
    KubernetesWorkspace,
)
from evalrunner_assets.execution.sandbox import Limits, RepoExport, SandboxRequest  # noqa: E402
from tests.helpers.k8s_checks import K8S_VERSION, psa_restricted_violations  # noqa: E402

IMAGE = "registry.example/evalrunner-sandbox@sha256:" + "1" * 64
BINARY = bytes(range(256)) * 3 + b"\r\n\x00 tail"


@pytest.fixture
def k8s_backend(standin, tmp_path):
    kubeconfig = standin.write_kubeconfig(tmp_path / "kubeconfig")
    backend = KubernetesBackend(
        KubernetesSandboxConfig(image=IMAGE, kubeconfig=str(kubeconfig), poll_interval_seconds=0.05)
    )
    inspect_k8s_sandbox.configure(backend)
    yield backend
    inspect_k8s_sandbox.configure(None)


@pytest.fixture
def export(tmp_path) -> Path:
    root = tmp_path / "export"
    (root / "pkg").mkdir(parents=True)
    (root / "README.md").write_text("pinned\n")
    (root / "pkg" / "mod.py").write_text("VALUE = 41\n")
    return root


@tool
def shell() -> Tool:
    async def execute(command: str) -> str:
        """Run a shell command in the sample's workspace.

        Args:
          command: the command line

        Returns:
          Its exit code and output.
        """
        result = await sandbox().exec(["sh", "-c", command])
        return f"exit={result.returncode}\n{result.stdout}{result.stderr}"

    return execute


def scripted_model():
    """An offline model (Inspect's mockllm) that calls the shell tool twice, then stops. Usage
    is set on each output: mockllm would count tokens with tiktoken, which downloads offline."""
    calls = [
        ModelOutput.for_tool_call("mockllm/model", "shell", {"command": "echo from-exec-1 > notes.txt; pwd"}),
        ModelOutput.for_tool_call("mockllm/model", "shell", {"command": "cat notes.txt; cat pkg/mod.py"}),
        ModelOutput.from_content("mockllm/model", "done"),
    ]
    for output in calls:
        output.usage = ModelUsage(input_tokens=10, output_tokens=5, total_tokens=15)
    return get_model("mockllm/model", custom_outputs=calls * 2)  # two samples, one script each


@solver
def probe_files_and_timeout():
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        sb = sandbox()
        facts: dict = {}
        await sb.write_file("bin/blob.dat", BINARY)
        facts["binary_roundtrip"] = await sb.read_file("/work/repo/bin/blob.dat", text=False) == BINARY
        seen = await sb.exec(["sh", "-c", "wc -c < blob.dat"], cwd="bin")
        facts["binary_size_in_pod"] = seen.stdout.strip()
        fed = await sb.exec(["sh", "-c", "cat > fed.txt; echo $GREETING"], input="stdin text", env={"GREETING": "hi"})
        facts["env"] = fed.stdout.strip()
        big = await sb.exec(["sh", "-c", "head -c 5000000 /dev/zero | tr '\\0' a; echo oops >&2; exit 3"])
        facts["big"] = [len(big.stdout), big.stderr, big.returncode]
        facts["stdin"] = await sb.read_file("fed.txt")
        for name, path in (("outside_abs", "/etc/hostname"), ("outside_rel", "../../etc/hostname")):
            try:
                await sb.read_file(path)
                facts[name] = "read"
            except PermissionError:
                facts[name] = "refused"
        try:
            await sb.write_file("/tmp/escape.txt", "x")
            facts["outside_write"] = "written"
        except PermissionError:
            facts["outside_write"] = "refused"
        # A symlink the sandboxed code planted must not lead file reads out of the workspace.
        await sb.exec(["ln", "-s", "/etc", "etc-link"])
        try:
            await sb.read_file("etc-link/hostname")
            facts["symlink_escape"] = "read"
        except PermissionError:
            facts["symlink_escape"] = "refused"
        try:
            await sb.read_file("missing.txt")
        except FileNotFoundError:
            facts["missing"] = "FileNotFoundError"
        # Over its timeout: TimeoutError, and the processes it started (even one that left its
        # session with setsid) are gone.
        try:
            await sb.exec(["sh", "-c", "setsid sleep 30 & echo $! > pid.txt; sleep 30"], timeout=1)
            facts["timeout"] = "returned"
        except TimeoutError:
            facts["timeout"] = "TimeoutError"
        pid = (await sb.read_file("pid.txt")).strip()
        alive = await sb.exec(["sh", "-c", f"test -e /proc/{pid} && echo alive || echo gone"])
        facts["timed_out_process"] = alive.stdout.strip()
        state.metadata["facts"] = facts
        return await generate(state)

    return solve


@scorer(metrics=[accuracy()])
def workspace_scorer():
    async def score(state: TaskState, target: Target) -> Score:
        tool_outputs = [m.text for m in state.messages if m.role == "tool"]
        return Score(value="C", metadata={"facts": state.metadata["facts"], "tool_outputs": tool_outputs})

    return score


@pytest.mark.slow
def test_inspect_eval_runs_tools_in_one_pod_per_sample_standin_api(tmp_path, standin, k8s_backend, export):
    # A workspace pod a crashed controller on this host left behind: its owner pid is gone.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    me = ControllerIdentity.current()
    left_behind = RepoExport(repo="acme/old", commit="b" * 40, path=str(export), tree_digest="")
    orphan = KubernetesWorkspace(
        k8s_backend, left_behind, limits=Limits(), owner=ControllerIdentity(me.host, me.pidns, dead.pid, "1")
    )
    # Pods of controllers on another host, or in another container (PID namespace) of this
    # one: not ours to judge (they may be alive); their deadline bounds them.
    elsewhere = KubernetesWorkspace(
        k8s_backend, left_behind, limits=Limits(), owner=ControllerIdentity("another-host", me.pidns, dead.pid, "1")
    )
    sibling = KubernetesWorkspace(
        k8s_backend, left_behind, limits=Limits(), owner=ControllerIdentity(me.host, "1", dead.pid, "1")
    )
    standin.created.clear()

    task = Task(
        dataset=[Sample(input="work", id="s1"), Sample(input="work", id="s2")],
        solver=[use_tools(shell()), probe_files_and_timeout()],
        scorer=workspace_scorer(),
        sandbox=("evalrunner-k8s", KubernetesInspectSandboxConfig(export_path=str(export), commit="1" * 40)),
    )
    # One sample at a time: the scripted model's outputs are one shared sequence.
    [log] = inspect_ai.eval(task, model=scripted_model(), log_dir=str(tmp_path / "logs"), display="none", max_samples=1)
    assert log.status == "success", log.error
    assert log.samples and len(log.samples) == 2
    for sample in log.samples:
        meta = sample.scores["workspace_scorer"].metadata
        facts, outputs = meta["facts"], meta["tool_outputs"]
        # The model's tool calls: the file the first exec wrote is there for the next one.
        assert outputs[0].startswith("exit=0\n"), outputs
        assert outputs[1] == "exit=0\nfrom-exec-1\nVALUE = 41\n", outputs
        assert facts["binary_roundtrip"] is True and facts["binary_size_in_pod"] == str(len(BINARY))
        assert facts["env"] == "hi" and facts["stdin"] == "stdin text"
        # Output limits as the bubblewrap provider's: the first Limits.stdout_bytes of stdout.
        assert facts["big"] == [Limits().stdout_bytes, "oops\n", 3]
        assert facts["outside_abs"] == facts["outside_rel"] == facts["outside_write"] == "refused"
        assert facts["symlink_escape"] == "refused" and facts["missing"] == "FileNotFoundError"
        assert facts["timeout"] == "TimeoutError" and facts["timed_out_process"] == "gone", facts

    # One pod per sample, every command an exec into it, each deleted at sample cleanup.
    pods = [p for p in standin.created if p["metadata"]["labels"].get(ROLE_LABEL) == "workspace"]
    names = {p["metadata"]["name"] for p in pods}
    assert len(pods) == 2
    assert names <= set(standin.deleted)
    execs = [e for e in standin.execs if e[0] in names]
    assert {e[1] for e in execs} == {"sandbox"} and len(execs) >= 2 * 13
    # task_init deleted the orphan; the other host's pod is still there.
    assert orphan.pod_name in standin.deleted
    assert sorted(name for (_, name) in standin.pods) == sorted([elsewhere.pod_name, sibling.pod_name])
    for workspace in (orphan, elsewhere, sibling):
        workspace.close()

    # The pod manifest: the sandbox builder's restricted settings, the workspace writable.
    pod = pods[0]
    spec = pod["spec"]
    assert pod["metadata"]["namespace"] == "evalrunner-sandbox"
    assert psa_restricted_violations(spec) == []
    assert spec["automountServiceAccountToken"] is False and spec["serviceAccountName"] == "evalrunner-sandbox"
    assert spec["activeDeadlineSeconds"] >= k8s_backend.config.session_max_seconds
    [container] = spec["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["args"][0] == "hold"
    repo_mount = next(m for m in container["volumeMounts"] if m["mountPath"] == "/work/repo")
    assert not repo_mount.get("readOnly")
    assert pod["metadata"]["labels"]["evalrunner.dev/task"]


def test_the_provider_is_found_through_the_inspect_ai_entry_point():
    # A fresh interpreter that imports nothing of ours: Inspect finds the name by entry point.
    code = (
        "from inspect_ai.util._sandbox.registry import registry_find_sandboxenv as find; "
        "print(find('evalrunner-k8s').__name__, find('bubblewrap').__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["KubernetesInspectSandboxEnvironment", "BubblewrapSandboxEnvironment"], out.stderr


def test_workspace_pod_mounts_a_named_environment_claim_read_only_and_validates():
    import kubernetes_validate

    request = SandboxRequest(
        argv=(),
        export=RepoExport(repo="acme/r", commit="c" * 40, path="/nonexistent", tree_digest=""),
        python_env="/envs/" + "d" * 16,
    )
    pod = build_sandbox_pod(request, KubernetesSandboxConfig(image=IMAGE), sandbox_id="x", workspace=True)
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    assert psa_restricted_violations(pod["spec"]) == []
    [claim] = [v for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert claim["persistentVolumeClaim"] == {"claimName": "evalrunner-env-" + "d" * 16, "readOnly": True}
    [container] = pod["spec"]["containers"]
    [env_mount] = [m for m in container["volumeMounts"] if m["name"] == claim["name"]]
    assert env_mount["readOnly"] is True and env_mount["mountPath"] == "/envs/" + "d" * 16
