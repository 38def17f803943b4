"""The GitHub surface evalrunner uses, over PyGithub, without Dagster.

``GitHubClient`` posts the check run ``evalrunner / evals`` on a PR's head SHA, keeps exactly
one PR comment (found by a hidden ``<!-- evalrunner:… -->`` marker and edited in place), and
lists a PR's changed files. Every operation is a whole find-or-write step run under one retry
loop: rate limits (403/429 with rate-limit headers) and transient failures (5xx, connection
errors) are retried with backoff, and because a retry re-runs the *find* too, a create whose
response was lost (a 502 after GitHub acted) is found on the next attempt instead of duplicated.
Anything else raises ``GitHubError`` naming the operation, repository and cause.

Credentials come from the environment or mounted files only and are never logged:
- GitHub App (preferred): ``EVALRUNNER_GITHUB_APP_ID`` + ``EVALRUNNER_GITHUB_PRIVATE_KEY`` or
  ``EVALRUNNER_GITHUB_PRIVATE_KEY_FILE``; optional ``EVALRUNNER_GITHUB_INSTALLATION_ID``
  (otherwise looked up per repository). Installation tokens are minted and refreshed by PyGithub.
- a token: ``EVALRUNNER_GITHUB_TOKEN`` or ``EVALRUNNER_GITHUB_TOKEN_FILE``. GitHub lets only
  Apps (including Actions' ``GITHUB_TOKEN``) write check runs; a personal token can comment.
``EVALRUNNER_GITHUB_API_URL`` points at GitHub Enterprise (``https://host/api/v3``) or a test server.
"""

from __future__ import annotations

import logging
import random
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import islice
from typing import Any, TypeVar

from evalrunner_assets import github_settings as settings
from evalrunner_assets.errors import EvalrunnerError
from evalrunner_assets.github_settings import DEFAULT_API_URL, GitHubSettingError, GitHubSettings

T = TypeVar("T")
log = logging.getLogger("evalrunner.github")

CHECK_RUN_NAME = "evalrunner / evals"
DEFAULT_MARKER = "<!-- evalrunner:pr-report -->"
MAX_COMMENT_CHARS = 65536  # GitHub rejects longer comment bodies
MAX_CHECK_TEXT_CHARS = 65535  # and longer check-run output fields

_MARKER = re.compile(r"^<!-- evalrunner:[A-Za-z0-9_.:/#@-]{1,100} -->$")
_STATUSES = ("queued", "in_progress", "completed")
_CONCLUSIONS = ("success", "failure", "neutral", "cancelled", "skipped", "timed_out", "action_required")
_TRANSIENT_STATUS = (500, 502, 503, 504)

# The variables' names, defined in evalrunner_assets/github_settings.py.
ENV_TOKEN = settings.TOKEN.env
ENV_APP_ID = settings.APP_ID.env
ENV_PRIVATE_KEY = settings.PRIVATE_KEY.env
ENV_INSTALLATION_ID = settings.INSTALLATION_ID.env
ENV_API_URL = settings.API_URL.env


class GitHubError(EvalrunnerError, RuntimeError):
    """A GitHub call failed for good (or stayed rate-limited past the wait budget).

    ``transient`` says whether trying again later may succeed; ``status`` is the HTTP status
    when there was one. Callers report it on the run; nothing here crashes a sensor.
    """

    def __init__(
        self, message: str, *, operation: str, repo: str | None, status: int | None = None, transient: bool = False
    ) -> None:
        super().__init__(message)
        self.operation = operation
        self.repo = repo
        self.status = status
        self.transient = transient


# -- the verdict → check-run mapping -----------------------------------------------------------
# -- credentials -------------------------------------------------------------------------------
def settings_from_env(env: Mapping[str, str] | None = None, **given: Any) -> GitHubSettings:
    """``github_settings`` (read now), a bad value raised as a ``GitHubError`` naming the variable."""
    try:
        return settings.github_settings(env, **given)
    except GitHubSettingError as exc:
        raise GitHubError(str(exc), operation="configure", repo=None) from None


