"""Choosing a sandbox backend by name."""

from __future__ import annotations

import os
from typing import Any

from evalrunner_assets.errors import InputError
from evalrunner_assets.execution.bubblewrap import BubblewrapBackend
from evalrunner_assets.execution.sandbox import SandboxBackend
from evalrunner_assets.execution.sandbox_settings import BACKENDS, DEFAULT_BACKEND
from evalrunner_assets.execution.unsafe_local import UnsafeLocalBackend

__all__ = ["BACKENDS", "DEFAULT_BACKEND", "UnknownBackend", "default_workers", "make_backend"]


def default_workers() -> int:
    """Sandboxes one comparison runs at once on a local backend: one per core."""
    return max(1, os.cpu_count() or 1)


class UnknownBackend(InputError, ValueError):
    """No sandbox backend has that name."""


def make_backend(name: str = DEFAULT_BACKEND, **options: Any) -> SandboxBackend:
    """A backend by name: ``bubblewrap`` (default), ``unsafe-local`` (explicit only) or
    ``kubernetes``.

    ``options`` go to the backend's constructor (e.g. ``staging_dir``; the Kubernetes backend
    takes its configuration fields, e.g. ``image`` and ``namespace``)."""
    if name == "bubblewrap":
        return BubblewrapBackend(**options)
    if name == "unsafe-local":
        return UnsafeLocalBackend(**options)
    if name == "kubernetes":
        try:
            from evalrunner_assets.execution.kubernetes import KubernetesBackend
        except ImportError as exc:
            raise UnknownBackend("the kubernetes backend is not available in this build") from exc
        return KubernetesBackend(**options)
    raise UnknownBackend(f"unknown sandbox backend {name!r}; choose one of {', '.join(BACKENDS)}")
