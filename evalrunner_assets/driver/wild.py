"""Opening an eval from the wild as a PR from a server (the web app's bug-report page): the
manifest is edited from the repository's default branch as its mirror holds it, since a server
has no checkout of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalrunner_assets.errors import UserError
from evalrunner_assets.wild import Submission


def open_wild_pr(resources: dict[str, Any], repo_id: str, submission: Submission, *, branch: str | None = None) -> Any:
    """Open the PR adding ``submission``'s evals to ``repo_id`` (a repository registered in the
    lake: `evalrunner repos add`, or any comparison of it); returns the opened PR."""
    from resources.repo import RepoNotRegistered

    lake = resources["lake"].open()
    repos = resources["repos"]
    try:
        source = repos.source(lake, repo_id)
    except RepoNotRegistered as exc:  # the person chose a repository this lake cannot fetch
        raise UserError(str(exc), hint=f"register it: evalrunner repos add {repo_id} <clone URL or path>") from exc
    source.update()  # the manifest is edited from the newest default branch
    default_head = source.resolve_ref("HEAD")
    checkout = repos.export(lake, repo_id, default_head)
    return submission.open_pr(
        resources["github"].get_client(), repo_id, Path(checkout.path), branch or submission.default_branch()
    )