def _secret_from(name: str, value: str | None, path: str | None) -> str | None:
    """The secret ``value``, else the file at ``path`` (trailing newline stripped)."""
    if value and path:
        raise GitHubError(
            f"set only one of {name} and a file for it ({name}_FILE), not both", operation="configure", repo=None
        )
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read().strip()
        except OSError as exc:
            raise GitHubError(
                f"secret file {path!r} for {name} cannot be read: {exc.strerror}", operation="configure", repo=None
            ) from exc
        if not text:
            raise GitHubError(f"secret file {path!r} for {name} is empty", operation="configure", repo=None)
        return text
    return value or None


@dataclass(frozen=True)
class GitHubCredentials:
    """A token, or a GitHub App (id + private key, optional fixed installation)."""

    token: str | None = field(default=None, repr=False)
    app_id: str | None = None
    private_key: str | None = field(default=None, repr=False)
    installation_id: int | None = None

    def __post_init__(self) -> None:
        if self.app_id and not self.private_key:
            raise GitHubError(
                f"GitHub App {self.app_id} has no private key: set {ENV_PRIVATE_KEY} or {ENV_PRIVATE_KEY}_FILE",
                operation="configure",
                repo=None,
            )
        if self.private_key and not self.app_id:
            raise GitHubError(f"a GitHub App private key is set but no {ENV_APP_ID}", operation="configure", repo=None)

    @property
    def is_app(self) -> bool:
        return bool(self.app_id)

    @property
    def configured(self) -> bool:
        return self.is_app or bool(self.token)

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        app_id: str | None = None,
        installation_id: int | None = None,
        private_key_file: str | None = None,
        token_file: str | None = None,
    ) -> GitHubCredentials:
        s = settings_from_env(
            env,
            app_id=app_id,
            installation_id=installation_id,
            private_key_file=private_key_file,
            token_file=token_file,
        )
        if s.app_id:
            return cls(
                app_id=str(s.app_id),
                private_key=_secret_from(ENV_PRIVATE_KEY, s.private_key, s.private_key_file),
                installation_id=s.installation_id,
            )
        return cls(token=_secret_from(ENV_TOKEN, s.token, s.token_file))


@dataclass(frozen=True)
class PullRequestInfo:
    repo: str
    number: int
    head_sha: str
    base_sha: str
    base_ref: str
    state: str


@dataclass(frozen=True)
class OpenedPullRequest:
    """A pull request opened (or found open) by ``GitHubClient.open_file_change_pr``."""

    repo: str
    number: int
    url: str  # the HTML page when GitHub gives one
    branch: str  # the head branch
    base_ref: str
    base_sha: str  # the commit the branch was made from
    head_sha: str  # the one commit on the branch
    path: str  # the file the commit changes
    created: bool  # False: an open PR from ``branch`` already existed and is returned as is


