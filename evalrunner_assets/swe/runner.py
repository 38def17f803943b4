"""Register task sets, check gold patches, and execute runs (agent version × task set × samples).

Plain Python; the Dagster assets and the run API call these. Each attempt:

1. skipped if its row (agent version, task, sample index) exists — a retry adds nothing;
2. stopped before it starts if the run's budget is spent (it lands no row; a resubmission with
   a larger budget runs it);
3. the agent loop (:func:`~evalrunner_assets.swe.agent.run_agent`: the version's model called
   through Inspect's model API, its ``bash`` tool calls run in the sandbox) runs against a fresh
   tool sandbox holding the task repo at its pinned commit,
   through Inspect's ``SandboxEnvironment`` interface: the bubblewrap provider, or on a
   ``KubernetesBackend`` the evalrunner-k8s provider (one workspace pod per attempt, leased
   from the context's pool of prepared pods), with the task's declared repository
   environment (built once per digest) mounted read-only
   (:func:`~evalrunner_assets.swe.sandboxes.open_tool_sandbox`); its patch is taken through
   the same sandbox (a listing of the workspace, the changed files read back) before it closes;
4. the cheat policy checks the patch and the trajectory;
5. the hidden tests grade the patch in a fresh sandbox (a new workspace pod on Kubernetes;
   tests dropped as flaky by the latest gold check are left out);
6. the trajectory document (with the digest of the attempt as an Inspect ``.eval`` log, stored
   as a blob: :mod:`~evalrunner_assets.swe.inspect_log`), then the row, land in the lake.

Attempts run on ``workers`` threads; every model call is booked against the run's shared
budget before it is made (:class:`RunBudget`), so the run never spends more than its budget.
"""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from inspect_ai.util import SandboxEnvironment

from evalrunner_assets.execution import digest_of
from evalrunner_assets.execution.environment import (
    ENVS_DIR_ENV,
    EnvironmentBuildError,
    EnvironmentStore,
    EnvSpec,
    runtime_with_env,
    spec_for_file,
)
from evalrunner_assets.execution.repo import RepoSource, export_commit
from evalrunner_assets.execution.sandbox import RepoExport, SandboxBackend
from evalrunner_assets.execution.workspace_pool import WorkspacePool
from evalrunner_assets.swe import flakes, policy
from evalrunner_assets.swe.agent import AgentOutcome, AgentVersion, agent_definition, attempt_seed, run_agent
from evalrunner_assets.swe.grading import Grade, grade_patch
from evalrunner_assets.swe.inspect_log import attempt_eval_log
from evalrunner_assets.swe.model import GOLD_RUNS_MIN, RunSpec, SweError, SweTask, TaskSet, TaskSetSpec, attempt_id
from evalrunner_assets.swe.sandboxes import open_tool_sandbox, provider_for, sandbox_patch
from evalrunner_assets.swe.store import SweStore, now_iso

if TYPE_CHECKING:
    from evalrunner_assets.execution.kubernetes.workspace_pool import KubernetesWorkspacePool


def environment_digest(backend: SandboxBackend, env: EnvSpec | None = None) -> str:
    """The pinned environment of a task, pinned at registration and checked per attempt: the
    sandbox runtime (backend, Python, inspect-ai, evalrunner; on Kubernetes the sandbox image)
    and what the tests run with. With a declared repository environment, that environment's
    digest (its dependency file, Python, platform and evalrunner's distributions: the
    environment every sandbox of the task mounts). Without one, on bubblewrap the test runner
    is the controller's own pytest, so its version; on Kubernetes it is whatever the sandbox
    image holds, which the image digest (in the runtime digest) already pins."""
    if env is not None:
        return runtime_with_env(backend.runtime_digest(), env.digest)
    if provider_for(backend) == "evalrunner-k8s":
        return digest_of({"runtime": backend.runtime_digest()})
    try:
        pytest_version = metadata.version("pytest")
    except metadata.PackageNotFoundError:
        pytest_version = "absent"
    return digest_of({"runtime": backend.runtime_digest(), "pytest": pytest_version})


def load_agent(version: str) -> AgentVersion:
    """The agent version as the agent definition file (``$EVALRUNNER_SWE_AGENT`` or the
    example's) defines it; ``SweError`` when it is not there or not valid."""
    return AgentVersion.load(agent_definition(), version)


@dataclass(frozen=True)
class TaskEnvironment:
    """The environment a task's sandboxes run with: the digest attempt rows record, and the
    built environment's path its sandboxes mount read-only (a local directory under
    bubblewrap, ``/envs/<digest>`` -- its volume claim -- on Kubernetes; None: none declared)."""

    digest: str
    python_env: str | None = None


