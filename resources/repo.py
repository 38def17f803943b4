"""Repositories: where each is fetched from, and exports of exact commits (no .git)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg

from evalrunner_assets import home
from evalrunner_assets.execution.repo import RepoSource, export_commit
from evalrunner_assets.execution.sandbox import RepoExport
from lake import LAYOUT, Lake


class RepoNotRegistered(LookupError):
    """No source is recorded for a repository id."""


class RepoResource(dg.ConfigurableResource):
    """Remote repositories are mirrored once under ``cache_dir``; exports go to ``export_dir``.
    Empty values mean ``<EVALRUNNER_HOME>/repos`` and ``<EVALRUNNER_HOME>/exports``."""

    cache_dir: str = ""
    export_dir: str = ""

    def _cache(self) -> Path:
        return Path(self.cache_dir) if self.cache_dir else home.repo_cache()

    def _exports(self) -> Path:
        return Path(self.export_dir) if self.export_dir else home.export_root()

    def register(self, lake: Lake, repo: str, source: str) -> None:
        """Record where ``repo`` comes from (a clone URL or a local path)."""
        if "://" not in source and not source.startswith("git@"):
            source = os.path.abspath(source)
        lake.write_bytes(LAYOUT.repo_source(repo), json.dumps({"repo": repo, "source": source}).encode())

    def source(self, lake: Lake, repo: str) -> RepoSource:
        rel = LAYOUT.repo_source(repo)
        if not lake.exists(rel):
            raise RepoNotRegistered(
                f"no source recorded for repository {repo!r} (expected {lake.url(rel)}); "
                "start a comparison for it first, or register it"
            )
        source = json.loads(lake.read_bytes(rel))["source"]
        return RepoSource(repo, source, cache_dir=str(self._cache()))

    def export(self, lake: Lake, repo: str, commit: str) -> RepoExport:
        from evalrunner_assets.execution.repo import CommitNotFound

        src = self.source(lake, repo)
        if not src.ensure_mirror():
            try:
                src.resolve_commit(commit)
            except CommitNotFound:
                src.update()  # a new push: fetch once, then resolve again
        return export_commit(src, commit, self._exports())
