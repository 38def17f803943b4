"""Sandboxed execution: repositories at exact commits, sandbox backends, Inspect runs."""

from evalrunner_assets.execution._local import digest_of
from evalrunner_assets.execution._process import pid_alive
from evalrunner_assets.execution.backends import BACKENDS, DEFAULT_BACKEND, UnknownBackend, make_backend
from evalrunner_assets.execution.bubblewrap import BubblewrapBackend
from evalrunner_assets.execution.repo import (
    AmbiguousCommit,
    CommitNotFound,
    CommitNotHex,
    RefNotFound,
    RepoError,
    RepoSource,
    tree_digest,
)
from evalrunner_assets.execution.sandbox import (
    SANDBOX_HOME_DIR,
    SANDBOX_OUT_DIR,
    SANDBOX_REPO_DIR,
    Limits,
    NetworkPolicy,
    RepoExport,
    SandboxBackend,
    SandboxRequest,
    SandboxResult,
    SandboxStatus,
    SandboxUnavailable,
    WarmSession,
)
from evalrunner_assets.execution.unsafe_local import UnsafeLocalBackend

__all__ = [
    "BACKENDS",
    "DEFAULT_BACKEND",
    "AmbiguousCommit",
    "BubblewrapBackend",
    "CommitNotFound",
    "CommitNotHex",
    "Limits",
    "NetworkPolicy",
    "RefNotFound",
    "RepoError",
    "RepoExport",
    "RepoSource",
    "SANDBOX_HOME_DIR",
    "SANDBOX_OUT_DIR",
    "SANDBOX_REPO_DIR",
    "SandboxBackend",
    "SandboxRequest",
    "SandboxResult",
    "SandboxStatus",
    "SandboxUnavailable",
    "UnknownBackend",
    "UnsafeLocalBackend",
    "WarmSession",
    "digest_of",
    "make_backend",
    "pid_alive",
    "tree_digest",
]
