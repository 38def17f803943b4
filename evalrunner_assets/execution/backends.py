"""Choosing a sandbox backend by name."""

from __future__ import annotations

import os

from evalrunner_assets.execution.bubblewrap import BubblewrapBackend
from evalrunner_assets.execution.sandbox import SandboxBackend
from evalrunner_assets.execution.unsafe_local import UnsafeLocalBackend

DEFAULT_BACKEND = "bubblewrap"
BACKENDS = ("bubblewrap", "unsafe-local")


def default_workers() -> int:
    """Sandboxes one comparison runs at once on a local backend: one per core."""
    return max(1, os.cpu_count() or 1)


class UnknownBackend(ValueError):
    """No sandbox backend has that name."""


def make_backend(name: str = DEFAULT_BACKEND, **options: object) -> SandboxBackend:
    """A backend by name: ``bubblewrap`` (default) or ``unsafe-local`` (explicit only).

    ``options`` go to the backend's constructor (e.g. ``staging_dir``)."""
    if name == "bubblewrap":
        return BubblewrapBackend(**options)  # type: ignore[arg-type]
    if name == "unsafe-local":
        return UnsafeLocalBackend(**options)  # type: ignore[arg-type]
    if name == "kubernetes":
        try:
            from evalrunner_assets.execution.kubernetes import KubernetesBackend  # type: ignore[import-not-found]
        except ImportError as exc:
            raise UnknownBackend("the kubernetes backend is not available in this build") from exc
        return KubernetesBackend(**options)  # type: ignore[no-any-return]
    raise UnknownBackend(f"unknown sandbox backend {name!r}; choose one of {', '.join(BACKENDS)}")
