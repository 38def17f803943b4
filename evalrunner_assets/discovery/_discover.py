"""Discovery: run the repository's ``.evals/list`` in a sandbox and validate its manifest.

``.evals/list`` is untrusted code, so it runs in the sandbox like everything else from the
repository; its stdout is the manifest. Without ``.evals/list`` the repository's Inspect
``@task``s are listed instead (Inspect's own listing, also in the sandbox) and the result says
so (``source == "inspect-list"``). A repository with neither gets :class:`NoEvalsFound`.
"""

from __future__ import annotations

import json
import re
import stat
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from evalrunner_assets.discovery._errors import (
    LIST_PATH,
    DiscoverySandboxFailure,
    InspectListFailed,
    ListFailed,
    ListKilled,
    ListNotExecutable,
    ListNotRegularFile,
    ListOutputTooLarge,
    ListTimeout,
    NoEvalsFound,
)
from evalrunner_assets.discovery._manifest import Manifest, parse_manifest_bytes, validate_manifest
from evalrunner_assets.execution.sandbox import (
    SANDBOX_REPO_DIR,
    Limits,
    RepoExport,
    SandboxBackend,
    SandboxRequest,
    SandboxResult,
    SandboxStatus,
)

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_OUTPUT_CAP = 1024 * 1024
FALLBACK_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class DiscoveryResult:
    """A validated manifest and where it came from."""

    manifest: Manifest
    source: Literal["evals-list", "inspect-list"]
    repo: str
    commit: str
    tree_digest: str
    duration_s: float
    stderr_tail: str = ""


def _discovery_limits(limits: Limits | None, timeout: float, output_cap: int) -> Limits:
    base = limits or Limits()
    return replace(
        base,
        wall_seconds=timeout,
        stdout_bytes=output_cap,
        output_bytes=min(base.output_bytes, output_cap),
        output_files=4,
    )


def _raise_for_sandbox(result: SandboxResult, what: str, timeout: float) -> None:
    if result.status is SandboxStatus.TIMEOUT:
        raise ListTimeout(f"{what} did not finish within {timeout:g}s and was killed")
    if result.status is SandboxStatus.KILLED:
        raise ListKilled(f"{what} was killed: {result.detail}")
    if result.status in (SandboxStatus.CRASHED, SandboxStatus.CANCELLED):
        raise DiscoverySandboxFailure(f"sandbox failed while running {what}: {result.detail}")


def discover(
    backend: SandboxBackend,
    export: RepoExport,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    output_cap: int = DEFAULT_OUTPUT_CAP,
    limits: Limits | None = None,
    cancel: threading.Event | None = None,
    python_env: str | None = None,
) -> DiscoveryResult:
    """Discover the evals of ``export`` (one commit) by running code in ``backend``
    (with the commit's built environment ``python_env`` mounted, when it has one)."""
    path = Path(export.path) / LIST_PATH
    try:
        st = path.lstat()
    except FileNotFoundError:
        return _discover_inspect(backend, export, limits=limits, cancel=cancel, python_env=python_env)
    if not stat.S_ISREG(st.st_mode):
        raise ListNotRegularFile(
            f"{LIST_PATH} in {export.repo}@{export.commit[:12]} is not a regular file "
            "(symlinks and directories are refused); make it an executable file"
        )
    if not st.st_mode & 0o111:
        raise ListNotExecutable(
            f"{LIST_PATH} in {export.repo}@{export.commit[:12]} is not executable; "
            f"run `chmod +x {LIST_PATH}` and commit the mode change"
        )
    with open(path, "rb") as f:
        first_line = f.readline(4096)
    _check_interpreter_line(first_line, export)
    request = SandboxRequest(
        argv=(f"{SANDBOX_REPO_DIR}/{LIST_PATH}",),
        export=export,
        limits=_discovery_limits(limits, timeout, output_cap),
        python_env=python_env,
        labels={"repo": export.repo, "commit": export.commit, "step": "discovery"},
    )
    result = backend.run(request, cancel=cancel)
    if result.status is SandboxStatus.CRASHED and "execvp" in result.detail:
        # The program could not be started at all: its #! line names an interpreter the
        # sandbox does not have (bubblewrap's execvp fails) — the repository's, not an outage.
        first = first_line[:200].strip().decode("utf-8", "replace")
        raise ListNotExecutable(
            f"{LIST_PATH} in {export.repo}@{export.commit[:12]} could not be started ({first!r}: "
            f"{result.detail.rsplit(':', 1)[-1].strip()}); its first line must name an interpreter the "
            "sandbox has, e.g. #!/bin/sh or #!/usr/bin/env python3"
        )
    _raise_for_sandbox(result, LIST_PATH, timeout)
    if result.status is SandboxStatus.EXIT_NONZERO:
        tail = result.stderr_tail[-2000:]
        raise ListFailed(
            f"{LIST_PATH} exited with code {result.exit_code}; stderr ends: {tail.strip()[-500:] or '(empty)'}",
            exit_code=result.exit_code,
            stderr_tail=tail,
        )
    if result.stdout_truncated:
        raise ListOutputTooLarge(f"{LIST_PATH} printed more than the {output_cap}-byte cap")
    manifest = parse_manifest_bytes(result.stdout, source=LIST_PATH)
    return DiscoveryResult(
        manifest=manifest,
        source="evals-list",
        repo=export.repo,
        commit=export.commit,
        tree_digest=export.tree_digest,
        duration_s=result.duration_s,
        stderr_tail=result.stderr_tail[-2000:],
    )


