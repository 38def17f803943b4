"""Typed discovery errors: each cause is its own class with its own message."""

from __future__ import annotations

from dataclasses import dataclass

from evalrunner_assets.discovery_error import DiscoveryError
from evalrunner_assets.errors import Outage, first_line, last_line

# The repository's own manifest command (relative to its root).
LIST_PATH = ".evals/list"


class NoEvalsFound(DiscoveryError):
    """Neither ``.evals/list`` nor any Inspect ``@task`` in the repository."""


class ListNotRegularFile(DiscoveryError):
    """``.evals/list`` exists but is a directory, symlink or special file."""


class ListNotExecutable(DiscoveryError):
    """``.evals/list`` exists but has no execute bit."""


class ListFailed(DiscoveryError):
    """``.evals/list`` exited non-zero; ``stderr_tail`` holds the end of its stderr."""

    def __init__(self, message: str, exit_code: int | None, stderr_tail: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.stderr_tail = stderr_tail

    def cli_wording(self) -> tuple[str, str | None]:
        """The command line's line (the exit code and the last line on stderr) and hint."""
        cause = last_line(self.stderr_tail) or "(nothing on stderr)"
        return (
            f"{LIST_PATH} exited with code {self.exit_code}: {first_line(cause, 300)}",
            f"run {LIST_PATH} at the repository root to see the whole error; "
            "it must print the JSON manifest on stdout and exit 0",
        )


class ListTimeout(DiscoveryError):
    """``.evals/list`` did not finish within its time limit."""


class ListOutputTooLarge(DiscoveryError):
    """``.evals/list`` printed more than the size cap."""


class ListKilled(DiscoveryError):
    """``.evals/list`` was killed by a resource limit (memory, pids, CPU, file size)."""


class DiscoverySandboxFailure(Outage, DiscoveryError):
    """The sandbox itself failed or was cancelled: an infrastructure fault, not the repo's."""

    infrastructure = True


class ManifestNotJSON(DiscoveryError):
    """The output is not UTF-8 JSON; ``position`` is the character (or byte) offset."""

    def __init__(
        self, message: str, *, position: int, line: int | None = None, column: int | None = None, source: str = ""
    ) -> None:
        super().__init__(message)
        self.position = position
        self.line = line
        self.column = column
        self.source = source

    def cli_wording(self) -> tuple[str, str | None]:
        return (first_line(self), f"make {LIST_PATH} print only the JSON manifest on stdout (anything else to stderr)")


@dataclass(frozen=True)
class SchemaViolation:
    """One violation: the JSON path (``$.tasks[0].id``) and what is wrong there."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class ManifestSchemaError(DiscoveryError):
    """The manifest violates the schema or its rules; ``violations`` lists every one."""

    def __init__(self, source: str, violations: list[SchemaViolation]) -> None:
        self.source = source
        self.violations = violations
        head = "; ".join(str(v) for v in violations[:5])
        more = f" (and {len(violations) - 5} more)" if len(violations) > 5 else ""
        super().__init__(f"manifest from {source} is invalid: {head}{more}")

    def cli_wording(self) -> tuple[str, str | None]:
        return (first_line(self), "fix the manifest; its schema is evalrunner_assets/discovery/manifest.schema.json")


class InspectListFailed(DiscoveryError):
    """The zero-manifest fallback (Inspect's own task listing) failed."""

    def __init__(self, message: str, stderr_tail: str = "") -> None:
        super().__init__(message)
        self.stderr_tail = stderr_tail

    def cli_wording(self) -> tuple[str, str | None]:
        cause = last_line(self.stderr_tail)
        what = first_line(str(self).split(":")[0] if cause else str(self))
        return (
            f"{what}: {first_line(cause, 300)}" if cause else what,
            f"without {LIST_PATH} the repository's Python files are imported to find its @task "
            f"functions; fix that error, or add an executable {LIST_PATH} printing the manifest",
        )
