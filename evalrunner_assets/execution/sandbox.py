"""The sandbox backend interface: run untrusted repository code, collect its output files.

A backend is given a read-only export of one commit, a command, a clean environment and
limits; it returns what the process left in its output directory *after it exited*, read by
the trusted controller. The interface assumes neither a local filesystem nor a local process:
the bubblewrap backend runs a child process on this machine, the Kubernetes backend a pod.
"""

from __future__ import annotations

import abc
import enum
import threading
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from evalrunner_assets.errors import InputError

# Where things are inside every sandbox, whatever the backend: commands refer to these paths
# (or to the same values in the EVALRUNNER_REPO / EVALRUNNER_OUT environment variables).
SANDBOX_REPO_DIR = "/work/repo"  # the read-only export of the commit
SANDBOX_OUT_DIR = "/work/out"  # the writable output directory the controller collects
SANDBOX_HOME_DIR = "/work/home"  # writable scratch, HOME

# Every variable the model gateway may set in a sandbox: its providers' base-URL and key
# variables (the gateway's PROVIDERS name the same ones). The sandbox backends allow exactly these
# in ``SandboxRequest.gateway_env``.
GATEWAY_ENV_NAMES = frozenset({"OPENAI_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"})


class SandboxUnavailable(InputError, RuntimeError):
    """The backend cannot run sandboxes here (preflight failed); the message says how to fix it."""


class SandboxStatus(str, enum.Enum):
    """How a sandboxed process ended. Only ``OK`` and ``EXIT_NONZERO`` mean it ran to its end."""

    OK = "ok"  # exited 0
    EXIT_NONZERO = "exit_nonzero"  # exited with a non-zero code
    TIMEOUT = "timeout"  # wall-clock limit reached; the whole process group was killed
    CANCELLED = "cancelled"  # the caller cancelled; the whole process group was killed
    KILLED = "killed"  # killed by a signal or a resource limit (memory, pids, cpu, file size)
    CRASHED = "crashed"  # the sandbox itself failed (could not start, lost, evicted)


class NetworkPolicy(str, enum.Enum):
    NONE = "none"  # no network at all (default)
    MODEL_EGRESS = "model-egress"  # per-task opt-in: reach the configured model endpoint only


@dataclass(frozen=True)
class Channel:
    """A service of the trusted controller that a sandbox reaches at ``127.0.0.1:<port>`` inside
    its own network namespace — the only way out of a sandbox without network.

    The controller listens on the unix socket ``socket_path``; the backend makes that socket
    visible inside the sandbox and relays the loopback port to it. Holding the socket is the
    capability, so whatever listens on it must authenticate callers itself (e.g. a per-window
    token) and forward only what it is for (a model gateway, an allow-listed package index)."""

    socket_path: str  # host path of a listening unix socket (the controller's side)
    port: int  # loopback TCP port inside the sandbox

    def __post_init__(self) -> None:
        if not (1024 <= int(self.port) <= 65535):
            raise ValueError(f"channel port {self.port!r} must be in 1024..65535")
        if not self.socket_path or "\0" in self.socket_path:
            raise ValueError(f"channel socket path {self.socket_path!r} is not a path")


@dataclass(frozen=True)
class WritableMount:
    """A host directory the sandbox may write, seen at ``sandbox_path`` inside it (used by the
    environment build, whose output must sit at its final path while it is built)."""

    host_path: str
    sandbox_path: str

    def __post_init__(self) -> None:
        import posixpath

        p = self.sandbox_path
        if not p.startswith("/") or posixpath.normpath(p) != p or p == "/":
            raise ValueError(f"writable mount point {p!r} must be a normalised absolute path below /")
        for reserved in ("/usr", "/etc", "/proc", "/dev", "/bin", "/lib", "/work/repo", "/run"):
            if p == reserved or p.startswith(reserved + "/"):
                raise ValueError(f"writable mount point {p!r} is inside {reserved}")


@dataclass(frozen=True)
class Limits:
    """Resource limits applied to every process in the sandbox."""

    wall_seconds: float = 900.0
    cpu_seconds: int = 1800
    memory_bytes: int = 4 * 1024**3
    pids: int = 256
    file_size_bytes: int = 512 * 1024**2  # largest single file any process may write
    stdout_bytes: int = 4 * 1024**2  # captured stdout beyond this is discarded (flagged)
    output_bytes: int = 256 * 1024**2  # total bytes collected from the output directory
    output_files: int = 64  # files collected from the output directory
    scratch_bytes: int = 1024**3  # writable scratch (HOME, TMPDIR) in total, where enforceable


