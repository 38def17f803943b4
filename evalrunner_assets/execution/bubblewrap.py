"""The local sandbox: bubblewrap (``bwrap``) namespaces plus limits and a controller that kills.

What a sandboxed process sees (everything else on the host is absent, not just unreadable):

- ``/usr`` and the ``/bin``, ``/sbin``, ``/lib*`` links or dirs, read-only;
- a few files of ``/etc`` that programs need to run (dynamic linker cache, time zone, TLS
  roots, name-service switch, alternatives) and a synthetic ``/etc/passwd``/``group`` — not
  the host's users, no ``/root``, no ``/home``, no ``/etc/shadow``;
- the Python environment, read-only: the interpreter installation, the virtualenv, and the
  directories of our own packages when they are installed editable (only ``evalrunner_assets``
  and ``lake``, not the checkout with its ``.git``);
- the commit's export read-only at ``/work/repo``; a writable, initially empty output
  directory at ``/work/out`` (a directory, so atomic temp-then-rename writes work); size-capped
  tmpfs scratch at ``/tmp`` and ``/work/home`` (HOME, TMPDIR) — ``/tmp`` may instead be a
  throwaway per-sample directory (``SandboxRequest.tmp_dir``, the Inspect sandbox provider's);
- controller services only through channels (``SandboxRequest.channels``): a unix socket bound
  in read-only and relayed to a port on the sandbox's own loopback (``channel.py``);
- new user, pid, ipc, uts, cgroup and network namespaces, no capabilities, no nested user
  namespaces, a new session (no terminal injection), and death with the controller.

Limits: RLIMIT_AS/DATA (memory per process), RLIMIT_CPU, RLIMIT_FSIZE and RLIMIT_CORE are set
in the child before ``exec``. Processes: RLIMIT_NPROC counts per *real* uid and is never
enforced for uid 0 — and the controller runs as root here and in CI — so the pids limit (and a
whole-sandbox memory cap) comes from a per-sandbox cgroup (v1 ``pids``/``memory`` or a v2
delegated group). When neither a cgroup nor a non-root uid is available, preflight refuses
(fail closed): a fork bomb would otherwise be bounded only by the wall clock.

Network: ``NetworkPolicy.NONE`` unshares the network namespace (only its own loopback).
``NetworkPolicy.MODEL_EGRESS`` *shares the host network namespace*: bubblewrap cannot restrict
egress to one host, so in that mode the sandbox can reach anything the host can (including
host loopback services). It is a documented, weaker guarantee, per-task opt-in only; the
Kubernetes backend enforces real egress rules with a NetworkPolicy.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

from evalrunner_assets.execution._local import (
    LocalBackend,
    SandboxRequestError,
    Staging,
    check_workdir,
    sandbox_env,
)
from evalrunner_assets.execution._process import Cgroup
from evalrunner_assets.execution.channel import relay_prefix, sandbox_socket_path
from evalrunner_assets.execution.sandbox import (
    SANDBOX_HOME_DIR,
    SANDBOX_OUT_DIR,
    SANDBOX_REPO_DIR,
    Limits,
    NetworkPolicy,
    SandboxRequest,
    SandboxUnavailable,
)

# /etc entries a Python program (and git, sh, TLS clients) needs; nothing with secrets.
ETC_FILES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "nsswitch.conf",
    "hosts",
    "host.conf",
    "mime.types",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "alternatives",
    "os-release",
    "debian_version",
)
ETC_EGRESS_FILES = ("resolv.conf", "gai.conf")  # name resolution, only when the net is shared
TOP_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# Our packages a sandboxed process imports: the Inspect worker and the simulated model provider
# (Inspect loads it through the `inspect_ai` entry point) live in evalrunner_assets.
SANDBOX_PACKAGES = ("evalrunner_assets", "lake")

_PASSWD = "root:x:0:0:sandbox:/work/home:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
_GROUP = "root:x:0:\nnogroup:x:65534:\n"

FIX_HINT = (
    "install bubblewrap (`apt-get install -y bubblewrap`) and allow user namespaces "
    "(`sysctl -w kernel.unprivileged_userns_clone=1` on Debian kernels, "
    "`sysctl -w user.max_user_namespaces=15000`, and on Ubuntu 24.04+ "
    "`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`); inside Docker, run the "
    "container with `--security-opt seccomp=unconfined --security-opt apparmor=unconfined` "
    "or use the Kubernetes backend"
)


def _package_dirs() -> list[str]:
    """Directories of our packages that are not already inside the bound Python prefixes."""
    import importlib.util

    prefixes = [os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)]
    dirs: list[str] = []
    for name in SANDBOX_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        for loc in spec.submodule_search_locations:
            real = os.path.realpath(loc)
            if not any(real == p or real.startswith(p + os.sep) for p in prefixes):
                dirs.append(real)
    return sorted(set(dirs))


def python_binds() -> list[str]:
    """Read-only binds of the Python environment, each at its own host path."""
    paths = {os.path.realpath(sys.base_prefix), os.path.abspath(sys.prefix)}
    # The interpreter binary may live outside base_prefix (e.g. /usr/bin with a /usr prefix).
    paths.add(os.path.dirname(os.path.realpath(sys.executable)))
    stdlib = sysconfig.get_paths().get("stdlib")
    if stdlib:
        paths.add(os.path.realpath(stdlib))
    paths.update(_package_dirs())
    # Drop paths already covered by a bound parent or by /usr.
    ordered = sorted(p for p in paths if os.path.exists(p))
    keep: list[str] = []
    for p in ordered:
        if p == "/usr" or p.startswith("/usr/"):
            continue
        if any(p == k or p.startswith(k + "/") for k in keep):
            continue
        keep.append(p)
    args: list[str] = []
    for p in keep:
        args += ["--ro-bind", p, p]
    return args


def sandbox_path(python_env: str | None = None) -> str:
    venv_bin = os.path.join(os.path.abspath(sys.prefix), "bin")
    env_bin = f"{os.path.join(python_env, 'bin')}:" if python_env else ""
    return f"{env_bin}{venv_bin}:/usr/local/bin:/usr/bin:/bin"


def check_python_env(path: str | None) -> str | None:
    """A built environment's directory: absolute, existing, not a link (it is bound as is)."""
    if path is None:
        return None
    if not os.path.isabs(path) or os.path.islink(path) or not os.path.isdir(path):
        raise SandboxRequestError(f"python environment {path!r} is not an existing absolute directory")
    if not os.path.exists(os.path.join(path, "bin", "python")):
        raise SandboxRequestError(f"python environment {path!r} has no bin/python")
    return os.path.realpath(path)


