"""Dagster resources: lake, sandbox, repositories, GitHub. Local defaults need no configuration."""

from resources.github import GitHubResource
from resources.lake import LakeResource
from resources.repo import RepoResource
from resources.sandbox import SandboxResource

__all__ = ["GitHubResource", "LakeResource", "RepoResource", "SandboxResource"]