@dataclass(frozen=True)
class RepoExport:
    """A read-only export of one commit (no ``.git``). ``path`` is where it sits on this
    machine; backends that run elsewhere ship it (e.g. as a tarball) themselves."""

    repo: str
    commit: str
    path: str
    tree_digest: str  # sha256 over the exported files (names, modes and bytes)


@dataclass(frozen=True)
class SandboxRequest:
    """One sandboxed command."""

    argv: tuple[str, ...]
    export: RepoExport
    workdir: str = "."  # relative to the export root; validated to stay inside it
    env: dict[str, str] = field(default_factory=dict)  # explicit, non-secret variables only
    network: NetworkPolicy = NetworkPolicy.NONE
    limits: Limits = field(default_factory=Limits)
    stdin: bytes | None = None
    labels: dict[str, str] = field(default_factory=dict)  # batch key fields, for pods/logs
    channels: tuple[Channel, ...] = ()  # controller services relayed to sandbox loopback ports
    # A built repository environment (a virtualenv directory), bound read-only at its own host
    # path; its ``bin`` comes first on PATH, so ``python`` sees the repository's dependencies.
    python_env: str | None = None
    writable: tuple[WritableMount, ...] = ()  # extra writable directories (environment builds)
    # The export bound writable: only for a throwaway copy (a project build writes its metadata
    # into its source tree).
    repo_writable: bool = False
    # A host directory bound writable at /tmp instead of the fresh tmpfs: an Inspect sample's
    # /tmp, which must outlive one call (Inspect writes a sample's setup script there, then runs
    # it in the next). Only a throwaway per-sample directory.
    tmp_dir: str | None = None
    # Set only by the model gateway's backend wrapper, never from user input: base URLs and a
    # scoped, revocable token for Inspect's providers (names in GATEWAY_ENV_NAMES). The
    # token is not a credential — the real keys stay with the gateway — so these names bypass
    # the credential-name refusal that applies to ``env``.
    gateway_env: dict[str, str] = field(default_factory=dict)


@dataclass
class SandboxResult:
    """What came out of one sandboxed command, as seen by the trusted controller."""

    status: SandboxStatus
    exit_code: int | None
    stdout: bytes
    stdout_truncated: bool
    stderr_tail: str
    outputs: dict[str, bytes]  # regular files found in the output directory, within caps
    rejected_outputs: dict[str, str]  # output name -> why it was not collected
    duration_s: float
    backend: str
    detail: str = ""  # the first cause of a non-OK status, in words
    # What the sandbox sent through the model gateway during this run or warm call (metered by
    # the trusted gateway, not reported by the sandbox); None without a gateway.
    gateway_usage: dict | None = None

    @property
    def ran(self) -> bool:
        return self.status in (SandboxStatus.OK, SandboxStatus.EXIT_NONZERO)


@runtime_checkable
class WarmSession(Protocol):
    """A live sandbox for one (commit, task) that runs successive requests without a new
    sandbox (and, for Inspect, without a new interpreter). Never shared across commits or tasks."""

    def call(self, payload: dict, *, timeout: float, cancel: threading.Event | None = None) -> SandboxResult: ...

    def close(self) -> None: ...


class SandboxBackend(abc.ABC):
    """Runs untrusted code. Implementations: bubblewrap (local), Kubernetes (pods)."""

    name: str = "abstract"

    @abc.abstractmethod
    def preflight(self) -> None:
        """Raise :class:`SandboxUnavailable` (saying how to fix it) if sandboxes cannot run."""

    @abc.abstractmethod
    def run(self, request: SandboxRequest, cancel: threading.Event | None = None) -> SandboxResult:
        """Run ``request`` to completion, timeout or cancellation, then collect its outputs."""

    @abc.abstractmethod
    def runtime_digest(self) -> str:
        """A digest of what the sandbox runs with (backend, image or Python, inspect-ai and
        evalrunner versions): part of every batch key, so a runtime change invalidates reuse."""

    def open_session(self, request: SandboxRequest) -> WarmSession:
        """Start a warm sandbox whose process serves requests (JSON lines on stdin/stdout)."""
        raise NotImplementedError(f"backend {self.name!r} has no warm sessions")

    def sandbox_counts(self) -> dict[str, int]:
        """How many sandboxes this backend object started, by kind (e.g. ``cold_pods``,
        ``session_pods``); empty when the backend does not count them."""
        return {}