# -- the client --------------------------------------------------------------------------------
class GitHubClient:
    """PyGithub behind typed, retried operations. Construct once and reuse (tokens are cached)."""

    def __init__(
        self,
        credentials: GitHubCredentials,
        *,
        base_url: str = DEFAULT_API_URL,
        timeout: int = 15,
        max_attempts: int = 5,
        backoff_seconds: float = 1.0,
        backoff_max_seconds: float = 30.0,
        max_rate_limit_wait_seconds: float = 120.0,
        throttle: bool = True,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not credentials.configured:
            raise GitHubError(
                f"no GitHub credentials: set {ENV_APP_ID} + {ENV_PRIVATE_KEY}(_FILE) for a "
                f"GitHub App, or {ENV_TOKEN}(_FILE)",
                operation="configure",
                repo=None,
            )
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        self.credentials = credentials
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.backoff_seconds = backoff_seconds
        self.backoff_max_seconds = backoff_max_seconds
        self.max_rate_limit_wait_seconds = max_rate_limit_wait_seconds
        # PyGithub's own spacing of requests/writes (0.25 s / 1 s) follows GitHub's advice for
        # avoiding secondary rate limits; tests switch it off.
        self.throttle = throttle
        self._sleep = sleep
        self._lock = threading.Lock()
        self._clients: dict[Any, Any] = {}
        self._installations: dict[str, int] = {}
        self._login: dict[Any, str | None] = {}

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **kwargs: Any) -> GitHubClient:
        kwargs.setdefault("base_url", settings_from_env(env).api_url)
        return cls(GitHubCredentials.from_env(env), **kwargs)

    # -- public operations ---------------------------------------------------------------------
    def start_check_run(
        self, repo: str, head_sha: str, title: str, summary: str, details_url: str | None = None
    ) -> int:
        """Mark ``evalrunner / evals`` on ``head_sha`` in progress; returns the check run id.

        A head has one check run of ours, whatever its status: an open one is updated, a
        completed one is re-opened (more samples will run); one is created only when the head
        has none. Use ``report_check_run`` when it is not known whether samples will run.
        """
        return self.report_check_run(
            repo, head_sha, "in_progress", title=title, summary=summary, details_url=details_url
        )

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
        details_url: str | None = None,
    ) -> int:
        """Bring the head's one ``evalrunner / evals`` check run to this state; returns its id.

        The run is found whatever its status and edited in place (a completed run goes back to
        in_progress when more samples will run); it is left untouched when it already shows
        exactly this state (e.g. ``/eval more`` on a decided head, where nothing runs). A new
        run is created only when the head has none.
        """
        _check_repo(repo)
        _check_sha(head_sha)
        kwargs = _check_state(status, conclusion)
        output = _output(title, summary, text)

        def op() -> int:
            runs = self._our_check_runs(repo, head_sha)
            if not runs:
                created = self._repo(repo).create_check_run(
                    name=CHECK_RUN_NAME,
                    head_sha=head_sha,
                    started_at=_utcnow(),
                    output=output,
                    **kwargs,
                    **_opt(details_url=details_url),
                )
                return int(created.id)
            run = max(runs, key=lambda r: int(r.id))  # the newest, if history left several
            if _shows(run, status, conclusion, output) and details_url in (None, run.details_url):
                return int(run.id)
            run.edit(output=output, **kwargs, **_opt(details_url=details_url))
            return int(run.id)

        return self._call("report check run", repo, op)

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
        """Set a check run's status (and conclusion when completed) and its output."""
        _check_repo(repo)
        kwargs: dict[str, Any] = {**_check_state(status, conclusion), "output": _output(title, summary, text)}

        def op() -> None:
            self._repo(repo).get_check_run(int(check_run_id)).edit(**kwargs)

        self._call(f"update check run {check_run_id}", repo, op)

    def upsert_pr_comment(self, repo: str, pr: int, body: str, marker: str = DEFAULT_MARKER) -> int:
        """Create or edit in place the one comment on ``pr`` carrying ``marker``; returns its id."""
        _check_repo(repo)
        if not _MARKER.match(marker):
            raise ValueError(f"comment marker {marker!r} must look like '<!-- evalrunner:name -->'")
        if marker not in body:
            body = f"{marker}\n{body}"
        if len(body) > MAX_COMMENT_CHARS:
            raise GitHubError(
                f"comment for {repo}#{pr} is {len(body)} characters; GitHub accepts at most {MAX_COMMENT_CHARS}",
                operation="upsert comment",
                repo=repo,
            )

        def op() -> int:
            me = self._whoami(repo)
            issue = self._repo(repo).get_issue(int(pr))
            for comment in issue.get_comments():
                if marker in (comment.body or "") and (me is None or comment.user.login == me):
                    if comment.body != body:
                        comment.edit(body)
                    return int(comment.id)
            return int(issue.create_comment(body).id)

        return self._call(f"upsert comment on #{pr}", repo, op)

    def create_issue(self, repo: str, title: str, body: str) -> str:
        """Open an issue on ``repo``; returns its URL (the HTML page when GitHub gives one)."""
        _check_repo(repo)
        if len(body) > MAX_COMMENT_CHARS:
            raise GitHubError(
                f"issue for {repo} is {len(body)} characters; GitHub accepts at most {MAX_COMMENT_CHARS}",
                operation="create issue",
                repo=repo,
            )

        def op() -> str:
            issue = self._repo(repo).create_issue(title=title, body=body)
            return str(issue.html_url or issue.url)

        return self._call("create issue", repo, op)

    def open_file_change_pr(
        self,
        repo: str,
        *,
        branch: str,
        paths: tuple[str, ...],
        edit: Callable[[str, str], str],
        message: str,
        title: str,
        body: str,
        base: str | None = None,
    ) -> OpenedPullRequest:
        """Open a PR from a new branch ``branch`` off ``base`` (default: the repository's default
        branch) whose one commit changes one file: the first of ``paths`` that exists at the
        base, replaced by ``edit(path, text)`` (which raises to refuse).

        Find-or-write, so a retry after a lost response neither fails nor duplicates: an open
        PR from ``branch`` is returned as is; a branch an earlier attempt created is reused
        while it still points at the base, or when it already holds the edit."""
        from github import GithubException, UnknownObjectException

        _check_repo(repo)
        if len(body) > MAX_COMMENT_CHARS:
            raise GitHubError(
                f"pull request body for {repo} is {len(body)} characters; GitHub accepts at most {MAX_COMMENT_CHARS}",
                operation="open pull request",
                repo=repo,
            )
        owner = repo.split("/")[0]

        def op() -> OpenedPullRequest:
            r = self._repo(repo)
            base_ref = base or r.default_branch
            base_sha = r.get_branch(base_ref).commit.sha
            for pull in r.get_pulls(state="open", head=f"{owner}:{branch}"):
                return OpenedPullRequest(
                    repo, int(pull.number), str(pull.html_url or pull.url), branch, pull.base.ref,
                    pull.base.sha, pull.head.sha, "", created=False,
                )  # fmt: skip
            for path in paths:
                try:
                    found = r.get_contents(path, ref=base_sha)
                except UnknownObjectException:
                    continue
                if isinstance(found, list):
                    raise GitHubError(
                        f"{path} is a directory in {repo} at {base_ref}", operation="open pull request", repo=repo
                    )
                break
            else:
                raise GitHubError(
                    f"none of {', '.join(paths)} exists in {repo} at {base_ref} ({base_sha[:12]})",
                    operation="open pull request",
                    repo=repo,
                )
            old_text = found.decoded_content.decode("utf-8")
            new_text = edit(path, old_text)
            try:
                head_sha = r.get_branch(branch).commit.sha
            except UnknownObjectException:
                head_sha = r.create_git_ref(f"refs/heads/{branch}", base_sha).object.sha
            if head_sha == base_sha:
                head_sha = r.update_file(path, message, new_text, found.sha, branch=branch)["commit"].sha
            else:
                there = r.get_contents(path, ref=head_sha)
                if isinstance(there, list) or there.decoded_content.decode("utf-8") != new_text:
                    raise GitHubError(
                        f"branch {branch} of {repo} already exists with other changes; delete it and try again",
                        operation="open pull request",
                        repo=repo,
                    )
            try:
                pull = r.create_pull(base=base_ref, head=branch, title=title, body=body)
            except GithubException as exc:
                if exc.status != 422:
                    raise
                pull = next(iter(r.get_pulls(state="open", head=f"{owner}:{branch}")), None)
                if pull is None:
                    raise
            return OpenedPullRequest(
                repo, int(pull.number), str(pull.html_url or pull.url), branch, base_ref, base_sha, head_sha, path,
                created=True,
            )  # fmt: skip

        return self._call(f"open pull request from {branch}", repo, op)

    def open_files_pr(
        self,
        repo: str,
        *,
        branch: str,
        files: Mapping[str, str],
        message: str,
        title: str,
        body: str,
        base: str | None = None,
        labels: Sequence[str] = (),
    ) -> OpenedPullRequest:
        """Open a PR from a new branch ``branch`` off ``base`` (default: the repository's default
        branch) that writes ``files`` (path -> text; one commit per file, the contents API's
        unit), creating the ones missing at the base and replacing the others, and labelled
        ``labels`` (GitHub creates a label that does not exist yet). An open PR from ``branch`` is
        returned as is; a branch that already exists is refused (it may hold someone's work)."""
        from github import GithubException, UnknownObjectException

        _check_repo(repo)
        if len(body) > MAX_COMMENT_CHARS:
            raise GitHubError(
                f"pull request body for {repo} is {len(body)} characters; GitHub accepts at most {MAX_COMMENT_CHARS}",
                operation="open pull request",
                repo=repo,
            )
        owner = repo.split("/")[0]

        def op() -> OpenedPullRequest:
            r = self._repo(repo)
            base_ref = base or r.default_branch
            base_sha = r.get_branch(base_ref).commit.sha
            for pull in r.get_pulls(state="open", head=f"{owner}:{branch}"):
                return OpenedPullRequest(
                    repo, int(pull.number), str(pull.html_url or pull.url), branch, pull.base.ref,
                    pull.base.sha, pull.head.sha, ",".join(files), created=False,
                )  # fmt: skip
            try:
                r.get_branch(branch)
            except UnknownObjectException:
                pass
            else:
                raise GitHubError(
                    f"branch {branch} of {repo} already exists; delete it or choose another name",
                    operation="open pull request",
                    repo=repo,
                )
            r.create_git_ref(f"refs/heads/{branch}", base_sha)
            head_sha = base_sha
            for path, text in files.items():
                try:
                    found = r.get_contents(path, ref=branch)
                except UnknownObjectException:
                    found = None
                if isinstance(found, list):
                    raise GitHubError(f"{path} is a directory in {repo}", operation="open pull request", repo=repo)
                if found is None:
                    head_sha = r.create_file(path, message, text, branch=branch)["commit"].sha
                else:
                    head_sha = r.update_file(path, message, text, found.sha, branch=branch)["commit"].sha
            try:
                pull = r.create_pull(base=base_ref, head=branch, title=title, body=body)
            except GithubException as exc:
                if exc.status != 422:
                    raise
                pull = next(iter(r.get_pulls(state="open", head=f"{owner}:{branch}")), None)
                if pull is None:
                    raise
            if labels:
                pull.add_to_labels(*labels)
            return OpenedPullRequest(
                repo, int(pull.number), str(pull.html_url or pull.url), branch, base_ref, base_sha, head_sha,
                ",".join(files), created=True,
            )  # fmt: skip

        return self._call(f"open pull request from {branch}", repo, op)

    def changed_files(self, repo: str, pr: int, cap: int = 300) -> list[str]:
        """Paths changed by ``pr``, in GitHub's order, at most ``cap``."""
        _check_repo(repo)

        def op() -> list[str]:
            files = self._repo(repo).get_pull(int(pr)).get_files()
            return [f.filename for f in islice(files, max(0, cap))]

        return self._call(f"list changed files of #{pr}", repo, op)

    def pull_request(self, repo: str, pr: int) -> PullRequestInfo:
        """The PR's current head/base (e.g. to find the latest comparison for ``/eval more``)."""
        _check_repo(repo)

        def op() -> PullRequestInfo:
            p = self._repo(repo).get_pull(int(pr))
            return PullRequestInfo(repo, int(pr), p.head.sha, p.base.sha, p.base.ref, p.state)

        return self._call(f"get pull request #{pr}", repo, op)

    # -- PyGithub plumbing ---------------------------------------------------------------------
    def _github_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = dict(base_url=self.base_url, timeout=self.timeout, retry=None, per_page=100, lazy=True)
        if not self.throttle:
            kw.update(seconds_between_requests=None, seconds_between_writes=None)
        return kw

    def _app_auth(self) -> Any:
        from github import Auth

        app_id, private_key = self.credentials.app_id, self.credentials.private_key
        if not app_id or not private_key:
            raise GitHubError(
                "GitHub App credentials need an app id and a private key", operation="configure", repo=None
            )
        return Auth.AppAuth(app_id, private_key)

    def _integration(self) -> Any:
        from github import GithubIntegration

        with self._lock:
            if "integration" not in self._clients:
                kw = self._github_kwargs()
                kw.pop("per_page")
                self._clients["integration"] = GithubIntegration(auth=self._app_auth(), **kw)
            return self._clients["integration"]

    def _installation_for(self, repo: str) -> int:
        if self.credentials.installation_id is not None:
            return self.credentials.installation_id
        if repo not in self._installations:
            owner, name = repo.split("/")
            self._installations[repo] = int(self._integration().get_repo_installation(owner, name).id)
        return self._installations[repo]

    def _gh(self, repo: str) -> Any:
        from github import Auth, Github

        key: Any = "token" if not self.credentials.is_app else self._installation_for(repo)
        with self._lock:
            if key not in self._clients:
                if self.credentials.is_app:
                    auth = self._app_auth().get_installation_auth(key)
                elif self.credentials.token:
                    auth = Auth.Token(self.credentials.token)
                else:
                    raise GitHubError("no GitHub token to authenticate with", operation="configure", repo=None)
                self._clients[key] = Github(auth=auth, **self._github_kwargs())
            return self._clients[key]

    def _repo(self, repo: str) -> Any:
        return self._gh(repo).get_repo(repo)

    def _whoami(self, repo: str) -> str | None:
        """Our own login, so a marker pasted into someone else's comment is never ours to edit."""
        from github import GithubException

        key: Any = "token" if not self.credentials.is_app else "app"
        if key not in self._login:
            try:
                if self.credentials.is_app:
                    self._login[key] = f"{self._integration().get_app().slug}[bot]"
                else:
                    self._login[key] = self._gh(repo).get_user().login
            except GithubException as exc:
                if exc.status not in (403, 404):
                    raise
                # Some tokens (e.g. Actions' GITHUB_TOKEN) may not read their own identity:
                # fall back to matching the marker alone.
                self._login[key] = None
        return self._login[key]

    def _our_check_runs(self, repo: str, head_sha: str) -> list[Any]:
        runs = self._repo(repo).get_commit(head_sha).get_check_runs(check_name=CHECK_RUN_NAME)
        ours = []
        for run in runs:
            app_id = getattr(getattr(run, "app", None), "id", None)
            if self.credentials.is_app and app_id is not None and str(app_id) != str(self.credentials.app_id):
                continue  # another app's run with the same name is not ours to edit
            ours.append(run)
        return ours

    # -- retries -------------------------------------------------------------------------------
    def _call(self, operation: str, repo: str, fn: Callable[[], T]) -> T:
        from github import GithubException
        from requests.exceptions import ConnectionError as RequestsConnectionError
        from requests.exceptions import Timeout

        last = ""
        for attempt in range(1, self.max_attempts + 1):
            try:
                return fn()
            except GithubException as exc:
                status = exc.status
                headers = {str(k).lower(): v for k, v in (exc.headers or {}).items()}
                message = _message(exc)
                wait = self._rate_limit_wait(status, headers, message, attempt)
                if wait is not None:
                    if wait > self.max_rate_limit_wait_seconds:
                        raise GitHubError(
                            f"{operation} on {repo}: rate limited for {wait:.0f}s more (budget "
                            f"{self.max_rate_limit_wait_seconds:.0f}s): {message}",
                            operation=operation,
                            repo=repo,
                            status=status,
                            transient=True,
                        ) from exc
                    last = f"HTTP {status} rate limited: {message}"
                elif status in _TRANSIENT_STATUS:
                    wait = self._backoff(attempt)
                    last = f"HTTP {status}: {message}"
                else:
                    raise GitHubError(
                        _explain(operation, repo, status, message), operation=operation, repo=repo, status=status
                    ) from exc
            except (RequestsConnectionError, Timeout) as exc:
                wait = self._backoff(attempt)
                last = f"{type(exc).__name__}: {exc}"
            if attempt < self.max_attempts:
                log.warning(
                    "github %s on %s: %s; retry %d/%d in %.2fs",
                    operation,
                    repo,
                    last,
                    attempt,
                    self.max_attempts - 1,
                    wait,
                )
                self._sleep(wait)
        raise GitHubError(
            f"{operation} on {repo} failed after {self.max_attempts} attempts; last: {last}",
            operation=operation,
            repo=repo,
            transient=True,
        )

    def _backoff(self, attempt: int) -> float:
        base = min(self.backoff_max_seconds, self.backoff_seconds * 2 ** (attempt - 1))
        return base * (0.5 + random.random() / 2)  # jitter, so replicas do not retry in step

    def _rate_limit_wait(self, status: int, headers: dict[str, Any], message: str, attempt: int) -> float | None:
        """Seconds to wait if this is a rate limit (403/429 with rate-limit signs), else None."""
        lowered = message.lower()
        limited = status == 429 or (
            status == 403
            and (headers.get("x-ratelimit-remaining") == "0" or "retry-after" in headers or "rate limit" in lowered)
        )
        if not limited:
            return None
        if "retry-after" in headers and str(headers["retry-after"]).isdigit():
            return float(headers["retry-after"])
        if headers.get("x-ratelimit-remaining") == "0" and str(headers.get("x-ratelimit-reset", "")).isdigit():
            return max(0.0, int(headers["x-ratelimit-reset"]) - time.time()) + 1.0
        # A secondary limit without a hint: GitHub asks for at least a minute between tries.
        return max(60.0, self._backoff(attempt))


