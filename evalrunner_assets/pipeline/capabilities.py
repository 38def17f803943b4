"""What the comparison engine needs from its surroundings, one protocol per capability, and how
one comparison runs (:class:`EngineOptions`).

The engine knows no Dagster: the Dagster resources (``resources.LakeResource``,
``SandboxResource``, ``RepoResource``, ``GitHubResource``) satisfy these protocols structurally,
and so can any stand-in. :class:`EngineResources` holds one of each; a mapping by the names the
assets use (``lake``, ``sandbox``, ``repos``, ``github``) converts with
:meth:`EngineResources.from_mapping`. Optional capabilities (a sandbox resource that knows its
worker count, a backend that counts its sandboxes, a GitHub that posts reports) are checked with
``isinstance`` against their runtime-checkable protocol.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from evalrunner_assets.errors import InputError
from evalrunner_assets.execution.sandbox import RepoExport, SandboxBackend
from evalrunner_assets.pipeline.lease import Lease
from evalrunner_assets.pipeline.loop import Step
from evalrunner_assets.pipeline.publish import ReportPoster
from evalrunner_assets.pipeline.scheduler import DEFAULT_BREAKER_THRESHOLD
from lake import Lake

if TYPE_CHECKING:
    from evalrunner_assets.documents.comparison import ComparisonDocument
    from evalrunner_assets.execution.warm_pool import WarmPool

__all__ = [
    "PROGRESS_EVERY_S",
    "EngineOptions",
    "EngineResources",
    "LakeOpener",
    "ReportPoster",
    "RepoStore",
    "ResourceMissing",
    "SandboxCounter",
    "SandboxProvider",
    "WorkerCounter",
]

# The comparison document is saved again for progress at most this often while windows run.
PROGRESS_EVERY_S = 20.0


@runtime_checkable
class LakeOpener(Protocol):
    """Opens the lake the comparison reads and lands in."""

    def open(self) -> Lake: ...


@runtime_checkable
class SandboxProvider(Protocol):
    """Makes the sandbox backend windows run on, and holds the process's warm sandboxes."""

    def backend(self, context: object | None = None) -> SandboxBackend:
        """A backend; ``context`` is the caller's run context (a Dagster run's, for backends
        that report into the run), passed through untouched."""
        ...

    def warm_pool(self) -> WarmPool | None:
        """The pool of warm sandboxes successive windows reuse (None: every window starts cold)."""
        ...


@runtime_checkable
class WorkerCounter(Protocol):
    """A sandbox provider that knows how many windows one comparison runs at once on it."""

    def worker_count(self) -> int: ...


@runtime_checkable
class SandboxCounter(Protocol):
    """A backend that counts the sandboxes it started (e.g. cold pods vs warm session pods)."""

    def sandbox_counts(self) -> dict[str, int]: ...


@runtime_checkable
class RepoStore(Protocol):
    """Where the comparison's repository comes from: registered once, then exported per commit."""

    def register(self, lake: Lake, repo: str, source: str) -> None: ...

    def export(self, lake: Lake, repo: str, commit: str) -> RepoExport: ...


class ResourceMissing(InputError, TypeError):
    """A resource the engine needs is missing, or lacks the capability it is used for."""


@dataclass(frozen=True)
class EngineResources:
    """The engine's surroundings: the lake, the sandboxes, the repositories and (optionally)
    where reports are posted besides the lake."""

    lake: LakeOpener
    sandbox: SandboxProvider
    repos: RepoStore
    github: ReportPoster | None = None

    @classmethod
    def from_mapping(cls, resources: Mapping[str, object]) -> EngineResources:
        """The resources by the names the assets use (``lake``, ``sandbox``, ``repos``, and
        ``github``, which is used only when it posts reports)."""
        lake, sandbox, repos = resources.get("lake"), resources.get("sandbox"), resources.get("repos")
        github = resources.get("github")
        if not isinstance(lake, LakeOpener):
            raise _missing("lake", "LakeOpener", lake)
        if not isinstance(sandbox, SandboxProvider):
            raise _missing("sandbox", "SandboxProvider", sandbox)
        if not isinstance(repos, RepoStore):
            raise _missing("repos", "RepoStore", repos)
        return cls(lake=lake, sandbox=sandbox, repos=repos, github=github if isinstance(github, ReportPoster) else None)


def _missing(name: str, capability: str, value: object) -> ResourceMissing:
    got = "nothing" if value is None else f"a {type(value).__name__}"
    return ResourceMissing(f"resource {name!r}: the comparison engine needs a {capability}, got {got}")


@dataclass(frozen=True)
class EngineOptions:
    """How one comparison runs; every default is ``evalrunner compare``'s.

    ``workers``: sandboxes running at once (default: the sandbox resource's worker count, else
    the machine's cores). ``packed=False`` keeps a barrier per round (for measurements).
    ``progress_every_s``: while windows run, the comparison is saved again (and reported) when
    a task's samples are recorded, at most this often. ``report_at_start``: save and report the
    comparison before the commits are learnt. ``retry_failed``: windows that failed on
    infrastructure before this call are tried again (their failure records retired to
    ``failures-retired/``). ``model_gateway``: run the model gateway (default: when the model is
    ``openai/…`` or ``anthropic/…``). ``breaker_threshold``: consecutive infrastructure
    failures that trip the outage breaker. ``stop``: set by the caller to cancel. ``on_step(step,
    saved document)`` is told of each learnt commit, finished window step and saved comparison.
    ``sandbox_context`` is handed to the sandbox provider's ``backend``. ``lease_owner`` names
    this engine to another that finds the comparison busy; ``lease_wait`` waits a live holder
    out (``on_lease_wait(holder)`` is told once) instead of raising ``ComparisonBusy``."""

    workers: int | None = None
    packed: bool = True
    progress_every_s: float = PROGRESS_EVERY_S
    report_at_start: bool = False
    retry_failed: bool = True
    model_gateway: bool | None = None
    breaker_threshold: int = DEFAULT_BREAKER_THRESHOLD
    stop: threading.Event | None = None
    on_step: Callable[[Step, ComparisonDocument | None], None] | None = None
    sandbox_context: object | None = None
    lease_owner: str = "evalrunner compare"
    lease_wait: bool = True
    on_lease_wait: Callable[[Lease], None] | None = None
