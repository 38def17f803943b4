"""An Inspect ``SandboxEnvironment`` provider on Kubernetes: ``sandbox="evalrunner-k8s"``.

The Kubernetes counterpart of ``sandbox="bubblewrap"`` (``inspect_sandbox.py``), with the same
contract for the task: the sample's workspace is a writable copy of one commit's export at
``/work/repo`` (the working directory), no network, no credentials, every command under a wall
clock with capped output, files read and written only inside the workspace. It is a separate
provider, not a backend option of the bubblewrap one, because its lifecycle differs: a sample
holds ONE long-lived pod (:class:`~evalrunner_assets.execution.kubernetes.workspace.KubernetesWorkspace`)
built by the same pod builder as every sandbox pod (restricted security context, the sandbox
namespace, no service account token, ``activeDeadlineSeconds`` as the upper bound of its life),
and each ``exec``/``read_file``/``write_file`` is one ``pods/exec`` into it. ``sample_cleanup``
deletes the pod; ``task_init`` deletes workspace pods a crashed controller on this host left
behind (and any that already ended); ``task_cleanup`` deletes this process's remaining ones.

Configuration (``sandbox=("evalrunner-k8s", config)``): a :class:`KubernetesInspectSandboxConfig`,
a dict of its fields, or the path of a JSON file holding them. Sample metadata may name its own
export (``evalrunner_export``, ``evalrunner_commit``, ``evalrunner_repo``), as for bubblewrap.
The cluster: the process-wide backend set with :func:`configure` (tests, a runner that already
has one), else one built from the config's ``image``/``namespace``/``kubeconfig`` fields, falling
back to ``EVALRUNNER_SANDBOX_IMAGE``/``EVALRUNNER_SANDBOX_NAMESPACE`` (set by deploy/k8s) and the
in-cluster service account.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any, Literal, overload

import anyio
from inspect_ai.util import (
    ExecResult,
    OutputLimitExceededError,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxUnavailableError,
    SandboxUserUnsupportedError,
    sandboxenv,
)
from pydantic import BaseModel, ConfigDict, Field

from evalrunner_assets.execution.inspect_sandbox import DEFAULT_EXEC_SECONDS, workspace_relative
from evalrunner_assets.execution.kubernetes.backend import KubernetesBackend
from evalrunner_assets.execution.kubernetes.config import (
    KubernetesSandboxConfig,
    KubernetesSandboxError,
    env_mount_path,
)
from evalrunner_assets.execution.kubernetes.workspace import (
    KubernetesWorkspace,
    WorkspaceFileError,
    sweep_orphaned_workspaces,
)
from evalrunner_assets.execution.sandbox import Limits, RepoExport

PROVIDER_NAME = "evalrunner-k8s"


class KubernetesInspectSandboxConfig(BaseModel):
    """Where a sample's workspace comes from, its limits, and (optionally) which cluster."""

    model_config = ConfigDict(frozen=True)  # Inspect hashes sandbox specs: scalar fields only

    export_path: str | None = Field(default=None, description="host path of a read-only export of the commit (no .git)")
    repo: str = Field(default="local/workspace", description="repository id (owner/name)")
    commit: str = Field(default="0" * 40, description="the pinned commit the export holds")
    tree_digest: str = Field(default="", description="digest of the exported tree")
    environment_digest: str | None = Field(
        default=None,
        description="a repository environment built on the cluster (KubernetesBackend.ensure_environment): "
        "its claim is mounted read-only at /envs/<digest> and its bin comes first on PATH",
    )
    exec_seconds: float = Field(default=DEFAULT_EXEC_SECONDS, gt=0, description="default wall-clock limit of one exec")
    memory_bytes: int = Field(default=2 * 1024**3, gt=0, description="memory limit of the pod's sandbox container")
    max_file_bytes: int = Field(default=64 << 20, gt=0, description="largest file read_file/write_file move")
    image: str | None = Field(default=None, description="sandbox image (default: EVALRUNNER_SANDBOX_IMAGE)")
    namespace: str | None = Field(default=None, description="sandbox namespace (default: EVALRUNNER_SANDBOX_NAMESPACE)")
    kubeconfig: str | None = Field(default=None, description="kubeconfig file (default: in-cluster credentials)")


class _Runtime:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.backend: KubernetesBackend | None = None
        self.built: dict[tuple, KubernetesBackend] = {}
        self.open: set[KubernetesWorkspace] = set()


