"""What the two local backends share: staging directories, runs, warm sessions, digests."""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import queue
import re
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from evalrunner_assets.errors import EvalrunnerError
from evalrunner_assets.execution._process import (
    Cgroup,
    LiveProcess,
    classify_exit,
    collect_outputs,
    count_own_processes,
    make_preexec,
    pid_alive,
)
from evalrunner_assets.execution.sandbox import (
    GATEWAY_ENV_NAMES,
    Limits,
    SandboxBackend,
    SandboxRequest,
    SandboxResult,
    SandboxStatus,
)

# Names that look like credentials are refused outright: nothing secret enters a sandbox.
_SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|SESSION_?KEY|AUTH)", re.I)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESERVED_ENV = ("PATH", "HOME", "TMPDIR", "EVALRUNNER_REPO", "EVALRUNNER_OUT", "PYTHONPATH")


class SandboxRequestError(EvalrunnerError, ValueError):
    """A request cannot be run as given (bad workdir, secret-looking env var, …)."""


def versions() -> dict[str, str]:
    def v(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "absent"

    return {
        "python": sys.version.split()[0],
        "implementation": sys.implementation.name,
        "inspect_ai": v("inspect-ai"),
        "evalrunner": v("evalrunner"),
    }


def digest_of(record: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]


def check_workdir(workdir: str) -> str:
    """A workdir relative to the export root, normalised; refuses escapes."""
    if not isinstance(workdir, str) or "\0" in workdir:
        raise SandboxRequestError(f"workdir {workdir!r} is not a path")
    if workdir.startswith("/"):
        raise SandboxRequestError(f"workdir {workdir!r} is absolute; give a path inside the repo")
    norm = posixpath.normpath(workdir or ".")
    if norm == ".." or norm.startswith("../"):
        raise SandboxRequestError(f"workdir {workdir!r} leaves the repository")
    return norm


def sandbox_env(request: SandboxRequest, *, home: str, tmp: str, repo: str, out: str, path: str) -> dict[str, str]:
    """The complete environment of a sandboxed process: fixed variables plus the request's."""
    env = {
        "PATH": path,
        "HOME": home,
        "TMPDIR": tmp,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",  # the environment is read-only anyway
        "PYTHONUNBUFFERED": "1",
        "PYTHONNOUSERSITE": "1",
        "EVALRUNNER_REPO": repo,
        "EVALRUNNER_OUT": out,
        "INSPECT_DISPLAY": "none",
        "NO_COLOR": "1",
    }
    for k, val in request.env.items():
        if not _ENV_NAME.match(k):
            raise SandboxRequestError(f"environment variable name {k!r} is not valid")
        if _SECRET_NAME.search(k):
            raise SandboxRequestError(
                f"environment variable {k!r} looks like a credential; sandboxes get none "
                "(model credentials stay with a proxy outside the sandbox)"
            )
        if k in RESERVED_ENV:
            raise SandboxRequestError(f"environment variable {k!r} is set by the sandbox itself")
        env[k] = str(val)
    if request.gateway_env:
        for k, val in request.gateway_env.items():
            if k not in GATEWAY_ENV_NAMES:
                raise SandboxRequestError(
                    f"gateway variable {k!r} is not one the model gateway sets ({', '.join(sorted(GATEWAY_ENV_NAMES))})"
                )
            env[k] = str(val)
    return env


STAGING_PREFIX = "evalrunner-sbx-"


@dataclass
class Staging:
    """Host-side directories of one sandbox: the output dir and backend-specific files."""

    root: Path
    out: Path

    @classmethod
    def create(cls, parent: str | None) -> Staging:
        if parent is not None:
            Path(parent).mkdir(parents=True, exist_ok=True)
        # The owner's pid in the name lets a later controller remove what a killed one left.
        root = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-", dir=parent))
        out = root / "out"
        out.mkdir(mode=0o700)
        return cls(root, out)

    def clear_out(self) -> None:
        """Empty the output dir between warm calls, never following links."""
        for entry in os.scandir(self.out):
            p = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(p, ignore_errors=True)
            else:
                try:
                    p.unlink()
                except OSError:
                    pass

    @classmethod
    def sweep_dead_owners(cls, parent: str | None) -> list[Path]:
        """Remove staging directories of controllers that no longer run (``kill -9``)."""
        base = Path(parent or tempfile.gettempdir())
        pattern = re.compile(rf"^{re.escape(STAGING_PREFIX)}(\d+)-")
        removed: list[Path] = []
        try:
            entries = list(base.iterdir())
        except OSError:
            return removed
        for d in entries:
            m = pattern.match(d.name)
            if m and d.is_dir() and not d.is_symlink() and not pid_alive(int(m.group(1))):
                cls(d, d / "out").remove()
                removed.append(d)
        return removed

    def remove(self) -> None:
        # A sandbox may leave read-only directories; restore owner bits so rmtree succeeds.
        for dirpath, dirnames, _ in os.walk(self.root):
            for d in dirnames:
                p = os.path.join(dirpath, d)
                if not os.path.islink(p):
                    try:
                        os.chmod(p, 0o700)
                    except OSError:
                        pass
        shutil.rmtree(self.root, ignore_errors=True)


class LocalBackend(SandboxBackend):
    """A backend that runs a child process on this machine (bubblewrap or unsafe-local)."""

    signal_offset: int | None = None  # wrappers that report signal N as 128+N set 128

    def __init__(self, staging_dir: str | None = None) -> None:
        self.staging_dir = staging_dir
        self._preflight_ok = False
        self._lock = threading.Lock()

    # subclasses -------------------------------------------------------------------------------

    def _command(
        self, request: SandboxRequest, staging: Staging
    ) -> tuple[list[str], dict[str, str], str | None, tuple[int, ...]]:
        """argv, environment for the launched process, cwd, fds to pass."""
        raise NotImplementedError

    def _classify_crash(self, returncode: int, stderr_tail: str) -> str | None:
        """A cause when the wrapper itself failed (not the sandboxed command)."""
        return None

    def _pids_mechanism(self, limits: Limits) -> tuple[Cgroup | None, int | None]:
        """(cgroup, RLIMIT_NPROC value): a cgroup when we can make one; else NPROC for a
        non-root uid (counting this uid's current processes, which share the limit)."""
        cg = Cgroup.create(limits)
        if cg is not None:
            return cg, None
        if os.getuid() != 0:
            return None, count_own_processes() + limits.pids
        return None, None

    # SandboxBackend ---------------------------------------------------------------------------

    def runtime_digest(self) -> str:
        return digest_of({"backend": self.name, **versions(), **self._extra_versions()})

    def _extra_versions(self) -> dict[str, str]:
        return {}

    def _ensure_preflight(self) -> None:
        with self._lock:
            if not self._preflight_ok:
                self.preflight()
                self._preflight_ok = True

    def run(self, request: SandboxRequest, cancel: threading.Event | None = None) -> SandboxResult:
        self._ensure_preflight()
        check_workdir(request.workdir)
        staging = Staging.create(self.staging_dir)
        cgroup: Cgroup | None = None
        started = time.monotonic()
        try:
            argv, env, cwd, fds = self._command(request, staging)
            cgroup, nproc = self._pids_mechanism(request.limits)
            try:
                proc = LiveProcess(
                    argv,
                    env=env,
                    cwd=cwd,
                    preexec=make_preexec(request.limits, cgroup, nproc),
                    stdout_cap=request.limits.stdout_bytes,
                    pass_fds=fds,
                )
            except OSError as exc:
                return self._crashed(f"could not start the sandbox: {exc}", started)
            proc.write_stdin(request.stdin or b"", close=True)
            deadline = started + request.limits.wall_seconds
            stopped = proc.wait(deadline, cancel)
            if cgroup is not None:
                cgroup.kill_all()  # nothing of the sandbox outlives it
            proc.join_pipes()
            stdout, truncated = proc.stdout
            tail = proc.stderr_tail()
            status, detail = self._status(proc, stopped, request, cgroup, tail)
            outputs, rejected = collect_outputs(staging.out, request.limits)
            return SandboxResult(
                status=status,
                exit_code=proc.proc.returncode,
                stdout=stdout,
                stdout_truncated=truncated,
                stderr_tail=tail,
                outputs=outputs,
                rejected_outputs=rejected,
                duration_s=time.monotonic() - started,
                backend=self.name,
                detail=detail,
            )
        finally:
            if cgroup is not None:
                cgroup.remove()
            staging.remove()

    def _status(
        self,
        proc: LiveProcess,
        stopped: SandboxStatus | None,
        request: SandboxRequest,
        cgroup: Cgroup | None,
        tail: str,
    ) -> tuple[SandboxStatus, str]:
        if stopped is SandboxStatus.TIMEOUT:
            return stopped, f"wall-clock limit of {request.limits.wall_seconds:g}s reached; process group killed"
        if stopped is SandboxStatus.CANCELLED:
            return stopped, "cancelled by the caller; process group killed"
        rc = proc.proc.returncode
        crash = self._classify_crash(rc, tail)
        if crash is not None:
            return SandboxStatus.CRASHED, crash
        status, detail = classify_exit(rc, signal_offset=self.signal_offset)
        if cgroup is not None and cgroup.memory_oom_killed():
            return SandboxStatus.KILLED, f"memory limit of {request.limits.memory_bytes} bytes reached (OOM kill)"
        if status is not SandboxStatus.OK and cgroup is not None and cgroup.pids_limit_hit():
            detail += f"; the pids limit ({request.limits.pids}) was reached"
        return status, detail

    def _crashed(self, detail: str, started: float) -> SandboxResult:
        return SandboxResult(
            status=SandboxStatus.CRASHED,
            exit_code=None,
            stdout=b"",
            stdout_truncated=False,
            stderr_tail="",
            outputs={},
            rejected_outputs={},
            duration_s=time.monotonic() - started,
            backend=self.name,
            detail=detail,
        )

    def open_session(self, request: SandboxRequest) -> LocalWarmSession:
        self._ensure_preflight()
        check_workdir(request.workdir)
        return LocalWarmSession(self, request)


class LocalWarmSession:
    """One long-lived sandboxed worker for one (commit, task), spoken to in JSON lines.

    Each :meth:`call` sends one request line, waits for one reply line, then collects the
    output directory (and empties it for the next call). The reply is untrusted — the task code
    runs in the same process — so it travels back only as ``SandboxResult.stdout``; the caller
    validates what it needs from the collected files. After a timeout, cancellation or crash
    the session is dead: every later call returns CRASHED."""

    def __init__(self, backend: LocalBackend, request: SandboxRequest) -> None:
        self.backend = backend
        self.request = request
        self.staging = Staging.create(backend.staging_dir)
        self.cgroup: Cgroup | None = None
        self.dead = ""
        started = time.monotonic()
        try:
            argv, env, cwd, fds = backend._command(request, self.staging)
            self.cgroup, nproc = backend._pids_mechanism(request.limits)
            self.proc = LiveProcess(
                argv,
                env=env,
                cwd=cwd,
                preexec=make_preexec(request.limits, self.cgroup, nproc),
                stdout_cap=request.limits.stdout_bytes,
                line_mode=True,
                pass_fds=fds,
            )
        except BaseException:
            self._cleanup()
            raise
        self.start_s = time.monotonic() - started

    def call(self, payload: dict, *, timeout: float, cancel: threading.Event | None = None) -> SandboxResult:
        started = time.monotonic()
        limits = self.request.limits
        if self.dead:
            return self.backend._crashed(f"warm session is closed: {self.dead}", started)
        self.staging.clear_out()
        line = json.dumps(payload, separators=(",", ":")).encode() + b"\n"
        self.proc.write_stdin(line, close=False)
        deadline = started + timeout
        reply: bytes | None = None
        status: SandboxStatus | None = None
        while True:
            try:
                reply = self.proc.lines.get(timeout=0.05)
                break
            except queue.Empty:
                pass
            if cancel is not None and cancel.is_set():
                status = SandboxStatus.CANCELLED
                break
            if time.monotonic() >= deadline:
                status = SandboxStatus.TIMEOUT
                break
        detail = ""
        if status is not None:
            self.dead = status.value
            self._kill()
            detail = (
                "cancelled by the caller; process group killed"
                if status is SandboxStatus.CANCELLED
                else f"no reply within {timeout:g}s; process group killed"
            )
        elif reply is None:  # the worker exited
            self._kill()
            rc = self.proc.proc.returncode
            status, why = self.backend._status(self.proc, None, self.request, self.cgroup, self.proc.stderr_tail())
            status = SandboxStatus.CRASHED if status in (SandboxStatus.OK, SandboxStatus.EXIT_NONZERO) else status
            detail = f"warm worker exited before replying (code {rc}{'; ' + why if why else ''})"
            self.dead = detail
        elif self.proc.line_violation:
            status, detail = SandboxStatus.CRASHED, f"warm worker broke the protocol: {self.proc.line_violation}"
            self.dead = detail
            self._kill()
        else:
            status = SandboxStatus.OK
        outputs, rejected = collect_outputs(self.staging.out, limits)
        self.staging.clear_out()
        return SandboxResult(
            status=status,
            exit_code=self.proc.proc.returncode,
            stdout=reply or b"",
            stdout_truncated=False,
            stderr_tail=self.proc.stderr_tail(),
            outputs=outputs,
            rejected_outputs=rejected,
            duration_s=time.monotonic() - started,
            backend=self.backend.name,
            detail=detail,
        )

    def _kill(self) -> None:
        self.proc.kill()
        if self.cgroup is not None:
            self.cgroup.kill_all()
        self.proc.join_pipes(timeout=2)

    def close(self) -> None:
        if not self.dead:
            self.dead = "closed"
            try:
                self.proc.stdin.close()  # EOF asks the worker to exit
                self.proc.proc.wait(timeout=5)
            except Exception:
                pass
        self._kill()
        self._cleanup()

    def _cleanup(self) -> None:
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None
        self.staging.remove()

    def __enter__(self) -> LocalWarmSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = [
    "LocalBackend",
    "LocalWarmSession",
    "SandboxRequestError",
    "Staging",
    "check_workdir",
    "sandbox_env",
    "versions",
]
