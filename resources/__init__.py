"""Dagster resources: lake, sandbox, repositories, GitHub. Local defaults need no configuration."""

from typing import Any

from resources.github import GitHubResource
from resources.lake import LakeResource
from resources.repo import RepoResource
from resources.sandbox import SandboxResource

__all__ = ["GitHubResource", "LakeResource", "RepoResource", "SandboxResource", "default_resources"]


def default_resources(**overrides: Any) -> dict[str, Any]:
    """The resources by the names the assets and the comparison engine use, each with its
    local defaults (no configuration); ``overrides`` replace some by name."""
    return {
        "lake": LakeResource(),
        "sandbox": SandboxResource(),
        "repos": RepoResource(),
        "github": GitHubResource(),
        **overrides,
    }