@functools.lru_cache(maxsize=1)
def bwrap_version(bwrap: str) -> str:
    try:
        out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or out.stderr.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


class BubblewrapBackend(LocalBackend):
    """Sandboxes on this machine with bubblewrap; fails closed when it cannot contain."""

    name = "bubblewrap"
    signal_offset = 128  # bwrap exits 128+N when its child dies of signal N

    def __init__(self, staging_dir: str | None = None, bwrap: str | None = None) -> None:
        super().__init__(staging_dir)
        self.bwrap = bwrap or shutil.which("bwrap") or ""

    def _extra_versions(self) -> dict[str, str]:
        return {"bwrap": bwrap_version(self.bwrap) if self.bwrap else "absent"}

    def build_argv(self, request: SandboxRequest, staging: Staging) -> list[str]:
        """The full ``bwrap`` command line for ``request`` (pure: tests pin its shape)."""
        workdir = check_workdir(request.workdir)
        etc = staging.root / "etc"
        etc.mkdir(exist_ok=True)
        (etc / "passwd").write_text(_PASSWD)
        (etc / "group").write_text(_GROUP)
        limits = request.limits
        a = [
            self.bwrap,
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--cap-drop",
            "ALL",
            "--die-with-parent",
            "--new-session",
            "--clearenv",
            "--hostname",
            "sandbox",
        ]
        if request.network is NetworkPolicy.MODEL_EGRESS:
            a.append("--share-net")  # weaker guarantee: see the module docstring
        a += ["--proc", "/proc", "--dev", "/dev"]
        # tmpfs /tmp first: anything bound under /tmp later (a venv, an export) stays visible.
        # (A per-sample /tmp directory takes its place, bound first for the same reason.)
        if request.tmp_dir is not None:
            tmp_host = Path(request.tmp_dir)
            if tmp_host.is_symlink() or not tmp_host.is_dir():
                raise SandboxRequestError(f"tmp_dir {request.tmp_dir!r} is not a directory")
            a += ["--bind", str(tmp_host.resolve()), "/tmp"]
        else:
            a += ["--size", str(limits.scratch_bytes), "--tmpfs", "/tmp"]
        a += ["--ro-bind", "/usr", "/usr"]
        for d in TOP_DIRS:
            p = Path("/") / d
            if p.is_symlink():
                a += ["--symlink", os.readlink(p), str(p)]
            elif p.is_dir():
                a += ["--ro-bind", str(p), str(p)]
        names = ETC_FILES + (ETC_EGRESS_FILES if request.network is NetworkPolicy.MODEL_EGRESS else ())
        for name in names:
            p = Path("/etc") / name
            if p.exists():
                a += ["--ro-bind", str(p), str(p)]
        a += ["--ro-bind", str(etc / "passwd"), "/etc/passwd", "--ro-bind", str(etc / "group"), "/etc/group"]
        a += python_binds()
        env_dir = check_python_env(request.python_env)
        if env_dir is not None:
            a += ["--ro-bind", env_dir, env_dir]
        a += [
            "--bind" if request.repo_writable else "--ro-bind",
            str(Path(request.export.path).resolve()),
            SANDBOX_REPO_DIR,
        ]
        a += ["--bind", str(staging.out), SANDBOX_OUT_DIR]
        a += ["--size", str(limits.scratch_bytes), "--tmpfs", SANDBOX_HOME_DIR]
        for mount in request.writable:
            host = Path(mount.host_path)
            if host.is_symlink() or not host.is_dir():
                raise SandboxRequestError(f"writable mount {mount.host_path!r} is not a directory")
            a += ["--bind", str(host.resolve()), mount.sandbox_path]
        # Channels: each controller socket is bound in; a relay started before the command
        # serves it on the sandbox's own loopback (the network namespace stays unshared).
        inner_sockets = [sandbox_socket_path(i) for i in range(len(request.channels))]
        for ch, inner in zip(request.channels, inner_sockets):
            if not stat.S_ISSOCK(os.stat(ch.socket_path).st_mode):
                raise SandboxRequestError(f"channel socket {ch.socket_path!r} is not a unix socket")
            a += ["--ro-bind", ch.socket_path, inner]
        # The root itself (a tmpfs holding the mount points) is made read-only last, so the only
        # writable places are /work/out, /tmp and /work/home.
        a += ["--remount-ro", "/"]
        a += ["--chdir", SANDBOX_REPO_DIR if workdir == "." else f"{SANDBOX_REPO_DIR}/{workdir}"]
        env = sandbox_env(
            request,
            home=SANDBOX_HOME_DIR,
            tmp="/tmp",
            repo=SANDBOX_REPO_DIR,
            out=SANDBOX_OUT_DIR,
            path=sandbox_path(env_dir),
        )
        for k, v in sorted(env.items()):
            a += ["--setenv", k, v]
        a.append("--")
        if request.channels:
            a += relay_prefix(sys.executable, request.channels, inner_sockets)
        a += list(request.argv)
        return a

    def _command(
        self, request: SandboxRequest, staging: Staging
    ) -> tuple[list[str], dict[str, str], str | None, tuple[int, ...]]:
        argv = self.build_argv(request, staging)
        # bwrap itself gets a minimal environment; the sandbox's comes from --setenv.
        return argv, {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, "/", ()

    def _classify_crash(self, returncode: int, stderr_tail: str) -> str | None:
        # bwrap reports its own setup failures as exit 1 with a "bwrap: " message.
        if returncode == 1 and stderr_tail.lstrip().startswith("bwrap:"):
            return f"bubblewrap could not set up the sandbox: {stderr_tail.strip()[:500]}"
        return None

    def _pids_mechanism(self, limits: Limits) -> tuple[Cgroup | None, int | None]:
        cg, nproc = super()._pids_mechanism(limits)
        if cg is None and nproc is None:
            raise SandboxUnavailable(
                "cannot enforce a pids limit: running as root (RLIMIT_NPROC is not enforced for "
                "uid 0) and no writable cgroup pids controller (/sys/fs/cgroup/pids or a "
                "delegated cgroup v2 group). Run the controller as a non-root user, or give it a "
                "delegated cgroup, or use the Kubernetes backend"
            )
        return cg, nproc

    def preflight(self) -> None:
        if not self.bwrap or not os.access(self.bwrap, os.X_OK):
            raise SandboxUnavailable(f"bubblewrap (bwrap) is not installed; {FIX_HINT}")
        # What a controller killed with kill -9 left behind (its sandboxes died with it).
        Staging.sweep_dead_owners(self.staging_dir)
        Cgroup.sweep_dead_owners()
        if os.getuid() == 0:
            cg = Cgroup.create(Limits())
            if cg is None:
                self._pids_mechanism(Limits())  # raises with the explanation
            else:
                cg.remove()
        # A real sandbox, with the same mounts as every run, must start Python.
        staging = Staging.create(self.staging_dir)
        try:
            from evalrunner_assets.execution.sandbox import RepoExport

            export = RepoExport(repo="preflight/preflight", commit="0" * 40, path=str(staging.out), tree_digest="")
            req = SandboxRequest(argv=("python", "-c", "import sys; print('ok')"), export=export)
            argv = self.build_argv(req, staging)
            try:
                proc = subprocess.run(argv, capture_output=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise SandboxUnavailable(f"bubblewrap preflight failed to run: {exc}; {FIX_HINT}") from exc
            if proc.returncode != 0 or proc.stdout.strip() != b"ok":
                err = proc.stderr.decode(errors="replace").strip()[-800:]
                raise SandboxUnavailable(
                    f"bubblewrap preflight failed (exit {proc.returncode}): {err or 'no output'}; {FIX_HINT}"
                )
        finally:
            staging.remove()
