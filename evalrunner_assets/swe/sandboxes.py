"""An attempt's tool sandbox, through Inspect's ``SandboxEnvironment`` interface only.

:func:`open_tool_sandbox` is the one place that picks the provider by the run's backend: the
bubblewrap provider (``sandbox="bubblewrap"``: a workspace leased from the pool, one bubblewrap
sandbox per command) locally, the Kubernetes provider (``sandbox="evalrunner-k8s"``: one
workspace pod holding the export, leased from a ``KubernetesWorkspacePool`` when the context
has one, every command one ``pods/exec``) when the backend is a ``KubernetesBackend``. Everything else -- the agent's tool calls, the patch, grading -- uses
``exec``/``read_file``/``write_file``, so it runs the same on either.

:func:`sandbox_patch` is the attempt's patch taken through the sandbox: a listing of the
workspace (path, kind, size, SHA-256) made inside it, compared with the same listing of the
clean export on the controller, and every changed text file read back with ``read_file``. It
gives what :func:`~evalrunner_assets.swe.grading.workspace_patch` gives for a workspace on
this machine (the same diff, the same touched list: binary, oversized, linked or special files
are listed as touched with a note), so the cheat policy sees every file the agent touched.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from inspect_ai.util import SandboxEnvironment

from evalrunner_assets.errors import EvalrunnerError
from evalrunner_assets.execution.sandbox import RepoExport, SandboxBackend
from evalrunner_assets.execution.workspace_pool import WorkspacePool
from evalrunner_assets.swe.diff import unified_chunk

if TYPE_CHECKING:
    from evalrunner_assets.execution.kubernetes.workspace_pool import KubernetesWorkspacePool

MAX_TEXT_FILE = 1024 * 1024  # as grading.workspace_patch: larger files are "non-text"
LISTING_SECONDS = 120

# Run with ``python -I`` (no working directory or PYTHON* variables on the path) so nothing
# the agent left in the workspace shadows the modules it imports. Kinds: f regular file,
# l symlink, o anything else. Also run on the controller over the clean export (``_listing``).
_LISTING = r"""
import hashlib, json, os, stat, sys
def listing(root):
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", ".pytest_cache", ".git"))
        names = list(filenames) + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        for name in sorted(names):
            if name.endswith(".pyc"):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ["l", 0, hashlib.sha256(os.readlink(path).encode("utf-8", "surrogateescape")).hexdigest()]
            elif stat.S_ISREG(st.st_mode):
                h = hashlib.sha256()
                with open(path, "rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        h.update(block)
                out[rel] = ["f", st.st_size, h.hexdigest()]
            else:
                out[rel] = ["o", 0, ""]
    return out
if __name__ == "__main__":
    sys.stdout.write(json.dumps(listing(sys.argv[1] if len(sys.argv) > 1 else "."), sort_keys=True))
"""


class WorkspaceListingError(EvalrunnerError, RuntimeError):
    """The sandbox's listing of the workspace could not be taken or read."""


def _listing(root: str) -> dict[str, list[Any]]:
    scope: dict[str, Any] = {"__name__": "evalrunner_listing"}
    exec(compile(_LISTING, "<workspace listing>", "exec"), scope)
    result: dict[str, list[Any]] = scope["listing"](root)
    return result


@dataclass
class ToolSandbox:
    """An open tool sandbox: the Inspect environment, its id (a workspace or pod name) and the
    provider that made it."""

    env: SandboxEnvironment
    sandbox_id: str
    provider: str


def provider_for(backend: SandboxBackend) -> str:
    """The Inspect sandbox provider a run on ``backend`` uses for its tool sandboxes."""
    return "evalrunner-k8s" if getattr(backend, "name", "") == "kubernetes" else "bubblewrap"


@contextmanager
def open_tool_sandbox(
    backend: SandboxBackend,
    pool: WorkspacePool | KubernetesWorkspacePool,
    export: RepoExport,
    env_digest: str,
    *,
    python_env: str | None = None,
    exec_seconds: float = 120.0,
    labels: dict[str, str] | None = None,
) -> Iterator[ToolSandbox]:
    """A fresh sandbox holding ``export`` (the task repo at its pinned commit), no network;
    closed (its workspace returned, or its pod deleted) on exit. On Kubernetes with a
    :class:`~evalrunner_assets.execution.kubernetes.workspace_pool.KubernetesWorkspacePool` the
    pod is leased from it (a prepared one when ready), else started for this sandbox.
    ``python_env``: the task's
    built repository environment (:meth:`~evalrunner_assets.swe.runner.SweContext.environment`),
    mounted read-only with its ``bin`` first on ``PATH`` -- a local directory under
    bubblewrap, ``/envs/<digest>`` (its volume claim) on Kubernetes."""
    if provider_for(backend) == "evalrunner-k8s":
        # Imported here: the Kubernetes modules load only in processes that use that backend.
        from evalrunner_assets.execution.kubernetes import KubernetesBackend, env_digest_of
        from evalrunner_assets.execution.kubernetes.inspect_sandbox import (
            KubernetesInspectSandboxConfig,
            KubernetesInspectSandboxEnvironment,
        )
        from evalrunner_assets.execution.kubernetes.workspace_pool import KubernetesWorkspacePool

        assert isinstance(backend, KubernetesBackend)
        cfg = KubernetesInspectSandboxConfig(
            export_path=export.path,
            repo=export.repo,
            commit=export.commit,
            tree_digest=export.tree_digest,
            environment_digest=env_digest_of(python_env) if python_env else None,
            exec_seconds=exec_seconds,
        )
        if isinstance(pool, KubernetesWorkspacePool):
            from inspect_ai.util import SandboxUnavailableError

            from evalrunner_assets.execution.kubernetes import KubernetesSandboxError

            with ExitStack() as stack:
                try:
                    leased = stack.enter_context(pool.lease(export, env_digest, python_env=python_env))
                except KubernetesSandboxError as exc:
                    raise SandboxUnavailableError(str(exc)) from exc
                pod = leased.workspace
                yield ToolSandbox(KubernetesInspectSandboxEnvironment(pod, cfg), pod.pod_name, "evalrunner-k8s")
            return
        k8s = KubernetesInspectSandboxEnvironment.open(cfg, backend, labels=labels)
        try:
            yield ToolSandbox(k8s, k8s.workspace.pod_name, "evalrunner-k8s")
        finally:
            k8s.close()
        return
    from evalrunner_assets.execution.inspect_sandbox import BubblewrapSandboxConfig, BubblewrapSandboxEnvironment

    if not isinstance(pool, WorkspacePool):
        raise TypeError(
            f"a {getattr(backend, 'name', backend)!r} backend needs a WorkspacePool, got {type(pool).__name__}"
        )

    bwrap = BubblewrapSandboxEnvironment.open(
        BubblewrapSandboxConfig(
            export_path=export.path,
            repo=export.repo,
            commit=export.commit,
            tree_digest=export.tree_digest,
            env_digest=env_digest,
            python_env=python_env,
            exec_seconds=exec_seconds,
        ),
        backend,
        pool,
    )
    try:
        yield ToolSandbox(bwrap, os.path.basename(bwrap.workspace.path), "bubblewrap")
    finally:
        bwrap.close()


async def workspace_listing(env: SandboxEnvironment) -> dict[str, list[Any]]:
    """The workspace's files as the sandbox sees them: path -> [kind, size, sha256]."""
    result = await env.exec(["python", "-I", "-c", _LISTING, "."], timeout=LISTING_SECONDS)
    if not result.success:
        raise WorkspaceListingError(f"listing the workspace failed (exit {result.returncode}): {result.stderr[-300:]}")
    try:
        listing = json.loads(result.stdout)
    except ValueError as exc:
        raise WorkspaceListingError(f"the workspace listing is not JSON (truncated output?): {exc}") from exc
    if not isinstance(listing, dict) or not all(
        isinstance(v, list) and len(v) == 3 and v[0] in ("f", "l", "o") for v in listing.values()
    ):
        raise WorkspaceListingError("the workspace listing has an unexpected shape")
    return listing


def _lines(data: bytes) -> list[str] | None:
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


async def sandbox_patch(env: SandboxEnvironment, clean: str) -> tuple[str, list[str]]:
    """The unified diff (-p1) from the clean export at ``clean`` (on this machine) to the
    sandbox's workspace, and every path it touches (see the module docstring)."""
    before, after = _listing(clean), await workspace_listing(env)
    chunks: list[str] = []
    touched: list[str] = []
    for rel in sorted(before.keys() | after.keys()):
        a, b = before.get(rel), after.get(rel)
        if a is not None and b is not None and a[0] == b[0] == "f" and a[2] == b[2]:
            continue  # the same bytes
        touched.append(rel)

        def textual(entry: list[Any] | None) -> bool:
            return entry is None or (entry[0] == "f" and entry[1] <= MAX_TEXT_FILE)

        old: list[str] | None = []
        new: list[str] | None = []
        if not (textual(a) and textual(b)):
            old = new = None
        else:
            if a is not None:
                with open(os.path.join(clean, rel), "rb") as f:
                    old = _lines(f.read())
            if b is not None:
                new = _lines(await env.read_file(rel, text=False))
        chunks.append(unified_chunk(rel, old, new, a is None, b is None))
    return "".join(chunks), touched