_RUNTIME = _Runtime()


def configure(backend: KubernetesBackend | None) -> None:
    """Set (or, with None, clear) the process-wide Kubernetes backend the provider uses."""
    with _RUNTIME.lock:
        _RUNTIME.backend = backend


def backend_for(cfg: KubernetesInspectSandboxConfig) -> KubernetesBackend:
    """The configured process-wide backend, else one per distinct cluster setting (cached)."""
    with _RUNTIME.lock:
        base = _RUNTIME.backend
        if base is None:
            image = cfg.image or os.environ.get("EVALRUNNER_SANDBOX_IMAGE", "")
            if not image:
                raise SandboxUnavailableError(
                    "the evalrunner-k8s sandbox needs an image: set the sandbox config's 'image' "
                    "or EVALRUNNER_SANDBOX_IMAGE (deploy/k8s sets it), or call execution.kubernetes.inspect_sandbox.configure(backend)"
                )
            fields: dict[str, Any] = {"image": image}
            namespace = cfg.namespace or os.environ.get("EVALRUNNER_SANDBOX_NAMESPACE")
            if namespace:
                fields["namespace"] = namespace
            if cfg.kubeconfig:
                fields["kubeconfig"] = cfg.kubeconfig
            key = tuple(sorted(fields.items()))
            base = _RUNTIME.built.get(key)
            if base is None:
                base = _RUNTIME.built[key] = KubernetesBackend(KubernetesSandboxConfig(**fields))
        return base


def _config_of(config: SandboxEnvironmentConfigType | None, metadata: dict[str, Any]) -> KubernetesInspectSandboxConfig:
    if config is None:
        cfg = KubernetesInspectSandboxConfig()
    elif isinstance(config, KubernetesInspectSandboxConfig):
        cfg = config
    elif isinstance(config, BaseModel):
        cfg = KubernetesInspectSandboxConfig.model_validate(config.model_dump())
    elif isinstance(config, str):
        try:
            cfg = KubernetesInspectSandboxConfig.model_validate(json.loads(Path(config).read_text()))
        except (OSError, ValueError) as exc:
            raise ValueError(f"evalrunner-k8s sandbox config {config!r} is not a readable JSON file: {exc}") from exc
    else:
        raise ValueError(
            f"evalrunner-k8s sandbox config must be a model, dict or file path, got {type(config).__name__}"
        )
    overrides = {
        field: metadata[key]
        for key, field in (
            ("evalrunner_export", "export_path"),
            ("evalrunner_repo", "repo"),
            ("evalrunner_commit", "commit"),
        )
        if key in metadata
    }
    return cfg.model_copy(update=overrides) if overrides else cfg


