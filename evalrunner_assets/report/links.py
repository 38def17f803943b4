"""Where the web pages of a comparison live, for the reports that link to them.

The web app (``evalrunner serve`` mounts it at ``/web``) builds its own links from these paths,
and the PR comment, the check run and the Dagster materializations link to the same pages when
``EVALRUNNER_WEB_URL`` says where people reach the app (e.g. ``https://evalrunner.example.com/web``).
Unset, nothing links anywhere and every report reads exactly as it did without the pages.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlencode, urlsplit

from evalrunner_assets.errors import UserError

WEB_URL_ENV = "EVALRUNNER_WEB_URL"


def _segment(text: str) -> str:
    """One path segment, or an ``owner/name`` pair, percent-encoded (a task name may hold
    spaces or ``#``; the slash of a task family ``triage/lookup`` stays a separator)."""
    return quote(text, safe="/")


def pull_request_path(repo: str, pr: int | str, head_sha: str) -> str:
    return f"/prs/{_segment(repo)}/{_segment(str(pr))}/{_segment(head_sha)}"


def budget_path(repo: str, pr: int | str, head_sha: str) -> str:
    """The comparison's "how many samples until we know?" page."""
    return pull_request_path(repo, pr, head_sha) + "/budget"


def run_path(repo: str, pr: int | str, head_sha: str) -> str:
    """Where the comparison stands: per task, windows landed and to run; refreshes while it runs."""
    return pull_request_path(repo, pr, head_sha) + "/run"


def more_samples_path(repo: str, pr: int | str, head_sha: str) -> str:
    """Where the PR page posts "ask for more samples", the page's `/eval more N` (token-authorized)."""
    return pull_request_path(repo, pr, head_sha) + "/more"


def cohorts_path() -> str:
    return "/cohorts"


def series_path(repo: str, branch: str | None = None) -> str:
    """One repository's main-branch series (``branch``: another branch's)."""
    path = f"/cohorts/{_segment(repo)}"
    return path if branch is None else f"{path}?{urlencode({'branch': branch})}"


def continuum_list_path() -> str:
    return "/continuum"


def continuum_path(repo: str) -> str:
    """One repository's candidates on the cost/score frontier and the promotion decision."""
    return f"/continuum/{_segment(repo)}"


def finetunes_path() -> str:
    return "/finetunes"


def activate_path(repo: str, name: str) -> str:
    """Where the fine-tune page posts "Open PR to activate" (token-authorized)."""
    return f"/finetunes/{_segment(repo)}/{_segment(name)}/activate"


def leaderboards_path() -> str:
    return "/leaderboard"


def leaderboard_path(task_set: str, reference: str | None = None) -> str:
    """One SWE task set's leaderboard (``reference``: the version paired against)."""
    query = f"?{urlencode({'reference': reference})}" if reference else ""
    return f"/leaderboard/{_segment(task_set)}{query}"


def report_path() -> str:
    """The bug report: a failure trace becomes an anonymised eval (preview, then submit)."""
    return "/report"


def pull_requests_path() -> str:
    return "/prs"


def trajectories_path(repo: str, commit: str, task: str, base_sha: str | None = None) -> str:
    query = f"?{urlencode({'base': base_sha})}" if base_sha else ""
    return f"/trajectories/{_segment(repo)}/{_segment(commit)}/{_segment(task)}{query}"


def trajectory_path(repo: str, commit: str, task: str, sample_id: str, epoch: int, base_sha: str | None = None) -> str:
    params = {"sample": sample_id, "epoch": str(epoch), **({"base": base_sha} if base_sha else {})}
    return f"/trajectory/{_segment(repo)}/{_segment(commit)}/{_segment(task)}?{urlencode(params)}"


@dataclass(frozen=True)
class WebLinks:
    """Absolute links to the pages, under ``base`` (the app's public root, no trailing slash)."""

    base: str

    def pull_request(self, repo: str, pr: int | str, head_sha: str) -> str:
        return self.base + pull_request_path(repo, pr, head_sha)

    def trajectories(self, repo: str, commit: str, task: str, base_sha: str | None = None) -> str:
        return self.base + trajectories_path(repo, commit, task, base_sha)

    def continuum(self, repo: str) -> str:
        return self.base + continuum_path(repo)


def parse_web_url(value: str, *, source: str = WEB_URL_ENV) -> WebLinks:
    """``value`` checked as the web app's public root: an http(s) URL with a host and no query
    or fragment (links are appended to it). A bad one is an error naming ``source``."""
    url = value.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UserError(
            f"{source}={value!r} is not an http(s) URL with a host",
            hint="set it to where people open the web pages, e.g. https://evalrunner.example.com/web",
        )
    if parts.query or parts.fragment:
        raise UserError(f"{source}={value!r} has a query or fragment; the pages' paths are appended to it")
    return WebLinks(url)


def web_links(environ: Mapping[str, str] | None = None) -> WebLinks | None:
    """The links configured by ``EVALRUNNER_WEB_URL`` (read now, not at import), or None when
    it is unset or empty."""
    value = (os.environ if environ is None else environ).get(WEB_URL_ENV, "")
    return parse_web_url(value) if value.strip() else None