def _message(exc: Any) -> str:
    data = exc.data if isinstance(exc.data, dict) else {}
    msg = data.get("message") or str(exc.data or "") or type(exc).__name__
    errors = data.get("errors")
    return f"{msg} {errors}" if errors else str(msg)


def _explain(operation: str, repo: str, status: int, message: str) -> str:
    hint = {
        401: "the credentials were rejected: check the token or the GitHub App id/private key",
        403: "the credentials lack permission (check runs need a GitHub App with checks:write; "
        "comments need pull_requests or issues write)",
        404: "not found: the repository, pull request or check run does not exist, or the "
        "credentials cannot see it (is the app installed on this repository?)",
        422: "GitHub rejected the request's content",
    }.get(status, "GitHub refused the request")
    return f"{operation} on {repo} failed with HTTP {status}: {hint} ({message})"


def _output(title: str, summary: str, text: str | None) -> dict[str, str]:
    out = {"title": title[:255], "summary": summary[:MAX_CHECK_TEXT_CHARS]}
    if text is not None:
        out["text"] = text[:MAX_CHECK_TEXT_CHARS]
    return out


def _check_state(status: str, conclusion: str | None) -> dict[str, Any]:
    """The status fields of a check-run write (ValueError for an impossible combination)."""
    if status not in _STATUSES:
        raise ValueError(f"check run status {status!r} is not one of {_STATUSES}")
    if status == "completed" and conclusion not in _CONCLUSIONS:
        raise ValueError(f"a completed check run needs a conclusion in {_CONCLUSIONS}, got {conclusion!r}")
    if status != "completed" and conclusion is not None:
        raise ValueError(f"conclusion {conclusion!r} given for a check run that is still {status!r}")
    if status == "completed":
        return {"status": status, "conclusion": conclusion, "completed_at": _utcnow()}
    return {"status": status}


def _shows(run: Any, status: str, conclusion: str | None, output: dict[str, str]) -> bool:
    """Whether ``run`` already shows this state and output (then it is not written again)."""
    shown = getattr(run, "output", None)
    return (
        run.status == status
        and (run.conclusion or None) == conclusion
        and shown is not None
        and all(getattr(shown, key, None) == value for key, value in output.items())
    )


def _opt(**kwargs: Any) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if v is not None}


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _check_repo(repo: str) -> None:
    if not isinstance(repo, str) or repo.count("/") != 1 or not all(repo.split("/")):
        raise ValueError(f"repo {repo!r} must look like 'owner/name'")


def _check_sha(sha: str) -> None:
    if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{40}", sha):
        raise ValueError(f"head sha {sha!r} is not a full 40-hex lowercase SHA")
