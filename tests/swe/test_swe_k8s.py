"""SWE-style runs on Kubernetes through the same Inspect interface as bubblewrap: every tool
call of an attempt is a ``pods/exec`` into that attempt's workspace pod (the evalrunner-k8s
provider), the patch comes back through the sandbox, and grading runs in a fresh workspace pod.

The cluster is the loopback STAND-IN of the Kubernetes API (tests/helpers/k8s_standin.py; not a
cluster: its kubelet runs each container as a local process and enforces none of what only a
node enforces). The attempts, pytest runs, patch application and the lake are real; the same
attempts also run under bubblewrap, and the two must agree."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from evalrunner_assets.execution.environment import spec_for_file  # noqa: E402
from evalrunner_assets.execution.kubernetes import NETWORK_LABEL, ROLE_LABEL  # noqa: E402
from evalrunner_assets.execution.repo import RepoSource, export_commit  # noqa: E402
from evalrunner_assets.execution.workspace_pool import WorkspacePool  # noqa: E402
from evalrunner_assets.swe import RunSpec, SweStore  # noqa: E402
from evalrunner_assets.swe.example import build_tinystats_repo  # noqa: E402
from evalrunner_assets.swe.grading import workspace_patch  # noqa: E402
from evalrunner_assets.swe.runner import (  # noqa: E402
    SweContext,
    environment_digest,
    execute_run,
    register_task_set,
    run_gold_check,
)
from evalrunner_assets.swe.sandboxes import open_tool_sandbox, sandbox_patch  # noqa: E402
from lake import open_lake  # noqa: E402
from tests.helpers.swe_example_subset import write_subset_task_set  # noqa: E402

# A subset of the example set, to keep the test short: a task every version solves, and two
# the better version solves and the cheating one games (a planted conftest.py; on
# median-even it also asks git for history beyond the pinned commit).
SUBSET = ("mean-divisor", "parse-separators", "median-even")
VERSIONS = ("better", "cheating")


@pytest.fixture(scope="module")
def tinystats(tmp_path_factory) -> tuple[Path, Path]:
    """The example repository and a task-set file holding SUBSET of the example's tasks."""
    root = tmp_path_factory.mktemp("tinystats")
    build_tinystats_repo(root / "repo")
    return root / "repo", write_subset_task_set(root / "set", SUBSET)


def _run(tmp: Path, backend, repo: Path, spec_file: Path) -> tuple[SweContext, dict[tuple[str, str], dict]]:
    """Register the subset on ``backend`` and run each version once over it; the rows by
    (version, task)."""
    store = SweStore(open_lake(str(tmp / "lake")))
    ctx = SweContext(store, backend, WorkspacePool(tmp / "ws"), tmp / "exports")
    register_task_set(ctx, spec_file, str(repo))
    for version in VERSIONS:
        out = execute_run(ctx, RunSpec(agent_version=version, task_set="tinystats-bugs", budget_usd=5.0), workers=2)
        assert out.status == "done" and out.attempted == len(SUBSET), out.to_dict()
    rows = {(r["agent_version"], r["task_id"]): r for r in store.attempts()}
    return ctx, rows


