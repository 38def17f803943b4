"""``GitHubResource``: the Dagster face of ``resources._github_client.GitHubClient``.

The resource's config holds no secrets — only where to find them (mounted file paths) and how
to reach GitHub. Secret values come from the environment or those files (see
``resources._github_client``). Without any credentials ``is_configured()`` is False and the
report writes its markdown locally instead; no configuration is needed for local runs.
"""

from __future__ import annotations

from typing import Any

import dagster as dg
from pydantic import Field, PrivateAttr

from resources._github_client import (
    CHECK_RUN_NAME,
    DEFAULT_API_URL,
    DEFAULT_MARKER,
    ENV_API_URL,
    ENV_APP_ID,
    ENV_PRIVATE_KEY,
    ENV_TOKEN,
    GitHubClient,
    GitHubCredentials,
    GitHubError,
    OpenedPullRequest,
    PullRequestInfo,
    settings_from_env,
)

__all__ = [
    "CHECK_RUN_NAME",
    "DEFAULT_MARKER",
    "GitHubClient",
    "GitHubCredentials",
    "GitHubError",
    "GitHubResource",
    "OpenedPullRequest",
    "PullRequestInfo",
]


class GitHubResource(dg.ConfigurableResource):
    """Check runs, the one PR comment and changed files on GitHub (or GitHub Enterprise)."""

    base_url: str | None = Field(
        default=None,
        description=f"REST API root, e.g. https://ghe.example.com/api/v3; default ${ENV_API_URL} or {DEFAULT_API_URL}.",
    )
    app_id: str | None = Field(default=None, description=f"GitHub App id (else ${ENV_APP_ID}).")
    installation_id: int | None = Field(
        default=None, description="App installation id; looked up per repository when unset."
    )
    private_key_file: str | None = Field(
        default=None, description=f"Path of the mounted App private key (else ${ENV_PRIVATE_KEY}[_FILE])."
    )
    token_file: str | None = Field(
        default=None,
        description=f"Path of a mounted token, when not using an App (else ${ENV_TOKEN}[_FILE]).",
    )
    max_attempts: int = Field(default=5, description="Tries per operation on rate limits and 5xx.")
    backoff_seconds: float = Field(default=1.0, description="First retry delay; doubles per retry (jittered).")
    max_rate_limit_wait_seconds: float = Field(
        default=120.0, description="Longest rate-limit wait before giving up with a transient GitHubError."
    )
    throttle: bool = Field(default=True, description="Space requests as GitHub advises (PyGithub's pacing).")

    _client: GitHubClient | None = PrivateAttr(default=None)

    def credentials(self) -> GitHubCredentials:
        return GitHubCredentials.from_env(
            app_id=self.app_id,
            installation_id=self.installation_id,
            private_key_file=self.private_key_file,
            token_file=self.token_file,
        )

    def api_url(self) -> str:
        """The configured REST API root, else ``$EVALRUNNER_GITHUB_API_URL``'s (read now), else GitHub's."""
        return settings_from_env(api_url=self.base_url).api_url

    def is_configured(self) -> bool:
        try:
            return self.credentials().configured
        except GitHubError:
            return False

    def get_client(self) -> GitHubClient:
        if self._client is None:
            self._client = GitHubClient(
                self.credentials(),
                base_url=self.api_url(),
                max_attempts=self.max_attempts,
                backoff_seconds=self.backoff_seconds,
                max_rate_limit_wait_seconds=self.max_rate_limit_wait_seconds,
                throttle=self.throttle,
            )
        return self._client

    def start_check_run(
        self, repo: str, head_sha: str, title: str, summary: str, details_url: str | None = None
    ) -> int:
        return self.get_client().start_check_run(repo, head_sha, title, summary, details_url)

    def report_check_run(
        self,
        repo: str,
        head_sha: str,
        status: str,
        conclusion: str | None = None,
        *,
        title: str,
        summary: str,
        text: str | None = None,
    ) -> int:
        return self.get_client().report_check_run(
            repo, head_sha, status, conclusion, title=title, summary=summary, text=text
        )

    def update_check_run(
        self,
        repo: str,
        check_run_id: int,
        status: str,
        conclusion: str | None = None,
        *,
        title: str,
        summary: str,
        text: str | None = None,
    ) -> None:
        self.get_client().update_check_run(
            repo, check_run_id, status, conclusion, title=title, summary=summary, text=text
        )

    def upsert_pr_comment(self, repo: str, pr: int, body: str, marker: str = DEFAULT_MARKER) -> int:
        return self.get_client().upsert_pr_comment(repo, pr, body, marker)

    def post_report(self, repo: str, pr: str, head: str, check: dict[str, Any], body: str) -> dict[str, Any]:
        """Post a PR report (the head's one check run, the one PR comment) when GitHub is
        configured and ``pr`` is a PR number: the ids it created, or ``github_error`` for a
        permanent GitHub error (reported, never hidden); ``{}`` when there is nowhere to post."""
        if not (self.is_configured() and pr.isdigit()):
            return {}
        try:
            client = self.get_client()
            # The head's one check run, found whatever its status: re-opened when more samples
            # run, left untouched when it already shows this verdict.
            run_id = client.report_check_run(
                repo,
                head,
                check["status"],
                check["conclusion"],
                title=check["title"],
                summary=check["summary"],
                text=body,
                details_url=check.get("details_url"),
            )
            comment_id = client.upsert_pr_comment(repo, int(pr), body)
        except GitHubError as exc:
            return {"github_error": str(exc)}
        return {"github_comment_id": comment_id, "github_check_run_id": run_id}

    def changed_files(self, repo: str, pr: int, cap: int = 300) -> list[str]:
        return self.get_client().changed_files(repo, pr, cap)

    def pull_request(self, repo: str, pr: int) -> PullRequestInfo:
        return self.get_client().pull_request(repo, pr)

    def describe(self) -> dict[str, Any]:
        """Non-secret facts for run metadata (which auth mode, which API root)."""
        creds = self.credentials()
        mode = "app" if creds.is_app else ("token" if creds.token else "none")
        return {"auth": mode, "base_url": self.api_url(), "check_run": CHECK_RUN_NAME}