def _check_interpreter_line(first: bytes, export: RepoExport) -> None:
    """A ``#!`` line ending in CR (a file saved with Windows line endings) names an interpreter
    that cannot exist (``/bin/sh\\r``): the sandbox could not even start the program, which
    would read as an infrastructure fault. Said here, as the repository's mistake it is."""
    if first.startswith(b"#!") and first.rstrip(b"\n").endswith(b"\r"):
        interpreter = first[2:].strip().decode("utf-8", "replace")
        raise ListNotExecutable(
            f"{LIST_PATH} in {export.repo}@{export.commit[:12]} has Windows (CRLF) line endings: its first "
            f"line asks for the interpreter {interpreter + chr(13)!r}, which does not exist; convert it to LF "
            f"line endings (`sed -i 's/\\r$//' {LIST_PATH}`) and commit"
        )


_UNSAFE = re.compile(r"[^a-z0-9_.-]+")


def _safe_segment(text: str) -> str:
    seg = _UNSAFE.sub("_", text.lower()).strip(".")
    return seg or "_"


def task_id_for(file: str, name: str) -> str:
    """A path-safe task id for an Inspect task found by listing: ``<file without .py>/<name>``."""
    stem = file[:-3] if file.endswith(".py") else file
    parts = [_safe_segment(p) for p in stem.split("/") if p not in ("", ".")]
    return "/".join(parts + [_safe_segment(name)])


def _discover_inspect(
    backend: SandboxBackend,
    export: RepoExport,
    *,
    limits: Limits | None,
    cancel: threading.Event | None,
    python_env: str | None = None,
) -> DiscoveryResult:
    what = "Inspect's task listing"
    request = SandboxRequest(
        argv=("python", "-m", "evalrunner_assets.discovery._inspect_list"),
        export=export,
        limits=_discovery_limits(limits, FALLBACK_TIMEOUT_S, DEFAULT_OUTPUT_CAP),
        python_env=python_env,
        labels={"repo": export.repo, "commit": export.commit, "step": "discovery"},
    )
    result = backend.run(request, cancel=cancel)
    _raise_for_sandbox(result, what, FALLBACK_TIMEOUT_S)
    if result.status is SandboxStatus.EXIT_NONZERO:
        raise InspectListFailed(
            f"{what} failed (exit {result.exit_code}): {result.stderr_tail.strip()[-500:]}", result.stderr_tail[-2000:]
        )
    raw = result.outputs.get("tasks.json")
    if raw is None:
        why = result.rejected_outputs.get("tasks.json", "never written")
        raise InspectListFailed(f"{what} wrote no task list ({why})", result.stderr_tail[-2000:])
    try:
        rows = json.loads(raw)
        found = [(str(r["file"]), str(r["name"])) for r in rows]
    except (ValueError, TypeError, KeyError) as exc:
        raise InspectListFailed(f"{what} wrote an unreadable task list: {exc}") from None
    if not found:
        raise NoEvalsFound(
            f"{export.repo}@{export.commit[:12]} has no {LIST_PATH} and no Inspect @task in any "
            f"Python file; add an executable {LIST_PATH} printing a manifest, or define @task functions"
        )
    tasks, seen = [], set()
    for file, name in sorted(found):
        tid = task_id_for(file, name)
        n = 2
        base = tid
        while tid in seen:
            tid, n = f"{base}-{n}", n + 1
        seen.add(tid)
        tasks.append({"id": tid, "spec": f"{file}@{name}", "workdir": "."})
    manifest = validate_manifest({"version": 1, "images": [], "tasks": tasks}, source="inspect-list")
    return DiscoveryResult(
        manifest=manifest,
        source="inspect-list",
        repo=export.repo,
        commit=export.commit,
        tree_digest=export.tree_digest,
        duration_s=result.duration_s,
        stderr_tail=result.stderr_tail[-2000:],
    )


__all__ = ["DiscoveryResult", "discover", "task_id_for"]
