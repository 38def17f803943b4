"""The base of every error saying a commit's evals cannot be learnt: discovery's own
(:mod:`evalrunner_assets.discovery`) and a failed environment build
(:class:`evalrunner_assets.execution.environment.EnvironmentBuildError`), so the CLI and the
reports handle both as one. Discovery runs in the sandboxes and the sandboxes build
environments; neither owns this base, so both import it from here. Pure standard library.
"""

from __future__ import annotations

from evalrunner_assets.errors import InputError


class DiscoveryError(InputError):
    """Discovery of a repository's evals failed; the message says what and how to fix it."""

    infrastructure = False  # True when the sandbox, not the repository, is at fault
