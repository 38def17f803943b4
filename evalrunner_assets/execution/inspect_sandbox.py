"""An Inspect ``SandboxEnvironment`` provider over bubblewrap: ``sandbox="bubblewrap"``.

Inspect tasks that ask for a tool sandbox run locally without Docker. Each sample gets a
writable workspace — a fresh copy of one commit's export, leased from a
:class:`~evalrunner_assets.execution.workspace_pool.WorkspacePool` keyed by environment digest —
and every ``exec`` is one bubblewrap sandbox over it: the workspace bound writable at
``/work/repo`` (the working directory), the Python environment read-only, no network, no
credentials, the usual limits. Processes do not outlive their ``exec`` (no background servers
between calls); files written under ``/work/repo`` and ``/tmp`` persist for the sample (``/tmp``
is a throwaway directory of the sample's own: Inspect writes a sample's ``setup`` script there
and runs it in the next call). ``read_file``/``write_file`` reach those two places only.

Configuration (``sandbox=("bubblewrap", config)``): a :class:`BubblewrapSandboxConfig`, a dict
of its fields, or the path of a JSON file holding them. A sample's metadata may name its own
export instead (``evalrunner_export``, ``evalrunner_commit``, ``evalrunner_repo``) — a task set
with one repository state per sample. Without either, the sample gets an empty workspace.

The backend and pool are process-wide (:func:`configure` replaces them, e.g. in tests or a
runner with its own lake home). On Kubernetes the same Inspect interface is the provider
``sandbox="evalrunner-k8s"`` (``kubernetes/inspect_sandbox.py``): one long-lived pod per sample.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Literal, overload

import anyio
from inspect_ai.util import (
    ExecResult,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxUnavailableError,
    SandboxUserUnsupportedError,
    sandboxenv,
)
from pydantic import BaseModel, ConfigDict, Field

from evalrunner_assets.execution.sandbox import (
    SANDBOX_REPO_DIR,
    Limits,
    NetworkPolicy,
    RepoExport,
    SandboxBackend,
    SandboxRequest,
    SandboxStatus,
)
from evalrunner_assets.execution.workspace_pool import Workspace, WorkspacePool

PROVIDER_NAME = "bubblewrap"
DEFAULT_EXEC_SECONDS = 120.0


class BubblewrapSandboxConfig(BaseModel):
    """Where a sample's workspace comes from and how long one command may run."""

    model_config = ConfigDict(frozen=True)  # Inspect hashes sandbox specs

    export_path: str | None = Field(default=None, description="host path of a read-only export of the commit (no .git)")
    repo: str = Field(default="local/workspace", description="repository id (owner/name)")
    commit: str = Field(default="0" * 40, description="the pinned commit the export holds")
    tree_digest: str = Field(default="", description="digest of the exported tree")
    env_digest: str = Field(default="", description="environment digest the pool keys ready workspaces by")
    python_env: str | None = Field(
        default=None,
        description="a built repository environment on this machine (EnvironmentStore): bound read-only, "
        "its bin first on PATH",
    )
    exec_seconds: float = Field(default=DEFAULT_EXEC_SECONDS, description="default wall-clock limit of one exec")
    memory_bytes: int = Field(default=2 * 1024**3, description="memory limit per process")


class _Runtime:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.backend: SandboxBackend | None = None
        self.pool: WorkspacePool | None = None

    def get(self) -> tuple[SandboxBackend, WorkspacePool]:
        with self.lock:
            if self.backend is None:
                from evalrunner_assets.execution.backends import make_backend

                self.backend = make_backend("bubblewrap")
            if self.pool is None:
                root = Path(tempfile.gettempdir()) / f"evalrunner-workspaces-{os.getpid()}"
                self.pool = WorkspacePool(root)
            return self.backend, self.pool


_RUNTIME = _Runtime()


def configure(backend: SandboxBackend | None = None, pool: WorkspacePool | None = None) -> None:
    """Replace the process-wide backend and/or workspace pool the provider uses."""
    with _RUNTIME.lock:
        if backend is not None:
            _RUNTIME.backend = backend
        if pool is not None:
            _RUNTIME.pool = pool