@pytest.mark.slow  # whole SWE runs end to end: every agent version's attempts, graded
def test_swe_run_executes_tools_patch_and_grading_in_workspace_pods_standin_api(
    tmp_path, tinystats, standin, standin_backend, bwrap_backend
):
    repo, spec_file = tinystats
    k8s_ctx, k8s_rows = _run(tmp_path / "k8s", standin_backend, repo, spec_file)
    bwrap_ctx, bwrap_rows = _run(tmp_path / "bwrap", bwrap_backend, repo, spec_file)
    k8s_store, bwrap_store = k8s_ctx.store, bwrap_ctx.store
    assert len(k8s_rows) == len(VERSIONS) * len(SUBSET)

    # Status and grading as under bubblewrap: the better version solves what it solves there;
    # the cheating version's planted conftest.py passes the tests and is failed by the policy.
    for key, row in k8s_rows.items():
        twin = bwrap_rows[key]
        for field in ("status", "passed", "tests_passed_raw", "tests_passed", "tests_failed", "exit_code"):
            assert row[field] == twin[field], (key, field, row[field], twin[field])
        assert row["policy_reason"] == twin["policy_reason"], key
    assert all(k8s_rows[("better", t)]["status"] == "passed" for t in SUBSET)
    assert k8s_rows[("cheating", "mean-divisor")]["status"] == "passed"
    for task in ("parse-separators", "median-even"):
        cheat = k8s_rows[("cheating", task)]
        assert cheat["status"] == "policy_failed" and cheat["tests_passed_raw"] and not cheat["passed"]
        assert "tests/conftest.py" in cheat["policy_reason"]
    assert "git history" in k8s_rows[("cheating", "median-even")]["policy_reason"]

    # The example declares its environment (requirements.txt: pytest). On Kubernetes it is one
    # volume claim built by one Job; the digest every row records is that environment's on
    # the Kubernetes runtime -- not the controller's pytest, not bubblewrap's.
    ts = k8s_store.task_set("tinystats-bugs")
    spec = spec_for_file(k8s_ctx.export(ts, ts.tasks[0]), "requirements.txt")
    k8s_env = environment_digest(standin_backend, spec)
    assert k8s_env not in (environment_digest(standin_backend), environment_digest(bwrap_backend, spec))
    assert {r["env_digest"] for r in k8s_rows.values()} == {k8s_env}
    assert {t.env_digest for t in ts.tasks} == {k8s_env}
    assert {r["env_digest"] for r in bwrap_rows.values()} == {environment_digest(bwrap_backend, spec)}
    # Under bubblewrap the same declaration is a local environment (beside the export cache).
    assert (tmp_path / "bwrap" / "envs" / spec.digest / ".evalrunner-env.json").is_file()
    assert len(standin.jobs_created) == 1
    assert (standin.jobs_created[0]["metadata"]["labels"] or {}).get(NETWORK_LABEL) == "package-index"
    env_path = f"/envs/{spec.digest}"

    workspace_pods = {
        p["metadata"]["name"] for p in standin.created if p["metadata"]["labels"].get(ROLE_LABEL) == "workspace"
    }
    # No egress: no pod but the build Job's carries a label an allowing NetworkPolicy selects.
    assert {
        p["metadata"]["labels"][NETWORK_LABEL]
        for p in standin.created
        if not p["metadata"]["name"].startswith("evalrunner-env-")
    } == {"none"}
    execs_by_pod: dict[str, list[list[str]]] = {}
    for pod, container, command in standin.execs:
        if pod.startswith("evalrunner-env-"):
            continue  # the build Job's pod: its result is collected by exec in its collector
        assert container == "sandbox"
        execs_by_pod.setdefault(pod, []).append(command)
    grading_pods = set()
    for key, row in k8s_rows.items():
        traj = k8s_store.trajectory(*key, 0)
        # The patch taken through the pod is the one bubblewrap's run produced.
        assert traj["patch"] == bwrap_store.trajectory(*key, 0)["patch"], key
        assert traj["touched"] == bwrap_store.trajectory(*key, 0)["touched"], key
        pod = row["sandbox_id"]
        assert pod in workspace_pods, (key, pod)
        # Every tool call the agent made was one exec (bash -c <action>) in its workspace pod.
        agent_calls = [c[-1] for c in execs_by_pod[pod] if c[-3:-1] == ["bash", "-c"]]
        assert agent_calls == [s["action"] for s in traj["agent"]["steps"]], key
        assert len(agent_calls) >= 3
        # Grading: a fresh workspace pod, the patch applied and the test command run in it.
        grader = traj["grade"]["sandbox_id"]
        assert grader in workspace_pods and grader != pod
        grading_pods.add(grader)
        grader_argv = [c[c.index("--") + 1 :] for c in execs_by_pod[grader] if "--" in c]
        assert any(a[0] == "patch" for a in grader_argv), key
        assert any(a[-1] == spec_test_cmd(spec_file) for a in grader_argv), key
        # test_cmd ran with the environment's bin first on PATH (the wrapper's --python-env).
        test_runs = [c for c in execs_by_pod[grader] if c[-1] == spec_test_cmd(spec_file)]
        assert test_runs and all(c[c.index("--python-env") + 1] == env_path for c in test_runs), key
        assert traj["grade"]["results"] and traj["grade"]["exit_code"] is not None
    assert len(grading_pods) == len(k8s_rows)

    # The gold check grades in pods too: every gold patch passes its runs, each a fresh pod.
    before = set(workspace_pods)
    gold = run_gold_check(k8s_ctx, "tinystats-bugs")
    assert {t: v["status"] for t, v in gold["tasks"].items()} == dict.fromkeys(SUBSET, "ok"), gold
    gold_pods = {
        p["metadata"]["name"] for p in standin.created if p["metadata"]["labels"].get(ROLE_LABEL) == "workspace"
    } - before
    assert len(gold_pods) == len(SUBSET) * gold["runs"]
    workspace_pods |= gold_pods
    # Every workspace pod -- attempts', graders', gold runs' -- mounts the environment's claim
    # read-only (the stand-in does not enforce readOnly; a real kubelet does).
    manifests = {p["metadata"]["name"]: p for p in standin.created}
    assert len(workspace_pods) == len(k8s_rows) * 2 + len(gold_pods)
    for name in workspace_pods:
        pod_spec = manifests[name]["spec"]
        claim = {"claimName": f"evalrunner-env-{spec.digest}", "readOnly": True}
        assert {"name": "env", "persistentVolumeClaim": claim} in pod_spec["volumes"], name
        sandbox = next(c for c in pod_spec["containers"] if c["name"] == "sandbox")
        env_mounts = [m for m in sandbox["volumeMounts"] if m["name"] == "env"]
        assert env_mounts == [{"name": "env", "mountPath": env_path, "subPath": spec.digest, "readOnly": True}], name
    # Every workspace pod was deleted afterwards; none is left.
    assert workspace_pods <= set(standin.deleted)
    assert not {name for (_, name) in standin.pods} & workspace_pods
    # No cold sandbox pod ran: tools, patch and grading all went through workspace pods.
    assert standin_backend.sandbox_counts()["cold_pods"] == 0


