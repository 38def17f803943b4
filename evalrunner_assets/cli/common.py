"""What several commands share: the repository id a --repo gets, its mirror and refs, and the
lake they read (refused when there is none yet)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from evalrunner_assets import home
from evalrunner_assets.errors import LakeNotFound, UserError


def repo_id_of(source: str, explicit: str | None) -> str:
    if explicit:
        return explicit
    m = re.search(r"[:/]([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$", source)
    if "://" in source or source.startswith("git@"):
        if not m:
            raise UserError(f"--repo: cannot tell owner/name from {source!r}", hint="pass --repo-id owner/name")
        return f"{m.group(1)}/{m.group(2)}"
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", Path(source).resolve().name) or "repo"
    return f"local/{name}"


def resolve(source: Any, flag: str, ref: str) -> str:
    from evalrunner_assets.execution.repo import RepoError

    try:
        return source.resolve_ref(ref)
    except RepoError as exc:
        lister = (
            f"git ls-remote {source.source}"
            if "://" in source.source or "@" in source.source
            else f"git -C {source.source} branch -a"
        )
        raise UserError(
            f"{flag}: {exc}", hint=f"give {flag} a branch, tag or commit SHA of that repository (`{lister}` lists them)"
        ) from exc


def repo_source(repo_id: str, repo: str) -> Any:
    from evalrunner_assets.execution.repo import RepoError, RepoSource, RepoSubdirectory

    try:
        source = RepoSource(repo_id, repo, cache_dir=str(home.repo_cache()))
        source.ensure_mirror()
    except RepoSubdirectory as exc:
        raise UserError(
            f"--repo: {exc}",
            hint=f"give --repo the repository's root, {exc.top} (.evals/list there may name a "
            "subdirectory as a task's workdir)",
        ) from exc
    except RepoError as exc:
        raise UserError(f"--repo: {exc}", hint="give --repo the path of a git checkout or a clone URL") from exc
    return source


def check_repo_id(repo_id: str, source: str) -> None:
    """Refuse, before any work, a --repo-id already recorded for another repository."""
    from lake import open_lake
    from resources.repo import RepoResource

    RepoResource().check_source(open_lake(home.lake_root()), repo_id, source)


def existing_lake() -> Any:
    """The configured lake, refused when there is nothing there yet."""
    from lake import open_lake

    the_lake = open_lake(home.lake_root())
    if not the_lake.fs.exists(the_lake.root):
        from evalrunner_assets.home import LAKE_ENV, lake_root_setting

        where = LAKE_ENV if lake_root_setting() else "EVALRUNNER_HOME"
        raise LakeNotFound(
            f"no lake at {the_lake.root} (from {where}); run `evalrunner compare` or "
            "`evalrunner demo` first, or point EVALRUNNER_LAKE at an existing lake"
        )
    return the_lake
