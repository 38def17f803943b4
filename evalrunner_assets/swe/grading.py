"""Hidden-test grading in a fresh sandbox, and the diff that is an attempt's patch.

After the agent stops, a clean checkout at the pinned commit (a new workspace, never the
agent's) gets the agent's patch — applied by ``patch`` inside a sandbox, as the patch is
untrusted — then the hidden tests, written by the controller over whatever is at their paths.
``test_cmd`` runs in a sandbox without network and must write JUnit XML to
``$EVALRUNNER_OUT/junit.xml``; the controller reads it after the sandbox exits.

A grade passes only when the exit code and the per-test results agree: every fail-to-pass and
pass-to-pass test (minus tests dropped as flaky) is present and passed, and the command exited
0 (or 1 with every non-passing test a dropped one). Standard output is never parsed, so a
program that prints "PASSED" passes nothing. No JUnit file, or one with no test cases, is
*invalid* (no sign the suite ran), not a failure of the agent; a skipped fail-to-pass test is
a failure.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalrunner_assets.execution.sandbox import (
    Limits,
    NetworkPolicy,
    RepoExport,
    SandboxBackend,
    SandboxRequest,
    SandboxStatus,
)
from evalrunner_assets.execution.workspace_pool import WorkspacePool
from evalrunner_assets.swe.diff import unified_chunk
from evalrunner_assets.swe.model import SweTask
from evalrunner_assets.swe.sandboxes import provider_for

if TYPE_CHECKING:
    from evalrunner_assets.execution.kubernetes.workspace_pool import KubernetesWorkspacePool

JUNIT_NAME = "junit.xml"
MAX_TEXT_FILE = 1024 * 1024


@dataclass
class Grade:
    status: str  # passed | failed | invalid
    reason: str
    exit_code: int | None
    results: dict[str, str] = field(default_factory=dict)  # test id -> passed|failed|error|skipped
    patch_applied: bool = True
    sandbox_id: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def counts(self) -> tuple[int, int]:
        ok = sum(1 for v in self.results.values() if v == "passed")
        return ok, len(self.results) - ok


# -- the patch of a workspace ---------------------------------------------------------------
def _files(root: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in ("__pycache__", ".pytest_cache", ".git")]
        for name in filenames:
            if name.endswith(".pyc"):
                continue
            p = Path(dirpath) / name
            out[p.relative_to(root).as_posix()] = p
    return out


def _text(path: Path | None) -> list[str] | None:
    if path is None:
        return []
    if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_TEXT_FILE:
        return None
    try:
        return path.read_text(encoding="utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def workspace_patch(clean: str, workspace: str) -> tuple[str, list[str]]:
    """The unified diff (-p1) from ``clean`` to ``workspace`` and every path it touches
    (binary, oversized or linked files are listed as touched with a note in the diff)."""
    before, after = _files(Path(clean)), _files(Path(workspace))
    chunks: list[str] = []
    touched: list[str] = []
    for rel in sorted(before.keys() | after.keys()):
        a, b = before.get(rel), after.get(rel)
        old, new = _text(a), _text(b)
        if old is not None and new is not None and old == new:
            continue
        if (
            a is not None
            and b is not None
            and not (a.is_symlink() or b.is_symlink())
            and a.is_file()
            and b.is_file()
            and a.read_bytes() == b.read_bytes()
        ):
            continue
        touched.append(rel)
        chunks.append(unified_chunk(rel, old, new, a is None, b is None))
    return "".join(chunks), touched


# -- JUnit ----------------------------------------------------------------------------------
def parse_junit(data: bytes) -> dict[str, str]:
    """Per-test outcomes from JUnit XML (pytest's): ``classname::name`` -> outcome."""
    root = ET.fromstring(data)
    results: dict[str, str] = {}
    for case in root.iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed" if child.tag == "failure" else "error"
                break
            if child.tag == "skipped":
                outcome = "skipped"
        # A test id that appears twice keeps its worst outcome.
        if results.get(test_id, "passed") == "passed":
            results[test_id] = outcome
    return results


def judge(
    task: SweTask, exit_code: int | None, results: dict[str, str], dropped: Iterable[str] = ()
) -> tuple[str, str]:
    """(status, reason) from the exit code and per-test results."""
    drop = set(dropped)
    if not results:
        return "invalid", f"no test results: the suite gave no sign it ran (exit {exit_code})"
    problems: list[str] = []
    for kind, tests in (("fail-to-pass", task.fail_to_pass), ("pass-to-pass", task.pass_to_pass)):
        for t in tests:
            if t in drop:
                continue
            outcome = results.get(t)
            if outcome is None:
                problems.append(f"{kind} test {t} did not run")
            elif outcome != "passed":
                problems.append(f"{kind} test {t} {outcome}")
    if problems:
        return "failed", "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else "")
    bad = sorted(t for t, o in results.items() if o in ("failed", "error") and t not in drop)
    if exit_code == 0 and not bad:
        return "passed", "all required tests passed and the test command exited 0"
    if exit_code == 1 and not bad and any(results.get(t) in ("failed", "error") for t in drop):
        return "passed", "all required tests passed; only tests dropped as flaky failed"
    if bad:
        return "failed", f"other tests failed: {', '.join(bad[:5])}"
    return "failed", f"the test command exited {exit_code} although its results show no failure"


# -- the grader -----------------------------------------------------------------------------
def _write_hidden(workspace: str, hidden: dict[str, bytes]) -> None:
    root = os.path.realpath(workspace)
    for rel, data in sorted(hidden.items()):
        target = os.path.join(root, rel)
        parent = os.path.realpath(os.path.dirname(target))
        if parent != root and not parent.startswith(root + os.sep):
            raise PermissionError(f"hidden test path {rel!r} resolves outside the checkout")
        if os.path.islink(target) or os.path.isdir(target):
            # Whatever the patch put at a hidden path is replaced, never followed.
            if os.path.isdir(target) and not os.path.islink(target):
                import shutil

                shutil.rmtree(target)
            else:
                os.unlink(target)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        tmp = f"{target}.tmp-{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, target)


def grade_patch(
    backend: SandboxBackend,
    pool: WorkspacePool | KubernetesWorkspacePool,
    export: RepoExport,
    task: SweTask,
    patch: str,
    hidden: dict[str, bytes],
    dropped: Iterable[str] = (),
    wall_seconds: float = 300.0,
    *,
    python_env: str | None = None,
) -> Grade:
    """Grade ``patch`` on a fresh checkout of ``export`` (see the module docstring), with the
    task's repository environment ``python_env`` mounted read-only when it has one. On a
    Kubernetes backend the checkout is a fresh workspace pod (:func:`grade_in_sandbox`)."""
    if provider_for(backend) == "evalrunner-k8s":
        return grade_in_sandbox(
            backend, pool, export, task, patch, hidden, dropped, wall_seconds, python_env=python_env
        )
    if not isinstance(pool, WorkspacePool):
        raise TypeError(
            f"grading on {getattr(backend, 'name', backend)!r} needs a WorkspacePool, got {type(pool).__name__}"
        )
    limits = Limits(wall_seconds=wall_seconds, cpu_seconds=int(wall_seconds) + 10, memory_bytes=2 * 1024**3)
    with pool.lease(export, task.env_digest) as ws:
        sandbox_id = os.path.basename(ws.path)
        if patch.strip():
            applied = backend.run(
                SandboxRequest(
                    argv=("patch", "-p1", "--batch", "--forward", "--no-backup-if-mismatch", "-s"),
                    export=ws.as_export(),
                    stdin=patch.encode(),
                    network=NetworkPolicy.NONE,
                    limits=Limits(wall_seconds=60, cpu_seconds=60),
                    repo_writable=True,
                    python_env=python_env,
                )
            )
            if applied.status is SandboxStatus.CRASHED:
                return Grade("invalid", f"the sandbox failed: {applied.detail}", None, sandbox_id=sandbox_id)
            if applied.exit_code != 0:
                out = (applied.stdout.decode(errors="replace") + applied.stderr_tail).strip()[-300:]
                return Grade(
                    "failed", f"the patch does not apply: {out}", None, patch_applied=False, sandbox_id=sandbox_id
                )
        try:
            _write_hidden(ws.path, hidden)
        except PermissionError as exc:  # the patch planted a link where the hidden tests go
            return Grade("failed", f"hidden tests cannot be added: {exc}", None, sandbox_id=sandbox_id)
        result = backend.run(
            SandboxRequest(
                argv=("bash", "-c", task.test_cmd),
                export=ws.as_export(),
                network=NetworkPolicy.NONE,
                limits=limits,
                repo_writable=True,
                labels={"task": task.id},
                python_env=python_env,
            )
        )
    if result.status is SandboxStatus.CRASHED:
        return Grade("invalid", f"the sandbox failed: {result.detail}", None, sandbox_id=sandbox_id)
    if result.status is SandboxStatus.TIMEOUT:
        return Grade("failed", f"the test command timed out after {wall_seconds:.0f} s", None, sandbox_id=sandbox_id)
    if result.status in (SandboxStatus.KILLED, SandboxStatus.CANCELLED):
        return Grade(
            "failed", f"the test command was {result.status.value}: {result.detail}", None, sandbox_id=sandbox_id
        )
    return _grade_report(task, result.exit_code, result.outputs.get(JUNIT_NAME), dropped, sandbox_id)


def _grade_report(
    task: SweTask, exit_code: int | None, junit: bytes | None, dropped: Iterable[str], sandbox_id: str
) -> Grade:
    results: dict[str, str] = {}
    if junit is not None:
        try:
            results = parse_junit(junit)
        except ET.ParseError as exc:
            return Grade("invalid", f"the JUnit report is not valid XML: {exc}", exit_code, sandbox_id=sandbox_id)
    status, reason = judge(task, exit_code, results, dropped)
    return Grade(status, reason, exit_code, results, sandbox_id=sandbox_id)


# -- the grader through the tool-sandbox interface (Kubernetes) -----------------------------
# Where the test command's $EVALRUNNER_OUT is: a workspace pod has no output volume, so a
# directory of the checkout, made afresh right before the command runs (after the patch).
GRADE_OUT_DIR = ".evalrunner-grade"
# Removes whatever is at the hidden tests' paths (never following a link) after checking each
# parent resolves inside the checkout; run with ``python -I`` (nothing in the checkout shadows
# its imports). Exit 3 and the reason on stderr when a path leaves the checkout.
_CLEAR_HIDDEN = r"""
import json, os, shutil, sys
root = os.path.realpath(".")
for rel in json.loads(sys.stdin.read()):
    target = os.path.join(root, rel)
    parent = os.path.realpath(os.path.dirname(target))
    if parent != root and not parent.startswith(root + os.sep):
        sys.stderr.write(f"hidden test path {rel!r} resolves outside the checkout")
        sys.exit(3)
    if os.path.isdir(target) and not os.path.islink(target):
        shutil.rmtree(target)
    elif os.path.lexists(target):
        os.unlink(target)
"""


def grade_in_sandbox(
    backend: SandboxBackend,
    pool: WorkspacePool | KubernetesWorkspacePool,
    export: RepoExport,
    task: SweTask,
    patch: str,
    hidden: dict[str, bytes],
    dropped: Iterable[str] = (),
    wall_seconds: float = 300.0,
    *,
    python_env: str | None = None,
) -> Grade:
    """Grade ``patch`` in a fresh tool sandbox (:func:`~evalrunner_assets.swe.sandboxes.open_tool_sandbox`:
    a new workspace pod on Kubernetes) holding a clean checkout of ``export``, through
    ``exec``/``read_file``/``write_file`` only: the patch applied by ``patch`` in the sandbox,
    the hidden tests written over whatever is at their paths, ``test_cmd`` run with
    ``$EVALRUNNER_OUT`` a fresh directory of the checkout, its JUnit report read back."""
    import anyio
    from inspect_ai.util import SandboxUnavailableError

    from evalrunner_assets.swe.sandboxes import open_tool_sandbox

    dropped = list(dropped)
    sandbox_id = ""
    try:
        with open_tool_sandbox(
            backend,
            pool,
            export,
            task.env_digest,
            python_env=python_env,
            exec_seconds=wall_seconds,
            labels={"task": task.id},
        ) as sb:
            sandbox_id = sb.sandbox_id
            return anyio.run(_grade_steps, sb.env, task, patch, hidden, dropped, wall_seconds, sandbox_id)
    except SandboxUnavailableError as exc:
        return Grade("invalid", f"the sandbox failed: {exc}", None, sandbox_id=sandbox_id)


async def _grade_steps(
    env: Any, task: SweTask, patch: str, hidden: dict[str, bytes], dropped: list[str], wall: float, sandbox_id: str
) -> Grade:
    if patch.strip():
        applied = await env.exec(
            ["patch", "-p1", "--batch", "--forward", "--no-backup-if-mismatch", "-s"], input=patch, timeout=60
        )
        if not applied.success:
            out = (applied.stdout + applied.stderr).strip()[-300:]
            return Grade("failed", f"the patch does not apply: {out}", None, patch_applied=False, sandbox_id=sandbox_id)
    cleared = await env.exec(["python", "-I", "-c", _CLEAR_HIDDEN], input=json.dumps(sorted(hidden)), timeout=60)
    if cleared.returncode == 3:  # the patch planted a link where the hidden tests go
        return Grade("failed", f"hidden tests cannot be added: {cleared.stderr.strip()}", None, sandbox_id=sandbox_id)
    if not cleared.success:
        return Grade(
            "invalid",
            f"the sandbox failed to clear the hidden-test paths: {cleared.stderr[-300:]}",
            None,
            sandbox_id=sandbox_id,
        )
    try:
        for rel, data in sorted(hidden.items()):
            await env.write_file(rel, data)
    except (PermissionError, IsADirectoryError) as exc:
        return Grade("failed", f"hidden tests cannot be added: {exc}", None, sandbox_id=sandbox_id)
    script = (
        f'rm -rf {GRADE_OUT_DIR} && mkdir {GRADE_OUT_DIR} && EVALRUNNER_OUT="$PWD/{GRADE_OUT_DIR}" exec bash -c "$0"'
    )
    try:
        result = await env.exec(["bash", "-c", script, task.test_cmd], timeout=max(1, int(wall)))
    except TimeoutError:
        return Grade("failed", f"the test command timed out after {wall:.0f} s", None, sandbox_id=sandbox_id)
    try:
        junit: bytes | None = await env.read_file(f"{GRADE_OUT_DIR}/{JUNIT_NAME}", text=False)
    except FileNotFoundError:
        junit = None
    except (PermissionError, IsADirectoryError) as exc:  # e.g. a link the test run planted there
        return Grade("invalid", f"the JUnit report cannot be read: {exc}", result.returncode, sandbox_id=sandbox_id)
    return _grade_report(task, result.returncode, junit, dropped, sandbox_id)
