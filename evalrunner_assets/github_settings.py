"""GitHub's settings a deployment sets through its environment, each defined once.

Every setting has one name, type, default, environment variable and help text here; the GitHub
client and credentials (``resources/_github_client.py``), the Dagster ``GitHubResource`` and the
generated settings reference read them from here, when credentials or a client are made (never
at import), and the deploy files are checked against them by ``tests/github/test_github_settings.py``.
Secret values are read only from the environment or the files named here, and never logged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from evalrunner_assets.env_settings import EnvSetting, read_env_settings
from evalrunner_assets.errors import UserError

DEFAULT_API_URL = "https://api.github.com"
DEFAULT_GIT_BASE_URL = "https://github.com"


class GitHubSettingError(UserError, ValueError):
    """A GitHub variable's value is not its type; the message names it."""


@dataclass(frozen=True)
class GitHubSetting(EnvSetting):
    """One GitHub setting; a secret may instead be given as the file its ``*_FILE`` variable names."""

    def parse(self, value: str) -> Any:
        """``value`` (the variable's text) as this setting's type; an error names the variable."""
        if self.type is int:
            # A GitHub id is digits only (a sign or spaces are refused, as they always were).
            if not value.isdigit():
                raise GitHubSettingError(f"{self.env}={value!r} is not a number")
            return int(value)
        return value


API_URL = GitHubSetting(
    "api_url",
    str,
    DEFAULT_API_URL,
    "EVALRUNNER_GITHUB_API_URL",
    "REST API root: GitHub Enterprise (https://host/api/v3) or a test server.",
)
APP_ID = GitHubSetting(
    "app_id", str, None, "EVALRUNNER_GITHUB_APP_ID", "GitHub App id (the preferred credentials; with its private key)."
)
PRIVATE_KEY = GitHubSetting(
    "private_key", str, None, "EVALRUNNER_GITHUB_PRIVATE_KEY", "The GitHub App's private key (PEM).", secret=True
)
PRIVATE_KEY_FILE = GitHubSetting(
    "private_key_file",
    str,
    None,
    "EVALRUNNER_GITHUB_PRIVATE_KEY_FILE",
    "Path of a file holding the App's private key, instead of EVALRUNNER_GITHUB_PRIVATE_KEY.",
)
INSTALLATION_ID = GitHubSetting(
    "installation_id",
    int,
    None,
    "EVALRUNNER_GITHUB_INSTALLATION_ID",
    "The App's installation id (unset: looked up per repository).",
)
TOKEN = GitHubSetting(
    "token",
    str,
    None,
    "EVALRUNNER_GITHUB_TOKEN",
    "A token, when not using an App (only Apps, Actions' GITHUB_TOKEN included, may write check runs).",
    secret=True,
)
TOKEN_FILE = GitHubSetting(
    "token_file",
    str,
    None,
    "EVALRUNNER_GITHUB_TOKEN_FILE",
    "Path of a file holding the token, instead of EVALRUNNER_GITHUB_TOKEN.",
)
GIT_BASE_URL = GitHubSetting(
    "git_base_url",
    str,
    DEFAULT_GIT_BASE_URL,
    "EVALRUNNER_GIT_BASE_URL",
    "Git host a repository the PR sensor first hears about is cloned from, as <url>/<owner>/<name>.git, "
    "unless `evalrunner repos add` recorded its source.",
)
SETTINGS: tuple[GitHubSetting, ...] = (
    API_URL,
    GIT_BASE_URL,
    APP_ID,
    PRIVATE_KEY,
    PRIVATE_KEY_FILE,
    INSTALLATION_ID,
    TOKEN,
    TOKEN_FILE,
)
BY_ENV: dict[str, GitHubSetting] = {s.env: s for s in SETTINGS}
# Each secret's file variable.
FILE_OF: dict[str, GitHubSetting] = {PRIVATE_KEY.env: PRIVATE_KEY_FILE, TOKEN.env: TOKEN_FILE}


@dataclass(frozen=True)
class GitHubSettings:
    api_url: str = API_URL.default
    git_base_url: str = GIT_BASE_URL.default
    app_id: str | None = APP_ID.default
    private_key: str | None = field(default=PRIVATE_KEY.default, repr=False)
    private_key_file: str | None = PRIVATE_KEY_FILE.default
    installation_id: int | None = INSTALLATION_ID.default
    token: str | None = field(default=TOKEN.default, repr=False)
    token_file: str | None = TOKEN_FILE.default


def github_settings(env: Mapping[str, str] | None = None, **given: Any) -> GitHubSettings:
    """The settings the environment (default ``os.environ``, read now) gives; unset or empty
    variables keep their defaults. ``given`` (by setting name) are a caller's own values, e.g. a
    resource's config: one that is not None or empty wins, and its variable is not read."""
    return GitHubSettings(**read_env_settings(SETTINGS, env, given, concern="GitHub"))