@dataclass
class SweContext:
    """What a run needs: the lake, a sandbox backend, the workspace pool (of workspaces on
    this machine, or of workspace pods on Kubernetes), an export cache, and the repository
    environments (default: ``envs`` beside the export cache)."""

    store: SweStore
    backend: SandboxBackend
    pool: WorkspacePool | KubernetesWorkspacePool
    export_root: Path
    envs: EnvironmentStore | None = None

    def close(self) -> None:
        """Delete the pool's ready pods (Kubernetes); a local pool is the process's, kept."""
        if not isinstance(self.pool, WorkspacePool):
            self.pool.close()

    def export(self, task_set: TaskSet, task: SweTask) -> RepoExport:
        return export_commit(RepoSource(task_set.repo, task_set.repo_source), task.commit, self.export_root)

    def environment(self, task: SweTask, export: RepoExport) -> TaskEnvironment:
        """The task's environment, built (once per digest) unless it exists: on Kubernetes a
        volume claim built by a Job, under bubblewrap a local directory. Raises
        :class:`SweError` naming the task when it cannot be built."""
        if not task.env_source:
            return TaskEnvironment(environment_digest(self.backend))
        if self.envs is None:
            self.envs = EnvironmentStore(self.export_root.parent / "envs", lake=self.store.lake)
        try:
            spec = spec_for_file(export, task.env_source)
            built = self.envs.ensure(self.backend, export, spec)
        except (EnvironmentBuildError, OSError) as exc:
            raise SweError(f"task {task.id!r}: environment {task.env_source!r} cannot be built: {exc}") from exc
        return TaskEnvironment(environment_digest(self.backend, spec), built.path)


# -- registration ---------------------------------------------------------------------------
def register_task_set(ctx: SweContext, spec_file: Path, repo_source: str) -> tuple[TaskSet, bool]:
    """Read a task-set file, pin every task (commit, environment digest), store hidden tests and
    gold patches as blobs and the set in the lake. Returns the set and whether it was new."""
    try:
        spec = TaskSetSpec.model_validate_json(spec_file.read_text())
    except OSError as exc:
        raise SweError(f"task-set file {str(spec_file)!r} cannot be read: {exc}") from exc
    except ValueError as exc:
        raise SweError(f"task-set file {str(spec_file)!r} is not valid: {exc}") from exc
    base = spec_file.parent
    source = RepoSource(spec.repo, repo_source)
    env_source = spec.environment.requirements if spec.environment else None
    tasks = []
    for t in spec.tasks:
        commit = source.resolve_ref(t.ref or spec.ref)
        env = environment_digest(ctx.backend)
        if env_source is not None:
            # The digest is the declared file's at this commit (read from its export; built later).
            try:
                env_spec = spec_for_file(export_commit(source, commit, ctx.export_root), env_source)
            except (EnvironmentBuildError, OSError) as exc:
                raise SweError(f"task {t.id!r}: environment {env_source!r} at {commit[:12]}: {exc}") from exc
            env = environment_digest(ctx.backend, env_spec)
        hidden_dir = base / t.hidden_tests
        if not hidden_dir.is_dir():
            raise SweError(f"task {t.id!r}: hidden tests {t.hidden_tests!r} is not a directory under {base}")
        bundle = {
            p.relative_to(hidden_dir).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(hidden_dir.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts
        }
        if not bundle:
            raise SweError(f"task {t.id!r}: hidden tests directory {t.hidden_tests!r} is empty")
        gold = base / t.gold_patch
        if not gold.is_file():
            raise SweError(f"task {t.id!r}: gold patch {t.gold_patch!r} is not a file under {base}")
        tasks.append(
            SweTask(
                id=t.id,
                task_set=spec.name,
                repo=spec.repo,
                commit=commit,
                env_digest=env,
                env_source=env_source,
                test_cmd=spec.test_cmd,
                problem=t.problem,
                hidden_tests_ref=ctx.store.put_blob(json.dumps(bundle, sort_keys=True).encode()),
                hidden_paths=sorted(bundle),
                gold_patch_ref=ctx.store.put_blob(gold.read_bytes()),
                fail_to_pass=t.fail_to_pass,
                pass_to_pass=t.pass_to_pass,
            )
        )
    ts = TaskSet(
        name=spec.name,
        description=spec.description,
        repo=spec.repo,
        repo_source=str(Path(repo_source).resolve()) if os.path.exists(repo_source) else repo_source,
        registered_at=now_iso(),
        tasks=tasks,
    )
    created = ctx.store.save_task_set(ts)
    return ctx.store.task_set(spec.name), created


# -- gold checks ----------------------------------------------------------------------------
def run_gold_check(ctx: SweContext, task_set: str, runs: int = GOLD_RUNS_MIN) -> dict[str, Any]:
    """Run every gold patch ``runs`` times; store per-test flake rates and the verdicts."""
    ts = ctx.store.task_set(task_set)

    envs: dict[str, TaskEnvironment] = {}  # per task, for its runs (gold runs are sequential)

    def grade_gold(task: SweTask) -> Grade:
        export = ctx.export(ts, task)
        if task.id not in envs:
            envs[task.id] = ctx.environment(task, export)
        return grade_patch(
            ctx.backend,
            ctx.pool,
            export,
            task,
            ctx.store.blob(task.gold_patch_ref).decode(),
            ctx.store.hidden_files(task.hidden_tests_ref),
            python_env=envs[task.id].python_env,
        )

    summary = flakes.gold_check(ts.tasks, grade_gold, runs)
    checked_at = now_iso()
    summary.update(task_set=ts.name, checked_at=checked_at)
    rows = [
        {"task_set": ts.name, "task_id": tid, "checked_at": checked_at, **test}
        for tid, verdict in summary["tasks"].items()
        for test in verdict["tests"]
    ]
    ctx.store.save_gold(ts.name, summary, rows)
    return summary


# -- runs -----------------------------------------------------------------------------------
@dataclass
class RunOutcome:
    run_id: str
    attempted: int = 0
    reused: int = 0
    budget_stopped: list[str] = field(default_factory=list)
    spent_usd: float = 0.0
    statuses: dict[str, int] = field(default_factory=dict)

    @property
    def status(self) -> str:
        return "budget_spent" if self.budget_stopped else "done"

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": self.status,
            "attempted": self.attempted,
            "reused": self.reused,
            "budget_stopped": self.budget_stopped,
            "spent_usd": round(self.spent_usd, 6),
            "statuses": self.statuses,
        }