def runtime() -> tuple[SandboxBackend, WorkspacePool]:
    """The backend and workspace pool the provider uses (created on first use)."""
    return _RUNTIME.get()


def _config_of(config: SandboxEnvironmentConfigType | None, metadata: dict[str, Any]) -> BubblewrapSandboxConfig:
    if config is None:
        cfg = BubblewrapSandboxConfig()
    elif isinstance(config, BubblewrapSandboxConfig):
        cfg = config
    elif isinstance(config, BaseModel):
        cfg = BubblewrapSandboxConfig.model_validate(config.model_dump())
    elif isinstance(config, str):
        try:
            cfg = BubblewrapSandboxConfig.model_validate(json.loads(Path(config).read_text()))
        except (OSError, ValueError) as exc:
            raise ValueError(f"bubblewrap sandbox config {config!r} is not a readable JSON file: {exc}") from exc
    else:
        raise ValueError(f"bubblewrap sandbox config must be a model, dict or file path, got {type(config).__name__}")
    overrides = {
        field: metadata[key]
        for key, field in (
            ("evalrunner_export", "export_path"),
            ("evalrunner_repo", "repo"),
            ("evalrunner_commit", "commit"),
            ("evalrunner_env_digest", "env_digest"),
        )
        if key in metadata
    }
    return cfg.model_copy(update=overrides) if overrides else cfg


def workspace_relative(path: str) -> str:
    """``path`` (absolute under /work/repo, or relative to it) as a path inside the sample's
    workspace; raises PermissionError for anything outside it (shared by the Kubernetes provider)."""
    if os.path.isabs(path):
        norm = os.path.normpath(path)
        if norm == SANDBOX_REPO_DIR:
            return "."
        if not norm.startswith(SANDBOX_REPO_DIR + "/"):
            raise PermissionError(f"{path!r} is outside the sample's workspace ({SANDBOX_REPO_DIR})")
        path = norm[len(SANDBOX_REPO_DIR) + 1 :]
    norm = os.path.normpath(path)
    if norm == ".." or norm.startswith("../"):
        raise PermissionError(f"{path!r} leaves the sample's workspace")
    return norm