@sandboxenv(name=PROVIDER_NAME)
class KubernetesInspectSandboxEnvironment(SandboxEnvironment):
    """One sample's workspace pod; every command one exec into it."""

    def __init__(self, workspace: KubernetesWorkspace, config: KubernetesInspectSandboxConfig) -> None:
        super().__init__()
        self.workspace = workspace
        self.config = config
        self.exec_count = 0

    # -- lifecycle ---------------------------------------------------------------------------
    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return KubernetesInspectSandboxConfig(**config)

    @classmethod
    async def task_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None) -> None:
        backend = backend_for(_config_of(config, {}))
        try:
            await anyio.to_thread.run_sync(sweep_orphaned_workspaces, backend)
        except Exception as exc:
            raise SandboxUnavailableError(
                f"cannot list workspace pods in namespace {backend.config.namespace!r}: {exc}"
            ) from exc

    @classmethod
    async def sample_init(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, metadata: dict[str, str]
    ) -> dict[str, SandboxEnvironment]:
        cfg = _config_of(config, dict(metadata or {}))
        env = await anyio.to_thread.run_sync(functools.partial(cls.open, cfg, labels={"task": task_name}))
        return {"default": env}

    @classmethod
    def open(
        cls,
        cfg: KubernetesInspectSandboxConfig,
        backend: KubernetesBackend | None = None,
        labels: dict[str, str] | None = None,
    ) -> KubernetesInspectSandboxEnvironment:
        """Create the sample's pod and deliver its workspace (blocking)."""
        backend = backend or backend_for(cfg)
        empty: str | None = None
        if cfg.export_path is None:
            empty = tempfile.mkdtemp(prefix=f"evalrunner-empty-{os.getpid()}-")
            export = RepoExport(repo=cfg.repo, commit=cfg.commit, path=empty, tree_digest="")
        else:
            if not os.path.isdir(cfg.export_path):
                raise ValueError(f"evalrunner-k8s sandbox export {cfg.export_path!r} is not a directory")
            export = RepoExport(repo=cfg.repo, commit=cfg.commit, path=cfg.export_path, tree_digest=cfg.tree_digest)
        try:
            workspace = KubernetesWorkspace(
                backend,
                export,
                limits=Limits(wall_seconds=cfg.exec_seconds, memory_bytes=cfg.memory_bytes),
                python_env=env_mount_path(cfg.environment_digest) if cfg.environment_digest else None,
                labels=labels,
            )
        except KubernetesSandboxError as exc:
            raise SandboxUnavailableError(str(exc)) from exc
        finally:
            if empty is not None:
                shutil.rmtree(empty, ignore_errors=True)
        with _RUNTIME.lock:
            _RUNTIME.open.add(workspace)
        return cls(workspace, cfg)

    def close(self) -> None:
        """Delete the sample's pod."""
        with _RUNTIME.lock:
            _RUNTIME.open.discard(self.workspace)
        self.workspace.close()

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        for environment in environments.values():
            await anyio.to_thread.run_sync(environment.as_type(KubernetesInspectSandboxEnvironment).close)

    @classmethod
    async def task_cleanup(cls, task_name: str, config: SandboxEnvironmentConfigType | None, cleanup: bool) -> None:
        if not cleanup:
            return  # --no-sandbox-cleanup: the pods stay until their deadline
        with _RUNTIME.lock:
            left = list(_RUNTIME.open)
            _RUNTIME.open.clear()
        for workspace in left:
            await anyio.to_thread.run_sync(workspace.close)

    # -- the SandboxEnvironment API -----------------------------------------------------------
    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        if user not in (None, "root"):
            raise SandboxUserUnsupportedError(f"the evalrunner-k8s sandbox runs commands as one user, not {user!r}")
        if not cmd:
            raise ValueError("exec needs a command")
        wall = float(timeout) if timeout else self.config.exec_seconds
        run = functools.partial(
            self.workspace.exec,
            list(cmd),
            stdin=input.encode() if isinstance(input, str) else input,
            workdir=workspace_relative(cwd) if cwd else ".",
            env=dict(env or {}),
            timeout=wall,
        )
        try:
            result = await anyio.to_thread.run_sync(run)
        except KubernetesSandboxError as exc:
            raise SandboxUnavailableError(str(exc)) from exc
        self.exec_count += 1
        if result.status == "timeout":
            raise TimeoutError(f"command timed out after {wall:g} s: {cmd[:3]}")
        if result.status == "refused":
            raise PermissionError(result.detail)
        code = result.exit_code if result.exit_code is not None else -1
        return ExecResult(
            success=code == 0,
            returncode=code,
            stdout=result.stdout.decode("utf-8", errors="replace"),
            stderr=result.stderr_tail.decode("utf-8", errors="replace"),
        )

    async def write_file(self, file: str, contents: str | bytes) -> None:
        data = contents.encode("utf-8") if isinstance(contents, str) else contents
        run = functools.partial(self.workspace.write_file, workspace_relative(file), data, self.config.max_file_bytes)
        await self._file_op(file, run)

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        run = functools.partial(self.workspace.read_file, workspace_relative(file), self.config.max_file_bytes)
        data = await self._file_op(file, run)
        assert isinstance(data, bytes)
        return data.decode("utf-8") if text else data

    async def _file_op(self, file: str, run: Any) -> bytes | None:
        try:
            result: bytes | None = await anyio.to_thread.run_sync(run)
            return result
        except KubernetesSandboxError as exc:
            raise SandboxUnavailableError(str(exc)) from exc
        except WorkspaceFileError as exc:
            if exc.kind == "not-found":
                raise FileNotFoundError(str(exc)) from exc
            if exc.kind == "is-a-directory":
                raise IsADirectoryError(str(exc)) from exc
            if exc.kind == "outside":
                raise PermissionError(str(exc)) from exc
            if exc.kind == "too-large":
                raise OutputLimitExceededError(f"{self.config.max_file_bytes} bytes", None) from exc
            raise OSError(f"{file!r}: {exc}") from exc