class RunBudget:
    """A run's dollars, shared by its workers: every model call is booked (reserved) before it
    is made and settled to its reported usage after, so the run never spends more than its
    budget, whatever the number of workers (as long as a call costs no more than its
    reservation; see ``agent.run_agent``)."""

    def __init__(self, limit_usd: float) -> None:
        self.limit = limit_usd
        self.spent = 0.0
        self.exhausted = False
        self._lock = threading.Lock()

    def reserve(self, amount: float) -> bool:
        with self._lock:
            if self.spent + amount > self.limit:
                self.exhausted = True
                return False
            self.spent += amount
            return True

    def settle(self, reserved: float, actual: float) -> None:
        with self._lock:
            self.spent += actual - reserved


def execute_run(ctx: SweContext, spec: RunSpec, workers: int = 1) -> RunOutcome:
    """Every missing attempt of ``spec``, within its budget (see the module docstring), on
    ``workers`` threads; results are folded in submission order."""
    run_id = spec.run_id()
    ts = ctx.store.task_set(spec.task_set)
    agent = load_agent(spec.agent_version)
    gold = ctx.store.gold(ts.name) or {}
    dropped: dict[str, list[str]] = gold.get("dropped_tests", {})
    out = RunOutcome(run_id)
    budget = RunBudget(spec.budget_usd)
    todo: list[tuple[SweTask, int, RepoExport]] = []
    envs: dict[str, TaskEnvironment] = {}
    for task in ts.tasks:
        export = ctx.export(ts, task)
        missing = [i for i in range(spec.samples) if not ctx.store.attempt_exists(spec.agent_version, task.id, i)]
        out.reused += spec.samples - len(missing)
        if missing:  # the environment is built (or found) before any attempt of the task starts
            envs[task.id] = ctx.environment(task, export)
            todo += [(task, idx, export) for idx in missing]

    def one(task: SweTask, idx: int, export: RepoExport) -> dict[str, Any] | None:
        if budget.exhausted:
            return None
        return _attempt(ctx, spec, run_id, task, idx, export, agent, dropped.get(task.id, []), envs[task.id], budget)

    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="swe-attempt") as pool:
        futures = [pool.submit(one, *item) for item in todo]
        for (task, idx, _), future in zip(todo, futures):
            row = future.result()
            if row is None:
                out.budget_stopped.append(f"{task.id}/{idx}")
                continue
            out.attempted += 1
            out.statuses[row["status"]] = out.statuses.get(row["status"], 0) + 1
    out.spent_usd = budget.spent
    return out


