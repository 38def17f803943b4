"""Repositories: where each is fetched from, and exports of exact commits (no .git)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg

from evalrunner_assets import home
from evalrunner_assets.errors import EvalrunnerError
from evalrunner_assets.execution.repo import RepoIdInUse, RepoSource, export_commit
from evalrunner_assets.execution.sandbox import RepoExport
from lake import LAYOUT, Lake


def recorded_source(source: str) -> str:
    """A source as recorded: a local path made absolute; a URL as given."""
    if "://" in source or source.startswith("git@"):
        return source
    return os.path.abspath(source)


def _same_source(a: str, b: str) -> bool:
    """Whether two recorded sources name one repository (symlinks, a trailing slash or ``.git``
    make no difference)."""

    def canonical(s: str) -> str:
        if "://" in s or s.startswith("git@"):
            s = s.rstrip("/")
            return s[: -len(".git")] if s.endswith(".git") else s
        return os.path.realpath(s)

    return canonical(a) == canonical(b)


class RepoNotRegistered(EvalrunnerError, LookupError):
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

    def register(self, lake: Lake, repo: str, source: str, *, repoint: bool = False) -> None:
        """Record where ``repo`` comes from (a clone URL or a local path). An id names one
        repository: one already recorded with another source raises :class:`RepoIdInUse`
        unless ``repoint`` says to move it (results under the id would otherwise silently
        mix two repositories, and a series would find commits that are not on its history)."""
        source = recorded_source(source)
        if not repoint and self.check_source(lake, repo, source) is not None:
            return  # already recorded for this repository (perhaps by another path to it)
        lake.write_bytes(LAYOUT.repo_source(repo), json.dumps({"repo": repo, "source": source}).encode())

    def check_source(self, lake: Lake, repo: str, source: str) -> str | None:
        """The source recorded for ``repo`` (None when there is none); raises
        :class:`RepoIdInUse` when it is another repository than ``source``."""
        rel = LAYOUT.repo_source(repo)
        if not lake.exists(rel):
            return None
        registered = str(json.loads(lake.read_bytes(rel)).get("source", ""))
        source = recorded_source(source)
        if registered and registered != source and not _same_source(registered, source):
            raise RepoIdInUse(repo, registered, source)
        return registered

    def registered(self, lake: Lake) -> list[tuple[str, str]]:
        """Every recorded (repository id, source), by id."""
        out = []
        for rel in lake.glob(LAYOUT.repo_sources_glob()):
            data = json.loads(lake.read_bytes(rel))
            out.append((str(data.get("repo")), str(data.get("source"))))
        return sorted(out)

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
