"""``unsafe-local``: runs repository code directly on this machine. NOT A SANDBOX.

For diagnostics on hosts where bubblewrap cannot run. The process gets a clean environment,
rlimits, a wall clock and a process-group kill, but it can read every host file its uid can,
reach the network, and see other processes. Never the default; refused when ``CI`` is set.
Commands are written against the sandbox paths (``/work/repo``, ``/work/out``, ``/work/home``);
they are rewritten to host paths here, matched at path boundaries only.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings

from evalrunner_assets.execution._local import (
    LocalBackend,
    SandboxRequestError,
    Staging,
    check_workdir,
    sandbox_env,
)
from evalrunner_assets.execution.bubblewrap import check_python_env, sandbox_path
from evalrunner_assets.execution.channel import relay_prefix
from evalrunner_assets.execution.sandbox import (
    SANDBOX_HOME_DIR,
    SANDBOX_OUT_DIR,
    SANDBOX_REPO_DIR,
    SandboxRequest,
    SandboxUnavailable,
)

log = logging.getLogger(__name__)

BANNER = "UNSAFE-LOCAL BACKEND: repository code runs UNSANDBOXED with this user's access to files and network"


class UnsafeLocalRefused(SandboxUnavailable):
    """The unsafe-local backend was asked for where it must not run (``CI`` is set)."""


def _refuse_in_ci() -> None:
    if os.environ.get("CI"):
        raise UnsafeLocalRefused(
            "the unsafe-local backend is refused when CI is set: CI runs must use bubblewrap "
            "(or Kubernetes); install bubblewrap with `apt-get install -y bubblewrap`"
        )


class UnsafeLocalBackend(LocalBackend):
    """No containment at all (see the module docstring). Chosen only by explicit name."""

    name = "unsafe-local"
    signal_offset = None

    def __init__(self, staging_dir: str | None = None) -> None:
        _refuse_in_ci()
        super().__init__(staging_dir)
        warnings.warn(BANNER, stacklevel=2)
        log.warning(BANNER)

    def preflight(self) -> None:
        _refuse_in_ci()

    def _command(
        self, request: SandboxRequest, staging: Staging
    ) -> tuple[list[str], dict[str, str], str | None, tuple[int, ...]]:
        _refuse_in_ci()
        log.warning(BANNER)
        workdir = check_workdir(request.workdir)
        home = staging.root / "home"
        tmp = staging.root / "tmp"
        home.mkdir()
        tmp.mkdir()
        mapping = {
            SANDBOX_REPO_DIR: os.path.abspath(request.export.path),
            SANDBOX_OUT_DIR: str(staging.out),
            SANDBOX_HOME_DIR: str(home),
        }
        pattern = re.compile(r"(?<![\w./-])(" + "|".join(re.escape(k) for k in mapping) + r")(?=/|$|[^\w.-])")
        for mount in request.writable:
            # Without mount namespaces a directory cannot appear at another path.
            if os.path.realpath(mount.host_path) != mount.sandbox_path:
                raise SandboxRequestError(
                    f"the unsafe-local backend cannot show {mount.host_path!r} at {mount.sandbox_path!r}; "
                    "repository environments are built with the bubblewrap backend"
                )
        argv = [pattern.sub(lambda m: mapping[m.group(1)], part) for part in request.argv]
        if request.channels:  # host loopback ports: a port already in use fails the relay
            argv = relay_prefix(sys.executable, request.channels, [ch.socket_path for ch in request.channels]) + argv
        env = sandbox_env(
            request,
            home=str(home),
            tmp=str(tmp),
            repo=mapping[SANDBOX_REPO_DIR],
            out=str(staging.out),
            path=sandbox_path(check_python_env(request.python_env)),
        )
        cwd = os.path.join(mapping[SANDBOX_REPO_DIR], workdir)
        return argv, env, cwd, ()