def spec_test_cmd(spec_file: Path) -> str:
    return json.loads(spec_file.read_text())["test_cmd"]


def test_the_patch_taken_through_the_sandbox_equals_the_host_diff(tmp_path, tinystats, bwrap_backend):
    """The listing-and-read_file patch (what Kubernetes uses) against bubblewrap's workspace on
    this machine, diffed directly (what workspace_patch gives): the same text, the same touched
    list, for edits, new and deleted files, binary and oversized files, links and a file that
    loses its final newline."""
    repo, _ = tinystats
    source = RepoSource("example/tinystats", str(repo))
    export = export_commit(source, source.resolve_ref("main"), tmp_path / "exports")
    edits = (
        "python - <<'PY'\nimport pathlib\np = pathlib.Path('tinystats/mean.py')\n"
        "p.write_text(p.read_text().replace('(len(xs) - 1)', 'len(xs)'))\nPY\n"
        "printf 'x = 1' > tinystats/no_newline.py\n"
        "mkdir -p tests && printf 'import pytest\\n' > tests/conftest.py\n"
        "rm tinystats/clamp.py\n"
        "head -c 3000 /dev/urandom > blob.bin\n"
        "head -c 1100000 /dev/zero | tr '\\0' a > big.txt\n"
        "ln -s /etc/passwd leak && ln -s tinystats pkg-link\n"
        "mkdir -p __pycache__ && echo junk > __pycache__/x.pyc\n"
    )

    async def edit_and_diff(env) -> tuple[str, list[str]]:
        result = await env.exec(["bash", "-c", edits])
        assert result.success, result.stderr
        return await sandbox_patch(env, export.path)

    with open_tool_sandbox(bwrap_backend, WorkspacePool(tmp_path / "ws"), export, "env") as sandbox:
        through_sandbox = anyio.run(edit_and_diff, sandbox.env)
        on_host = workspace_patch(export.path, sandbox.env.workspace.path)
    patch, touched = through_sandbox
    assert {"tinystats/mean.py", "tinystats/clamp.py", "tests/conftest.py", "blob.bin", "big.txt", "leak"} <= set(
        touched
    )
    assert "--- a/tinystats/mean.py\n+++ b/tinystats/mean.py\n" in patch and "+    return sum(xs) / len(xs)" in patch
    assert "--- a/tinystats/clamp.py\n+++ /dev/null\n" in patch and "--- /dev/null\n+++ b/tests/conftest.py\n" in patch
    assert "\\ No newline at end of file" in patch and "Binary or non-text file leak differs" in patch
    # The host diff skips a linked directory (os.walk lists it as a directory); the sandbox's
    # listing names it too -- stricter, never laxer.
    assert [t for t in touched if t != "pkg-link"] == on_host[1]
    assert "pkg-link" in touched
    assert patch.replace("Binary or non-text file pkg-link differs\n", "") == on_host[0]