@sandboxenv(name=PROVIDER_NAME)
class BubblewrapSandboxEnvironment(SandboxEnvironment):
    """One sample's workspace; every command in its own bubblewrap sandbox over it."""

    def __init__(self, workspace: Workspace, backend: SandboxBackend, config: BubblewrapSandboxConfig) -> None:
        super().__init__()
        self.workspace = workspace
        self.backend = backend
        self.config = config
        self._stack = ExitStack()
        self.exec_count = 0
        self.tmp_dir: str | None = None  # the sample's /tmp (set by open)

    # -- lifecycle ---------------------------------------------------------------------------
    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return BubblewrapSandboxConfig(**config)

    @classmethod
    async def sample_init(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, metadata: dict[str, str]
    ) -> dict[str, SandboxEnvironment]:
        env = await anyio.to_thread.run_sync(cls.open, _config_of(config, dict(metadata or {})))
        return {"default": env}

    @classmethod
    def open(
        cls, cfg: BubblewrapSandboxConfig, backend: SandboxBackend | None = None, pool: WorkspacePool | None = None
    ) -> BubblewrapSandboxEnvironment:
        """Lease a workspace (blocking; queued when the pool is at its limit) and wrap it.
        ``backend``/``pool`` default to the process-wide ones (:func:`configure`)."""
        if backend is None or pool is None:
            default_backend, default_pool = runtime()
            backend, pool = backend or default_backend, pool or default_pool
        stack = ExitStack()
        if cfg.export_path is None:
            empty = Path(tempfile.mkdtemp(prefix=f"evalrunner-empty-{os.getpid()}-"))
            stack.callback(lambda: os.rmdir(empty) if empty.exists() else None)
            export = RepoExport(repo=cfg.repo, commit=cfg.commit, path=str(empty), tree_digest="")
        else:
            if not os.path.isdir(cfg.export_path):
                raise ValueError(f"bubblewrap sandbox export {cfg.export_path!r} is not a directory")
            export = RepoExport(repo=cfg.repo, commit=cfg.commit, path=cfg.export_path, tree_digest=cfg.tree_digest)
        workspace = stack.enter_context(pool.lease(export, cfg.env_digest))
        env = cls(workspace, backend, cfg)
        env.tmp_dir = tempfile.mkdtemp(prefix=f"evalrunner-sample-tmp-{os.getpid()}-")
        stack.callback(shutil.rmtree, env.tmp_dir, True)
        env._stack = stack
        return env

    def close(self) -> None:
        self._stack.close()

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        for environment in environments.values():
            await anyio.to_thread.run_sync(environment.as_type(BubblewrapSandboxEnvironment).close)

    # -- paths -------------------------------------------------------------------------------
    def _relative(self, path: str) -> str:
        return workspace_relative(path)

    def _host_path(self, file: str) -> str:
        """The workspace (or sample /tmp) file on this machine, refusing anything that resolves
        outside it (a symlink the sandboxed code planted must not make the controller read host
        files)."""
        norm = os.path.normpath(file) if os.path.isabs(file) else ""
        if self.tmp_dir is not None and (norm == "/tmp" or norm.startswith("/tmp/")):
            root = os.path.realpath(self.tmp_dir)
            relative = os.path.relpath(norm, "/tmp")
        else:
            root = os.path.realpath(self.workspace.path)
            relative = self._relative(file)
        host = os.path.realpath(os.path.join(root, relative))
        if host != root and not host.startswith(root + os.sep):
            raise PermissionError(f"{file!r} resolves outside the sample's workspace")
        return host

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
            raise SandboxUserUnsupportedError(f"the bubblewrap sandbox runs commands as one user, not {user!r}")
        if not cmd:
            raise ValueError("exec needs a command")
        wall = float(timeout) if timeout else self.config.exec_seconds
        request = SandboxRequest(
            argv=tuple(cmd),
            export=self.workspace.as_export(),
            workdir=self._relative(cwd) if cwd else ".",
            # The sandbox sets PATH itself (the Python environment's bin, then the system's);
            # Inspect's own commands (privileged_exec: a sample's setup, chmod, rm) ask for the
            # system PATH, which that one contains.
            env={k: v for k, v in (env or {}).items() if k != "PATH"},
            network=NetworkPolicy.NONE,
            limits=Limits(wall_seconds=wall, cpu_seconds=int(wall) + 5, memory_bytes=self.config.memory_bytes),
            stdin=input.encode() if isinstance(input, str) else input,
            labels={"repo": self.workspace.export.repo, "commit": self.workspace.export.commit},
            repo_writable=True,
            python_env=self.config.python_env,
            tmp_dir=self.tmp_dir,
        )
        result = await anyio.to_thread.run_sync(self.backend.run, request)
        self.exec_count += 1
        if result.status is SandboxStatus.TIMEOUT:
            raise TimeoutError(f"command timed out after {wall:.0f} s: {cmd[:3]}")
        if result.status is SandboxStatus.CRASHED:
            raise SandboxUnavailableError(result.detail or "the bubblewrap sandbox failed to start")
        code = result.exit_code if result.exit_code is not None else -1
        return ExecResult(
            success=code == 0,
            returncode=code,
            stdout=result.stdout.decode("utf-8", errors="replace"),
            stderr=result.stderr_tail,
        )

    async def write_file(self, file: str, contents: str | bytes) -> None:
        host = self._host_path(file)
        if os.path.isdir(host):
            raise IsADirectoryError(f"{file!r} is a directory")
        Path(host).parent.mkdir(parents=True, exist_ok=True)
        data = contents.encode("utf-8") if isinstance(contents, str) else contents
        tmp = f"{host}.tmp-{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, host)

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        host = self._host_path(file)
        if os.path.isdir(host):
            raise IsADirectoryError(f"{file!r} is a directory")
        with open(host, "rb") as f:
            data = f.read()
        return data.decode("utf-8") if text else data
