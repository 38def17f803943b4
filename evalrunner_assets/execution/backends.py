"""Choosing a sandbox backend by name."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from evalrunner_assets.errors import InputError
from evalrunner_assets.execution.bubblewrap import BubblewrapBackend
from evalrunner_assets.execution.sandbox import SandboxBackend
from evalrunner_assets.execution.sandbox_settings import BACKENDS, DEFAULT_BACKEND
from evalrunner_assets.execution.unsafe_local import UnsafeLocalBackend

if TYPE_CHECKING:  # the Kubernetes modules load only in processes that use that backend
    from evalrunner_assets.execution.kubernetes import KubernetesSandboxConfig

__all__ = ["BACKENDS", "DEFAULT_BACKEND", "UnknownBackend", "default_workers", "make_backend"]


def default_workers() -> int:
    """Sandboxes one comparison runs at once on a local backend: one per core."""
    return max(1, os.cpu_count() or 1)


class UnknownBackend(InputError, ValueError):
    """No sandbox backend has that name."""


def make_backend(
    name: str = DEFAULT_BACKEND,
    *,
    staging_dir: str | None = None,
    kubernetes: KubernetesSandboxConfig | None = None,
) -> SandboxBackend:
    """A backend by name: ``bubblewrap`` (default), ``unsafe-local`` (explicit only) or
    ``kubernetes``.

    ``staging_dir``: where a local backend stages each sandbox's files (default: the system's
    temporary directory). ``kubernetes``: the Kubernetes backend's configuration (it has no default image)."""
    if name == "bubblewrap":
        return BubblewrapBackend(staging_dir)
    if name == "unsafe-local":
        return UnsafeLocalBackend(staging_dir)
    if name == "kubernetes":
        try:
            from evalrunner_assets.execution.kubernetes import KubernetesBackend
        except ImportError as exc:
            raise UnknownBackend("the kubernetes backend is not available in this build") from exc
        return KubernetesBackend(kubernetes)
    raise UnknownBackend(f"unknown sandbox backend {name!r}; choose one of {', '.join(BACKENDS)}")