def _attempt(
    ctx: SweContext,
    spec: RunSpec,
    run_id: str,
    task: SweTask,
    idx: int,
    export: RepoExport,
    agent: AgentVersion,
    dropped: list[str],
    env_now: TaskEnvironment,
    budget: RunBudget,
) -> dict[str, Any] | None:
    row: dict[str, Any] = {
        "id": attempt_id(spec.agent_version, task.id, idx),
        "run_id": run_id,
        "agent_version": spec.agent_version,
        "task_set": task.task_set,
        "task_id": task.id,
        "sample_idx": idx,
        "repo": task.repo,
        "commit": task.commit,
        "env_digest": task.env_digest,
        "prompt_version": spec.prompt_version,
        "seed": spec.seed,
        "created_at": now_iso(),
        "steps": 0,
        "cost_usd": 0.0,
        "passed": False,
        "tests_passed_raw": False,
        "tests_passed": 0,
        "tests_failed": 0,
    }
    trajectory: dict[str, Any] = {"task": task.model_dump(exclude={"hidden_tests_ref", "gold_patch_ref"})}
    if task.env_digest != env_now.digest:
        row.update(
            status="error", reason=f"environment changed: task pinned {task.env_digest}, sandbox has {env_now.digest}"
        )
        ctx.store.write_attempt(row, trajectory)
        return row
    seed = attempt_seed(spec.seed, spec.agent_version, task.id, idx)

    async def drive(env: SandboxEnvironment) -> tuple[AgentOutcome, str, list[str]]:
        outcome = await run_agent(
            agent, task, env, seed, max_steps=spec.max_steps, step_timeout_s=spec.step_timeout_s, budget=budget
        )
        if outcome.stop_reason == "budget":
            return outcome, "", []  # the attempt lands no row
        patch, touched = await sandbox_patch(env, export.path)
        return outcome, patch, touched

    # A sandbox that fails (SandboxUnavailableError, WorkspaceListingError) fails the run and
    # lands no row, so a resubmission attempts it again.
    with open_tool_sandbox(
        ctx.backend, ctx.pool, export, task.env_digest, python_env=env_now.python_env, labels={"task": task.id}
    ) as sandbox:
        agent_sandbox = sandbox.sandbox_id
        outcome, patch, touched = anyio.run(drive, sandbox.env)
    if outcome.stop_reason == "budget":
        return None
    reasons = policy.check_patch(touched, task.hidden_paths, patch) + policy.check_trajectory(
        outcome.commands(), task.hidden_paths
    )
    grade = grade_patch(
        ctx.backend,
        ctx.pool,
        export,
        task,
        patch,
        ctx.store.hidden_files(task.hidden_tests_ref),
        dropped,
        python_env=env_now.python_env,
    )
    if grade.status == "invalid":
        status = "invalid"
    elif reasons:
        status = "policy_failed"
    else:
        status = grade.status
    ok, failed = grade.counts()
    row.update(
        status=status,
        passed=status == "passed",
        tests_passed_raw=grade.passed,
        tests_passed=ok,
        tests_failed=failed,
        exit_code=grade.exit_code,
        reason=grade.reason,
        policy_reason="; ".join(reasons) or None,
        sandbox_id=agent_sandbox,
        cost_usd=round(outcome.cost_usd, 8),
        steps=len(outcome.steps),
    )
    trajectory.update(
        agent=outcome.to_dict(),
        patch=patch,
        touched=touched,
        policy=reasons,
        grade={
            "status": grade.status,
            "reason": grade.reason,
            "exit_code": grade.exit_code,
            "results": grade.results,
            "dropped_tests": dropped,
            "sandbox_id": grade.sandbox_id,
        },
    )
    trajectory["inspect_log"] = ctx.store.put_blob(attempt_eval_log(task, row, outcome, row["created_at"], now_iso()))
    ctx.store.write_attempt(row, trajectory)
    return row


_POOLS: dict[str, WorkspacePool] = {}


def process_pool(root: Path) -> WorkspacePool:
    """The process's workspace pool under ``root`` (one per root, kept across runs)."""
    key = str(root.resolve()) if root.exists() else str(root)
    if key not in _POOLS:
        _POOLS[key] = WorkspacePool(root / f"pid-{os.getpid()}")
    return _POOLS[key]


def local_context(store: SweStore, backend: SandboxBackend, home_dir: Path) -> SweContext:
    """A context whose exports, workspaces and repository environments (``$EVALRUNNER_ENVS``
    when set) live under the evalrunner home. On Kubernetes its pool is a new pool of
    workspace pods, which :meth:`SweContext.close` deletes (call it when the run ends)."""
    envs = EnvironmentStore(os.environ.get(ENVS_DIR_ENV) or home_dir / "envs", lake=store.lake)
    pool: WorkspacePool | KubernetesWorkspacePool
    if provider_for(backend) == "evalrunner-k8s":
        from evalrunner_assets.execution.kubernetes import KubernetesBackend
        from evalrunner_assets.execution.kubernetes.workspace_pool import KubernetesWorkspacePool

        assert isinstance(backend, KubernetesBackend)
        pool = KubernetesWorkspacePool(backend)
    else:
        pool = process_pool(home_dir / "swe-workspaces")
    return SweContext(store, backend, pool, home_dir / "exports", envs)
